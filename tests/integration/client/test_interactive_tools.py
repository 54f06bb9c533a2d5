"""exec_command with an open input or a terminal, and write_stdin (issue
31), through the whole pipeline against a real hostcapd: a REPL across
turns, Ctrl-C that keeps the session, a line through a pipe, EOF, a
terminal's size and Resize, the audit of what was typed, and the approval
of writes into an interpreter."""

from __future__ import annotations

import asyncio
import re
import time
from typing import Any

import hostcap
import pytest
from client_daemon import Daemon, make_ctx
from hostcap import ApprovalPolicy, ToolCall, ToolDeniedByUserError, ToolExecutionError, ToolPolicy
from hostcap.approval import ApprovalCard
from hostcap.host import TerminalSize
from hostcap.registry import ToolRegistry

POLICY = ToolPolicy(allowed_commands={"sh", "cat", "python3", "sleep"})
#: Generous correctness deadline for a REPL's answer on a loaded machine.
ANSWER_DEADLINE_S = 30.0


def ctx(**overrides: Any) -> Any:
    return make_ctx(tool_policy=POLICY, **overrides)


async def start(registry: ToolRegistry, call_id: str, command: str, *args: str, **more: Any) -> str:
    context = more.pop("_ctx", None) or ctx()
    outcome = await registry.dispatch(
        ToolCall(call_id, "exec_command",
                 {"command": command, "args": list(args), "yield_time_ms": 0, **more}),
        context,
    )  # fmt: skip
    result: Any = outcome.result.unwrap()
    assert result.running and result.session_id, result
    return str(result.session_id)


async def type_until(
    registry: ToolRegistry, session: str, chars: str, pattern: str, context: Any = None
) -> str:
    """Write `chars`, then read until `pattern` shows up; what was read."""
    seen = ""
    call_id = f"w-{time.monotonic_ns()}"
    outcome = await registry.dispatch(
        ToolCall(
            call_id, "write_stdin", {"session_id": session, "chars": chars, "yield_time_ms": 500}
        ),
        context or ctx(),
    )
    seen += outcome.result.unwrap().stdout  # type: ignore[attr-defined]
    deadline = time.monotonic() + ANSWER_DEADLINE_S
    while not re.search(pattern, seen) and time.monotonic() < deadline:
        more = await registry.dispatch(
            ToolCall(f"{call_id}-r", "write_stdin", {"session_id": session, "yield_time_ms": 500}),
            context or ctx(),
        )
        seen += more.result.unwrap().stdout  # type: ignore[attr-defined]
    assert re.search(pattern, seen), f"{pattern!r} not in {seen!r}"
    return seen


async def test_a_line_through_a_pipe_and_the_end_of_input(
    daemon: Daemon, registry: ToolRegistry
) -> None:
    reader = await start(registry, "i-read", "sh", "-c", "read a; echo got:$a", stdin_open=True)
    outcome = await registry.dispatch(
        ToolCall("i-write", "write_stdin",
                 {"session_id": reader, "chars": "hello\n", "yield_time_ms": 5000}),
        ctx(),
    )  # fmt: skip
    result: Any = outcome.result.unwrap()
    assert result.stdout == "got:hello\n" and result.input_bytes == 6
    assert not result.running and result.exit_code == 0
    assert "wrote 6 bytes" in outcome.tool_result.unwrap()

    cat = await start(registry, "i-cat", "cat", stdin_open=True)
    await registry.dispatch(
        ToolCall("i-cat-1", "write_stdin", {"session_id": cat, "chars": "one\n"}), ctx()
    )
    ended = await registry.dispatch(
        ToolCall("i-cat-2", "write_stdin",
                 {"session_id": cat, "chars": "two\n", "close": True, "yield_time_ms": 5000}),
        ctx(),
    )  # fmt: skip
    done: Any = ended.result.unwrap()
    assert not done.running and done.exit_code == 0 and done.input_closed
    exits = [r for r in daemon.audit() if r["event"] == "process.exit" and r["spawn_id"] == cat]
    assert len(exits) == 1 and (exits[0]["input_writes"], exits[0]["input_bytes"]) == (2, 8)
    inputs = [r for r in daemon.audit() if r["event"] == "process.input" and r["spawn_id"] == cat]
    assert [r["bytes"] for r in inputs] == [4, 4]


async def test_a_python_repl_across_turns_survives_ctrl_c(registry: ToolRegistry) -> None:
    repl = await start(registry, "i-repl", "python3", "-q", tty=True)
    assert "42" in await type_until(registry, repl, "print(6*7)\n", r"\b42\b")
    await type_until(registry, repl, "import time; time.sleep(30)\n", r"sleep\(30\)")
    await asyncio.sleep(0.3)
    assert "KeyboardInterrupt" in await type_until(registry, repl, "\x03", "KeyboardInterrupt")
    assert "7" in await type_until(registry, repl, "print(3+4)\n", r"\b7\b")
    await registry.dispatch(ToolCall("i-repl-kill", "kill_session", {"session_id": repl}), ctx())


