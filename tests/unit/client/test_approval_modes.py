"""Approval on two axes: the permission mode and the contract, as a table;
then the confirm hook's failure modes, grants, and the frozen target."""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

import pytest
from client_support import ALL_BUILTINS, MakeCtx
from hostcap import (
    BUILTIN_TOOLS,
    ApprovalPolicy,
    ToolCall,
    ToolCancelledError,
    ToolDef,
    ToolDeniedByUserError,
    ToolPolicy,
    ToolPolicyClass,
    ToolPolicyError,
    ToolRegistry,
    create_tool_registry,
)
from hostcap.approval import (
    ApprovalCard,
    ToolActionPreview,
    ToolApprovalContext,
    ToolApprovalRequest,
    is_interpreter,
)
from hostcap.host import EgressResponse
from hostcap.policy import PolicyTarget
from hostcap.testing import MemoryEgress, MemoryMcp, MemoryOs, MemoryToolHost
from pydantic import BaseModel


class NoArgs(BaseModel):
    model_config = {"extra": "forbid", "frozen": True}


class Echo(BaseModel):
    ok: bool = True


async def _plain(args: Any, host: Any, ctx: Any) -> Echo:
    return Echo()


async def _mcp_dispatch(args: Any, host: Any, ctx: Any) -> Echo:
    from hostcap.host import McpCallInput

    await host.mcp.call(McpCallInput(server="docs", tool="search", arguments={}))
    return Echo()


MCP_SEARCH = ToolDef(
    id="mcp_docs_search", source="mcp", description="search docs", args_model=NoArgs, result_model=Echo,
    policy=ToolPolicyClass(egress="mcp"), dispatch=_mcp_dispatch, arms=frozenset({"mcp"}),
    policy_target=lambda a: PolicyTarget(host="docs"),
)  # fmt: skip
PLUGIN_SAFE = ToolDef(
    id="plugin_lint_check", source="plugin", description="lint", args_model=NoArgs, result_model=Echo,
    policy=ToolPolicyClass(), dispatch=_plain, plan_safe_actions=("read",),
)  # fmt: skip
PLUGIN_UNDECLARED = ToolDef(
    id="plugin_lint_fix", source="plugin", description="fix", args_model=NoArgs, result_model=Echo,
    policy=ToolPolicyClass(), dispatch=_plain,
)  # fmt: skip
EXTRA_TOOLS = (MCP_SEARCH, PLUGIN_SAFE, PLUGIN_UNDECLARED)

CALLS: dict[str, ToolCall] = {
    "read_file": ToolCall("c", "read_file", {"path": "notes.txt"}),
    "list_directory": ToolCall("c", "list_directory", {"path": "."}),
    "git_status": ToolCall("c", "git_status", {}),
    "write_file": ToolCall("c", "write_file", {"path": "src/app.py", "content": "x"}),
    "write_file absolute": ToolCall(
        "c", "write_file", {"path": "/workspace/src/app.py", "content": "x"}
    ),
    "write_file protected": ToolCall("c", "write_file", {"path": "Makefile", "content": "x"}),
    "run_command": ToolCall("c", "run_command", {"command": "echo", "args": ["hi"]}),
    "http_request": ToolCall("c", "http_request", {"url": "https://api.example.com/v1"}),
    "web_search": ToolCall("c", "web_search", {"query": "hostcap"}),
    "git_commit": ToolCall("c", "git_commit", {"message": "m"}),
    "invoke_agent": ToolCall("c", "invoke_agent", {"node_id": "n2"}),
    "notify": ToolCall("c", "notify", {"title": "done"}),
    "mcp tool": ToolCall("c", "mcp_docs_search", {}),
    "plugin with plan_safe_actions": ToolCall("c", "plugin_lint_check", {}),
    "plugin without plan_safe_actions": ToolCall("c", "plugin_lint_fix", {}),
}

