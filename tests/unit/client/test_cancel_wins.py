"""Cancel wins (issue 34, item 1): when the abort and any other report land
in the same step (a host call, the confirm hook, a prompt), the outcome is
`cancelled`, never `tool_failed` or `approval_error`, and the host call has
settled before `dispatch` returns.

The race is injected with the in-memory host's real process arm: a program
that sets the signal as it ends, so the arm reports and the abort is set
when the registry wakes up.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping

import pytest
from client_support import MakeCtx
from hostcap import (
    ApprovalPolicy,
    ToolCall,
    ToolCancelledError,
    ToolExecutionError,
    ToolPolicy,
    create_tool_registry,
)
from hostcap.approval import ToolApprovalContext, ToolApprovalDecision, ToolApprovalRequest
from hostcap.builtins import BUILTIN_TOOLS
from hostcap.events import ToolEvent
from hostcap.testing import MemoryProcess, MemoryToolHost, ProgramIO
from hostcap.testing.memory_process import STOCK_PROGRAMS


def _host_with(signal: asyncio.Event) -> MemoryToolHost:
    async def fails_as_aborted(io: ProgramIO) -> int:
        signal.set()
        raise RuntimeError("the program crashed")  # the arm reports SPAWN_FAILED

    async def exits_as_aborted(io: ProgramIO) -> int:
        signal.set()
        return 0

    programs: Mapping[str, object] = {
        **STOCK_PROGRAMS, "crash": fails_as_aborted, "finish": exits_as_aborted,
    }  # fmt: skip
    host = MemoryToolHost()
    host.process = MemoryProcess(programs, fs=host.fs)  # type: ignore[arg-type]
    return host


POLICY = ToolPolicy(allowed_commands={"crash", "finish", "echo"})


@pytest.mark.parametrize("program", ["crash", "finish"])
async def test_an_abort_in_the_same_step_as_the_host_report_is_cancelled(
    program: str, make_ctx: MakeCtx
) -> None:
    signal = asyncio.Event()
    host = _host_with(signal)
    events: list[ToolEvent] = []
    registry = create_tool_registry(tools=BUILTIN_TOOLS, host=host, on_event=events.append)
    with pytest.raises(ToolCancelledError) as raised:
        await registry.dispatch(
            ToolCall("race-1", "run_command", {"command": program}),
            make_ctx(signal=signal, tool_policy=POLICY),
        )
    assert raised.value.code == "cancelled"
    assert not raised.value.retryable
    # The host call settled before dispatch returned: nothing is live.
    assert host.process is not None and host.process.live == {}
    assert [event.kind for event in events][-1] == "tool_call_failed"
    assert events[-1].detail["code"] == "cancelled"


async def test_without_the_abort_the_same_crash_is_tool_failed(make_ctx: MakeCtx) -> None:
    # The control: the crash alone is the retryable tool_failed the race must not give.
    host = _host_with(asyncio.Event())
    registry = create_tool_registry(tools=BUILTIN_TOOLS, host=host)
    with pytest.raises(ToolExecutionError) as raised:
        await registry.dispatch(
            ToolCall("race-2", "run_command", {"command": "crash"}),
            make_ctx(tool_policy=POLICY),
        )
    assert raised.value.code == "tool_failed"


async def test_an_abort_while_the_hook_fails_is_cancelled_not_approval_error(
    make_ctx: MakeCtx,
) -> None:
    signal = asyncio.Event()

    async def confirm(request: ToolApprovalRequest) -> ToolApprovalDecision:
        signal.set()
        raise RuntimeError("the hook broke")

    registry = create_tool_registry(tools=BUILTIN_TOOLS, host=_host_with(signal))
    with pytest.raises(ToolCancelledError):
        await registry.dispatch(
            ToolCall("race-3", "run_command", {"command": "echo", "args": ["x"]}),
            make_ctx(
                signal=signal, tool_policy=POLICY, approval=ToolApprovalContext(confirm=confirm)
            ),
        )


@pytest.mark.parametrize("answer", ["reject", "raise"])
async def test_an_abort_while_prompting_wins_over_the_prompts_answer(
    answer: str, make_ctx: MakeCtx
) -> None:
    signal = asyncio.Event()
    host = _host_with(signal)

    async def prompt(card: object) -> str:
        signal.set()
        if answer == "raise":
            raise OSError("the terminal went away")
        return answer

    policy = ApprovalPolicy("accept-edits", prompt=prompt)
    registry = create_tool_registry(tools=BUILTIN_TOOLS, host=host)
    with pytest.raises(ToolCancelledError):
        await registry.dispatch(
            ToolCall("race-4", "run_command", {"command": "echo", "args": ["x"]}),
            make_ctx(signal=signal, tool_policy=POLICY, approval=policy.context()),
        )
    assert host.process is not None and host.process.spawns == []