async def test_the_terminal_is_the_programs_and_has_the_size_asked(
    host: hostcap.GrpcToolHost, registry: ToolRegistry
) -> None:
    script = "read a; stty size; test -t 0 && test -t 1 && echo onatty; read b; stty size; read c"
    shell = await start(registry, "i-stty", "sh", "-c", script, tty={"rows": 30, "cols": 100})
    seen = await type_until(registry, shell, "\n", r"onatty")
    assert "30 100" in seen
    await host.process.resize(shell, TerminalSize(40, 120))
    assert "40 120" in await type_until(registry, shell, "\n", r"40 120")
    piped = await start(registry, "i-notty", "sh", "-c", "read a; test -t 1 || echo notatty; read b",
                        stdin_open=True)  # fmt: skip
    assert "notatty" in await type_until(registry, piped, "\n", "notatty")
    with pytest.raises(hostcap.HostError) as no_terminal:
        await host.process.resize(piped, TerminalSize(10, 10))
    assert no_terminal.value.reason == "NOT_A_TERMINAL"
    for session in (shell, piped):
        await host.process.kill_session(session)


async def test_writes_into_an_interpreter_take_cards_and_no_grant_covers_another_session(
    daemon: Daemon, registry: ToolRegistry
) -> None:
    cards: list[ApprovalCard] = []
    answers = ["approve", "approve", "reject", "allow-session", "approve"]

    async def prompt(card: ApprovalCard) -> str:
        cards.append(card)
        return answers.pop(0)

    policy_ctx = ctx(approval=ApprovalPolicy("accept-edits", prompt=prompt).context())
    first = await start(registry, "i-a", "sh", tty=True, _ctx=policy_ctx)
    second = await start(registry, "i-b", "sh", tty=True, _ctx=policy_ctx)
    with pytest.raises(ToolDeniedByUserError):
        await registry.dispatch(
            ToolCall("i-no", "write_stdin", {"session_id": first, "chars": "touch rejected\n"}),
            policy_ctx,
        )
    assert [
        r for r in daemon.audit() if r["event"] == "process.input" and r["spawn_id"] == first
    ] == []
    await type_until(registry, first, "echo granted-$((6*7))\n", "granted-42", policy_ctx)
    await type_until(registry, first, "echo again-$((1+1))\n", "again-2", policy_ctx)
    assert [c.tool_id for c in cards] == [
        "exec_command",
        "exec_command",
        "write_stdin",
        "write_stdin",
    ]
    await type_until(registry, second, "echo other\n", "other", policy_ctx)
    assert cards[-1].preview.session == second  # the grant of the first did not cover it
    for session in (first, second):
        await registry.dispatch(
            ToolCall(f"k-{session}", "kill_session", {"session_id": session}), ctx()
        )


async def test_a_session_of_another_engine_session_is_not_found(registry: ToolRegistry) -> None:
    cat = await start(registry, "i-mine", "cat", stdin_open=True)
    with pytest.raises(ToolExecutionError) as foreign:
        await registry.dispatch(
            ToolCall("i-theirs", "write_stdin", {"session_id": cat, "chars": "x\n"}),
            ctx(session_id="another-engine-session"),
        )
    assert foreign.value.host_reason == "NOT_FOUND"
    await registry.dispatch(ToolCall("i-mine-kill", "kill_session", {"session_id": cat}), ctx())


async def test_plan_admits_writes_only_into_the_session_it_approved(
    daemon: Daemon, registry: ToolRegistry
) -> None:
    earlier = ctx(approval=ApprovalPolicy("auto").context())
    unapproved = await start(registry, "p-old", "sh", tty=True, _ctx=earlier)
    cards: list[ApprovalCard] = []

    async def prompt(card: ApprovalCard) -> str:
        cards.append(card)
        return "approve"

    plan = ctx(approval=ApprovalPolicy("auto", "plan", prompt=prompt).context())
    approved = await start(registry, "p-new", "sh", tty=True, _ctx=plan)
    assert [c.tool_id for c in cards] == ["exec_command"]
    assert "approves those writes too" in cards[0].scopes["approve"]
    await type_until(registry, approved, "echo planned-$((6*7))\n", "planned-42", plan)
    with pytest.raises(ToolDeniedByUserError):
        await registry.dispatch(
            ToolCall("p-refused", "write_stdin", {"session_id": unapproved, "chars": "id\n"}), plan
        )
    assert len(cards) == 1  # refused, never carded
    inputs = [r for r in daemon.audit() if r["event"] == "process.input"]
    assert not [r for r in inputs if r["spawn_id"] == unapproved]
    for session in (approved, unapproved):
        await registry.dispatch(
            ToolCall(f"k-{session}", "kill_session", {"session_id": session}), ctx()
        )