RUN, CARD, REJECTED, MODE_DENIED = "run", "card", "user_rejected", "mode_denied"
# (call, contract): outcome under ask, accept-edits, auto.
TABLE: dict[tuple[str, str | None], tuple[str, str, str]] = {
    ("read_file", None): (RUN, RUN, RUN),
    ("list_directory", None): (RUN, RUN, RUN),
    ("git_status", None): (RUN, RUN, RUN),
    ("write_file", None): (REJECTED, RUN, RUN),
    ("write_file absolute", None): (REJECTED, CARD, RUN),
    ("write_file protected", None): (REJECTED, CARD, CARD),
    ("run_command", None): (REJECTED, CARD, RUN),
    ("http_request", None): (REJECTED, CARD, RUN),
    ("web_search", None): (REJECTED, CARD, RUN),
    ("git_commit", None): (RUN, RUN, RUN),  # gate-approved here; not model-controlled
    ("invoke_agent", None): (RUN, RUN, RUN),
    ("notify", None): (REJECTED, CARD, RUN),
    ("mcp tool", None): (REJECTED, CARD, RUN),
    ("plugin with plan_safe_actions", None): (RUN, RUN, RUN),
    ("plugin without plan_safe_actions", None): (RUN, RUN, RUN),
}
for _contract in ("plan", "goal"):
    TABLE |= {
        ("read_file", _contract): (RUN, RUN, RUN),
        ("list_directory", _contract): (RUN, RUN, RUN),
        ("git_status", _contract): (RUN, RUN, RUN),
        ("write_file", _contract): (MODE_DENIED,) * 3,
        ("write_file absolute", _contract): (MODE_DENIED,) * 3,
        ("write_file protected", _contract): (MODE_DENIED,) * 3,
        # "Plan with auto still asks before a command"; ask stays read-only.
        ("run_command", _contract): (REJECTED, CARD, CARD),
        ("http_request", _contract): (MODE_DENIED,) * 3,
        ("web_search", _contract): (MODE_DENIED,) * 3,
        ("git_commit", _contract): (MODE_DENIED,) * 3,
        ("invoke_agent", _contract): (MODE_DENIED,) * 3,
        ("notify", _contract): (REJECTED, CARD, RUN),
        ("mcp tool", _contract): (REJECTED, CARD, CARD),
        ("plugin with plan_safe_actions", _contract): (RUN, RUN, RUN),
        ("plugin without plan_safe_actions", _contract): (MODE_DENIED,) * 3,
    }
MODES = ("ask", "accept-edits", "auto")
ROWS = [
    (call, contract, mode, TABLE[call, contract][i])
    for (call, contract) in TABLE
    for i, mode in enumerate(MODES)
]


def _registry() -> tuple[ToolRegistry, MemoryToolHost]:
    async def git(io: Any) -> int:
        return 0

    async def search(arguments: Any) -> Any:
        return ["hit"]

    host = MemoryToolHost(
        egress=MemoryEgress({
            "https://api.example.com/v1": EgressResponse(status=200, headers={}, body="ok"),
            "https://search.example.com/": EgressResponse(status=200, headers={}, body="results"),
        }),
        os=MemoryOs(),
        mcp=MemoryMcp({("docs", "search"): search}),
    )  # fmt: skip
    assert host.fs is not None and host.process is not None
    host.fs.put("notes.txt", "hello\n")
    host.process.programs["git"] = git
    return create_tool_registry(tools=(*BUILTIN_TOOLS, *EXTRA_TOOLS), host=host), host


def _table_ctx(make_ctx: MakeCtx, policy: ApprovalPolicy) -> Any:
    async def delegate(node: str, value: Any) -> Any:
        return "done"

    return make_ctx(
        granted_tool_ids=ALL_BUILTINS | {t.id for t in EXTRA_TOOLS},
        approval=policy.context(),
        gate_approved=True,
        invoke_agent=delegate,
        config={"provider_url": "https://search.example.com/"},
    )


