"""`plan_safe_actions` enforced at run time (issue 34, item 3): in a
contract mode a plugin tool's calls reach only the host arms its declared
actions allow; an effect outside them is refused before it happens, typed
and reported; a declaration the runtime cannot enforce is refused."""

from __future__ import annotations

import pytest
from client_support import MakeCtx
from hostcap import (
    BUILTIN_TOOLS,
    ApprovalPolicy,
    ToolCall,
    ToolDef,
    ToolPolicyClass,
    ToolPolicyError,
    create_tool_registry,
)
from hostcap.builtins import WriteFileResult
from hostcap.builtins.common import FrozenArgs
from hostcap.events import ToolEvent
from hostcap.host import ToolHost
from hostcap.testing import MemoryToolHost
from hostcap.tooldef import ToolRunContext


class NoArgs(FrozenArgs):
    pass


async def _writes_a_file(args: NoArgs, host: ToolHost, ctx: ToolRunContext) -> WriteFileResult:
    assert host.fs is not None
    done = await host.fs.write_file("lint-report.txt", b"fixed\n", labels=ctx.labels)
    return WriteFileResult(path=done.path, size=done.size, sha256=done.sha256, created=done.created)


def _plugin(actions: tuple[str, ...]) -> ToolDef[NoArgs, WriteFileResult]:
    return ToolDef(
        id="plugin_lint_report", source="plugin", description="lint and write a report",
        args_model=NoArgs, result_model=WriteFileResult, dispatch=_writes_a_file,
        policy=ToolPolicyClass(), plan_safe_actions=actions,
    )  # fmt: skip


CALL = ToolCall("p", "plugin_lint_report", {})


async def test_a_plugin_declaring_read_cannot_write_under_plan(make_ctx: MakeCtx) -> None:
    # The review's case: Plan + auto, a plugin declaring ("read",) wrote a file with no card.
    host = MemoryToolHost()
    events: list[ToolEvent] = []
    tool = _plugin(("read",))
    registry = create_tool_registry(tools=[*BUILTIN_TOOLS, tool], host=host, on_event=events.append)
    plan = make_ctx(granted_tool_ids={tool.id}, approval=ApprovalPolicy("auto", "plan").context())
    with pytest.raises(ToolPolicyError) as refused:
        await registry.dispatch(CALL, plan)
    assert refused.value.reason == "action_not_declared"
    assert "writing a file needs 'write'" in str(refused.value)
    assert host.fs is not None and host.fs.writes == []  # refused before the effect
    assert events[-1].kind == "tool_call_denied"
    assert events[-1].detail["reason"] == "action_not_declared"


async def test_a_declared_write_runs_and_carries_its_declaration_to_the_host(
    make_ctx: MakeCtx,
) -> None:
    host = MemoryToolHost()
    tool = _plugin(("read", "write"))
    registry = create_tool_registry(tools=[*BUILTIN_TOOLS, tool], host=host)
    plan = make_ctx(granted_tool_ids={tool.id}, approval=ApprovalPolicy("auto", "plan").context())
    await registry.dispatch(CALL, plan)
    assert host.fs is not None
    [write] = host.fs.writes
    assert write.labels["plan_safe_actions"] == "read,write"


async def test_outside_a_contract_the_declaration_does_not_restrict(make_ctx: MakeCtx) -> None:
    host = MemoryToolHost()
    tool = _plugin(("read",))
    registry = create_tool_registry(tools=[*BUILTIN_TOOLS, tool], host=host)
    await registry.dispatch(CALL, make_ctx(granted_tool_ids={tool.id}))
    assert host.fs is not None and len(host.fs.writes) == 1


@pytest.mark.parametrize("actions", [("teleport",), ("read", "format-disk")])
async def test_a_declaration_the_runtime_cannot_enforce_is_refused_in_a_contract(
    actions: tuple[str, ...], make_ctx: MakeCtx
) -> None:
    host = MemoryToolHost()
    tool = _plugin(actions)
    registry = create_tool_registry(tools=[*BUILTIN_TOOLS, tool], host=host)
    plan = make_ctx(granted_tool_ids={tool.id}, approval=ApprovalPolicy("auto", "plan").context())
    assert registry.catalogue(plan) == ()
    with pytest.raises(ToolPolicyError, match="mode_denied"):
        await registry.dispatch(CALL, plan)
    assert host.fs is not None and host.fs.writes == []