@pytest.mark.parametrize(
    ("call", "contract", "mode", "expected"), ROWS, ids=[f"{c}|{k}|{m}" for c, k, m, _ in ROWS]
)
async def test_mode_and_contract_table(
    call: str, contract: str | None, mode: str, expected: str, make_ctx: MakeCtx
) -> None:
    registry, _ = _registry()
    cards: list[ApprovalCard] = []

    async def approve(card: ApprovalCard) -> str:
        cards.append(card)
        return "approve"

    policy = ApprovalPolicy(mode, contract, prompt=approve)
    ctx = _table_ctx(make_ctx, policy)
    explained = registry.explain(CALLS[call], ctx)
    if expected in (RUN, CARD):
        await registry.dispatch(CALLS[call], ctx)
        assert len(cards) == (1 if expected == CARD else 0)
        assert explained.verdict == ("would_ask" if expected == CARD else "would_run")
    else:
        error_type = ToolPolicyError if expected == MODE_DENIED else ToolDeniedByUserError
        with pytest.raises(error_type) as caught:
            await registry.dispatch(CALLS[call], ctx)
        assert getattr(caught.value, "reason", None) == expected
        assert cards == []  # denied without a card
        assert explained.verdict == "denied" and explained.error is not None
        assert (
            type(explained.error) is error_type
            and getattr(explained.error, "reason", None) == expected
        )
    # The catalogue offered to the model uses the same predicate as the guard:
    # a tool that can only be denied (a contract's mode denial, or any
    # governed tool under the read-only ask mode) is not offered.
    # A contract mode defers a granted MCP tool behind tool_search: it is
    # offered through the search, not in the request (issue 34).
    offered = {tool.id for tool in registry.catalogue(ctx)}
    offered |= {tool.id for tool in registry.deferred(ctx)}
    assert (CALLS[call].name in offered) is (expected not in (MODE_DENIED, REJECTED))


async def test_plan_guard_decides_from_the_registered_tooldef_not_from_the_caller(
    make_ctx: MakeCtx,
) -> None:
    registry, host = _registry()
    policy = ApprovalPolicy("auto", "plan", prompt=None)
    # A caller claiming the call is read-only changes nothing: the registry
    # looks the tool up itself.
    ctx = make_ctx(approval=policy.context())
    with pytest.raises(ToolPolicyError) as caught:
        await registry.dispatch(
            ToolCall(
                "c",
                "write_file",
                {
                    "path": "a",
                    "content": "x",
                },
            ),
            ctx,
        )
    assert caught.value.reason == "mode_denied"
    with pytest.raises(ToolDeniedByUserError) as carded:
        await registry.dispatch(ToolCall("c", "run_command", {"command": "echo"}), ctx)
    # A card was needed under Plan + auto and nobody can be asked: fail closed.
    assert carded.value.reason == "no_approval_hook"
    assert host.process is not None and host.process.spawns == []


# ------------------------------------------------------------------ the hook


async def test_absent_confirm_hook_under_an_approval_regime_fails_closed(
    registry: ToolRegistry, make_ctx: MakeCtx
) -> None:
    with pytest.raises(ToolDeniedByUserError) as caught:
        await registry.dispatch(
            ToolCall("c", "write_file", {"path": "a", "content": "x"}),
            make_ctx(approval=ToolApprovalContext()),
        )
    assert caught.value.reason == "no_approval_hook"
    assert caught.value.code == "tool_denied" and not caught.value.recoverable


async def test_an_ungoverned_call_needs_no_hook(registry: ToolRegistry, make_ctx: MakeCtx) -> None:
    outcome = await registry.dispatch(
        ToolCall("c", "read_file", {"path": "notes.txt"}), make_ctx(approval=ToolApprovalContext())
    )
    assert "hello" in outcome.tool_result.unwrap()


async def test_no_approval_regime_is_the_author_trust_path(
    host: MemoryToolHost, registry: ToolRegistry, make_ctx: MakeCtx
) -> None:
    await registry.dispatch(
        ToolCall("c", "run_command", {"command": "echo"}), make_ctx(approval=None)
    )
    assert host.process is not None and len(host.process.spawns) == 1


@pytest.mark.parametrize(
    "failure",
    [RuntimeError("prompt UI crashed"), "not-a-choice", "always"],
    ids=["raises", "bad-answer", "always-not-offered"],
)
async def test_a_failing_prompt_is_approval_error(
    failure: Any, host: MemoryToolHost, make_ctx: MakeCtx
) -> None:
    assert host.process is not None
    host.process.programs["bash"] = host.process.programs["echo"]
    registry = create_tool_registry(tools=BUILTIN_TOOLS, host=host)

    async def prompt(card: ApprovalCard) -> str:
        if isinstance(failure, Exception):
            raise failure
        return str(failure)

    policy = ApprovalPolicy("accept-edits", prompt=prompt)
    ctx = make_ctx(approval=policy.context(), tool_policy=ToolPolicy(allowed_commands={"bash"}))
    with pytest.raises(ToolDeniedByUserError) as caught:
        await registry.dispatch(
            ToolCall("c", "run_command", {"command": "bash", "args": ["-c", "id"]}), ctx
        )
    assert caught.value.reason == "approval_error"
    assert caught.value.code == "tool_denied"
    assert host.process.spawns == []


async def test_a_hook_returning_garbage_is_approval_error(
    registry: ToolRegistry, make_ctx: MakeCtx
) -> None:
    async def confirm(request: Any) -> Any:
        return True  # not a ToolApprovalDecision

    with pytest.raises(ToolDeniedByUserError) as caught:
        await registry.dispatch(
            ToolCall("c", "write_file", {"path": "a", "content": "x"}),
            make_ctx(approval=ToolApprovalContext(confirm=confirm)),
        )
    assert caught.value.reason == "approval_error"


async def test_a_rejection_is_user_rejected(
    host: MemoryToolHost, registry: ToolRegistry, make_ctx: MakeCtx
) -> None:
    async def reject(card: ApprovalCard) -> str:
        return "reject"

    policy = ApprovalPolicy("accept-edits", prompt=reject)
    with pytest.raises(ToolDeniedByUserError) as caught:
        await registry.dispatch(
            ToolCall("c", "run_command", {"command": "echo"}), make_ctx(approval=policy.context())
        )
    assert caught.value.reason == "user_rejected" and not caught.value.recoverable
    assert host.process is not None and host.process.spawns == []


async def test_an_abort_while_the_card_is_open_takes_the_cancel_path(
    host: MemoryToolHost, registry: ToolRegistry, make_ctx: MakeCtx
) -> None:
    signal = asyncio.Event()
    card_open = asyncio.Event()
    prompt_cancelled = asyncio.Event()

    async def prompt(card: ApprovalCard) -> str:
        card_open.set()
        try:
            await asyncio.Event().wait()  # the human never answers
        except asyncio.CancelledError:
            prompt_cancelled.set()
            raise
        return "approve"

    policy = ApprovalPolicy("accept-edits", prompt=prompt)
    ctx = make_ctx(approval=policy.context(), signal=signal)
    task = asyncio.create_task(
        registry.dispatch(ToolCall("c", "run_command", {"command": "echo"}), ctx)
    )
    await card_open.wait()
    signal.set()
    with pytest.raises(ToolCancelledError) as caught:
        await task
    assert caught.value.code == "cancelled"
    assert prompt_cancelled.is_set()
    assert host.process is not None and host.process.spawns == []


async def test_cancelling_the_callers_task_while_the_card_is_open_propagates(
    registry: ToolRegistry, make_ctx: MakeCtx
) -> None:
    card_open = asyncio.Event()

    async def prompt(card: ApprovalCard) -> str:
        card_open.set()
        await asyncio.Event().wait()
        return "approve"

    policy = ApprovalPolicy("accept-edits", prompt=prompt)
    task = asyncio.create_task(
        registry.dispatch(
            ToolCall("c", "run_command", {"command": "echo"}), make_ctx(approval=policy.context())
        )
    )
    await card_open.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


# ---------------------------------------------------------------- grants


async def test_allow_session_suppresses_cards_for_that_tool_in_that_session_only(
    make_ctx: MakeCtx,
) -> None:
    registry, _ = _registry()
    cards: list[tuple[str, str | None]] = []
    answers = iter(["allow-session", "approve", "approve", "approve"])

    async def prompt(card: ApprovalCard) -> str:
        cards.append((card.tool_id, card.session_id))
        return next(answers)

    policy = ApprovalPolicy("accept-edits", prompt=prompt)

    def ctx(session: str) -> Any:
        return make_ctx(approval=policy.context(), session_id=session)

    run = ToolCall("c", "run_command", {"command": "echo"})
    await registry.dispatch(run, ctx("A"))  # card, answered allow-session
    await registry.dispatch(
        ToolCall("c", "run_command", {"command": "cat"}), ctx("A")
    )  # suppressed
    await registry.dispatch(
        ToolCall("c", "http_request", {"url": "https://api.example.com/v1"}), ctx("A")
    )  # other tool
    await registry.dispatch(run, ctx("B"))  # other session
    assert cards == [("run_command", "A"), ("http_request", "A"), ("run_command", "B")]
    assert policy.session_grants("A") == {"run_command"}
    assert policy.session_grants("B") == frozenset()
    policy.end_session("A")
    await registry.dispatch(run, ctx("A"))
    assert cards[-1] == ("run_command", "A")


async def test_allow_session_lifts_the_contract_card_but_never_a_protected_path(
    make_ctx: MakeCtx,
) -> None:
    registry, _ = _registry()
    cards: list[str] = []

    async def prompt(card: ApprovalCard) -> str:
        cards.append(card.why)
        return "allow-session"

    plan = ApprovalPolicy("auto", "plan", prompt=prompt)
    run = ToolCall("c", "run_command", {"command": "echo"})
    await registry.dispatch(run, make_ctx(approval=plan.context()))
    await registry.dispatch(run, make_ctx(approval=plan.context()))
    assert len(cards) == 1

    edits = ApprovalPolicy("accept-edits", prompt=prompt)
    protected = ToolCall("c", "write_file", {"path": "Makefile", "content": "x"})
    await registry.dispatch(protected, make_ctx(approval=edits.context()))
    await registry.dispatch(protected, make_ctx(approval=edits.context()))
    assert cards[1:] == ["the path is protected", "the path is protected"]


async def test_always_covers_the_exact_target_across_sessions(make_ctx: MakeCtx) -> None:
    registry, _ = _registry()
    seen: list[ApprovalCard] = []

    async def prompt(card: ApprovalCard) -> str:
        seen.append(card)
        return "always" if "always" in card.choices else "approve"

    policy = ApprovalPolicy("accept-edits", prompt=prompt)
    await registry.dispatch(
        ToolCall("c", "run_command", {"command": "echo"}),
        make_ctx(approval=policy.context(), session_id="A"),
    )
    await registry.dispatch(
        ToolCall("c", "run_command", {"command": "echo"}),
        make_ctx(approval=policy.context(), session_id="B"),
    )
    assert len(seen) == 1
    # The same program with other arguments is another target (issue 16).
    await registry.dispatch(
        ToolCall("c", "run_command", {"command": "echo", "args": ["x"]}),
        make_ctx(approval=policy.context(), session_id="B"),
    )
    assert len(seen) == 2
    await registry.dispatch(
        ToolCall("c", "run_command", {"command": "cat"}),
        make_ctx(approval=policy.context(), session_id="B"),
    )
    assert len(seen) == 3


@pytest.mark.parametrize(
    "command", ["bash", "sh", "python", "python3.11", "/usr/bin/env", "sudo", "node", "git"]
)
async def test_always_is_never_offered_for_interpreters(command: str) -> None:
    assert is_interpreter(command)
    offered: list[tuple[str, ...]] = []

    async def prompt(card: ApprovalCard) -> str:
        offered.append(card.choices)
        return "approve"

    policy = ApprovalPolicy("accept-edits", prompt=prompt)
    preview = ToolActionPreview(command=command)
    request = ToolApprovalRequest(
        tool_id="run_command", tool_call_id="c", action="process", preview=preview, session_id="s",
        fs_scope="workspace-write", unredacted_preview=preview,
    )  # fmt: skip
    decision = await policy.confirm(request)
    assert decision.outcome == "approve"
    assert offered == [("approve", "reject", "allow-session")]


async def test_always_is_offered_for_an_ordinary_program_through_the_pipeline(
    registry: ToolRegistry, make_ctx: MakeCtx
) -> None:
    offered: list[tuple[str, ...]] = []

    async def prompt(card: ApprovalCard) -> str:
        offered.append(card.choices)
        return "approve"

    policy = ApprovalPolicy("accept-edits", prompt=prompt)
    await registry.dispatch(
        ToolCall("c", "run_command", {"command": "echo"}), make_ctx(approval=policy.context())
    )
    assert offered == [("approve", "reject", "allow-session", "always")]


@pytest.mark.parametrize("command", ["echo", "pytest", "ls", "python-docs-helper"])
def test_ordinary_programs_are_not_interpreters(command: str) -> None:
    assert not is_interpreter(command)


# ------------------------------------------------------- preview and target


async def test_the_card_preview_is_scrubbed_and_the_unredacted_copy_never_serialised(
    make_ctx: MakeCtx,
) -> None:
    registry, host = _registry()
    token = "ghp_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4"
    requests: list[Any] = []
    cards: list[ApprovalCard] = []
    policy = ApprovalPolicy("accept-edits")

    async def confirm(request: Any) -> Any:
        requests.append(request)
        return await policy.confirm(request)

    async def prompt(card: ApprovalCard) -> str:
        cards.append(card)
        return "approve"

    policy.prompt = prompt
    await registry.dispatch(
        ToolCall("c", "run_command", {"command": "echo", "args": ["--token", token]}),
        make_ctx(approval=ToolApprovalContext(confirm=confirm)),
    )
    (request,) = requests
    assert token not in (request.preview.command or "")
    assert "[redacted]" in (request.preview.command or "")
    assert token not in repr(request)
    assert token not in str(request.to_event())
    assert token not in repr(cards[0])
    # What ran is the real, unscrubbed command.
    assert host.process is not None and host.process.spawns[0].argv == ("echo", "--token", token)


async def test_the_target_is_captured_once_and_is_what_runs(
    host: MemoryToolHost, registry: ToolRegistry, make_ctx: MakeCtx
) -> None:
    args: dict[str, Any] = {"command": "echo", "args": ["safe"]}
    previews: list[str | None] = []

    async def confirm(request: Any) -> Any:
        previews.append(request.preview.command)
        # A caller changing its own dict while the card is open changes nothing,
        # and the request itself is frozen.
        args["command"] = "rm"
        args["args"] = ["-rf", "/"]
        with pytest.raises(dataclasses.FrozenInstanceError):
            request.preview.command = "rm -rf /"
        from hostcap.approval import ToolApprovalDecision

        return ToolApprovalDecision(outcome="approve")

    await registry.dispatch(
        ToolCall("c", "run_command", args), make_ctx(approval=ToolApprovalContext(confirm=confirm))
    )
    assert previews == ["echo safe"]
    assert host.process is not None and host.process.spawns[0].argv == ("echo", "safe")


def test_unknown_mode_or_contract_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="permission mode"):
        ApprovalPolicy("yolo")
    with pytest.raises(ValueError, match="contract"):
        ApprovalPolicy("auto", "sprint")
