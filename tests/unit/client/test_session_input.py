"""write_stdin and exec_command's terminal through the dispatch pipeline
(issue 31, item 4): which writes take a card, which are refused, which
reach the host, and that what comes back is bounded and marked untrusted.

The rule: the program is approved when its session starts. A write into a
session whose program runs what it is given (a shell, an interpreter) runs
arbitrary code: in accept-edits each such write takes a card unless an
allow-session grant covers that exact session; in Plan/Goal it is refused
unless that exact session's start was approved under the contract; `ask`
refuses it; no grant covers another session.
"""

from __future__ import annotations

from typing import Any

import pytest
from client_support import ALL_BUILTINS, MakeCtx
from hostcap import (
    BUILTIN_TOOLS,
    ApprovalPolicy,
    ToolArgsInvalidError,
    ToolCall,
    ToolDeniedByUserError,
    ToolExecutionError,
    ToolPolicy,
    create_tool_registry,
)
from hostcap.approval import ApprovalCard
from hostcap.bounding import ToolResultLimits
from hostcap.grpc_input import write_requests
from hostcap.host import DEFAULT_TERMINAL, MAX_INPUT_CHUNK, TerminalSize
from hostcap.registry import ToolRegistry
from hostcap.session_input import ALL_INPUT_INTERPRETERS, input_runs_code
from hostcap.testing import MemoryToolHost
from hostcap.untrusted import Untrusted
from session_arm import SessionArm

POLICY = ToolPolicy(allowed_commands={"cat", "python3", "sh", "psql", "node"})


class Prompt:
    """Answers each card from a script, and keeps the cards it was shown."""

    def __init__(self, *answers: str) -> None:
        self.answers = list(answers)
        self.cards: list[ApprovalCard] = []

    async def __call__(self, card: ApprovalCard) -> str:
        self.cards.append(card)
        return self.answers.pop(0)


@pytest.fixture
def arm() -> SessionArm:
    return SessionArm()


@pytest.fixture
def sessions(arm: SessionArm) -> ToolRegistry:
    return create_tool_registry(tools=BUILTIN_TOOLS, host=MemoryToolHost(process=arm))  # type: ignore[arg-type]


def _ctx(make_ctx: MakeCtx, policy: ApprovalPolicy | None, **overrides: Any) -> Any:
    fields: dict[str, Any] = {"tool_policy": POLICY, "granted_tool_ids": ALL_BUILTINS}
    if policy is not None:
        fields["approval"] = policy.context()
    fields.update(overrides)
    return make_ctx(**fields)


async def _start(registry: ToolRegistry, ctx: Any, command: str, call_id: str, **args: Any) -> str:
    outcome = await registry.dispatch(
        ToolCall(call_id, "exec_command", {"command": command, "background": True, **args}), ctx
    )
    session_id: str = outcome.result.unwrap().session_id
    assert session_id
    return session_id


def _write(session_id: str, chars: str, call_id: str = "w", **more: Any) -> ToolCall:
    return ToolCall(call_id, "write_stdin", {"session_id": session_id, "chars": chars, **more})


# ------------------------------------------------------------------ the list


@pytest.mark.parametrize(
    "command",
    ["sh", "bash", "zsh", "dash", "python3", "python3.12", "/usr/bin/python3", "node", "ruby",
     "perl", "psql", "irb", "sqlite3", "gdb", "vim", "less", "env", "ssh", "ipython"],
)  # fmt: skip
def test_shells_and_interpreters_run_what_is_written(command: str) -> None:
    assert input_runs_code(command)


@pytest.mark.parametrize("command", ["cat", "tee", "sort", "wc", "grep", "bc", "head"])
def test_other_programs_read_data(command: str) -> None:
    assert not input_runs_code(command)
    assert command not in ALL_INPUT_INTERPRETERS


# ----------------------------------------------------------- the terminal arg


async def test_exec_command_tty_true_is_a_default_terminal_and_open_input(
    sessions: ToolRegistry, arm: SessionArm, make_ctx: MakeCtx
) -> None:
    first = await _start(sessions, _ctx(make_ctx, None), "cat", "t1", tty=True)
    sized = await _start(sessions, _ctx(make_ctx, None), "cat", "t2", tty={"rows": 40, "cols": 100})
    piped = await _start(sessions, _ctx(make_ctx, None), "cat", "t3", stdin_open=True)
    closed = await _start(sessions, _ctx(make_ctx, None), "cat", "t4")
    assert arm.sessions[first].options.tty == DEFAULT_TERMINAL == TerminalSize(24, 80)
    assert arm.sessions[sized].options.tty == TerminalSize(40, 100)
    assert (arm.sessions[piped].options.tty, arm.sessions[piped].options.stdin_open) == (None, True)
    assert not arm.sessions[closed].info.stdin_open


@pytest.mark.parametrize(
    "tty", [{"rows": 0, "cols": 80}, {"rows": 24, "cols": 1001}, {"rows": 24}, "yes", 3]
)
async def test_a_bad_terminal_is_refused_before_anything_runs(
    sessions: ToolRegistry, arm: SessionArm, make_ctx: MakeCtx, tty: object
) -> None:
    with pytest.raises(ToolArgsInvalidError) as refused:
        await sessions.dispatch(
            ToolCall("bad", "exec_command", {"command": "cat", "tty": tty}), _ctx(make_ctx, None)
        )
    assert "tty" in refused.value.message
    assert arm.sessions == {}


# ---------------------------------------------------------------- the writes


async def test_a_write_into_a_data_program_takes_no_card(
    sessions: ToolRegistry, arm: SessionArm, make_ctx: MakeCtx
) -> None:
    prompt = Prompt("approve")  # the start of the session only
    ctx = _ctx(make_ctx, ApprovalPolicy("accept-edits", prompt=prompt))
    session = await _start(sessions, ctx, "cat", "start", stdin_open=True)
    outcome = await sessions.dispatch(_write(session, "hello\n"), ctx)
    assert len(prompt.cards) == 1 and prompt.cards[0].tool_id == "exec_command"
    assert bytes(arm.sessions[session].written) == b"hello\n"
    assert isinstance(outcome.tool_result, Untrusted) and isinstance(outcome.result, Untrusted)
    text = outcome.tool_result.unwrap()
    assert "got:hello" in text and "wrote 6 bytes" in text


async def test_accept_edits_cards_each_write_into_an_interpreter_until_that_session_is_granted(
    sessions: ToolRegistry, arm: SessionArm, make_ctx: MakeCtx
) -> None:
    prompt = Prompt("approve", "approve", "reject", "approve", "allow-session", "approve")
    ctx = _ctx(make_ctx, ApprovalPolicy("accept-edits", prompt=prompt))
    repl = await _start(sessions, ctx, "python3", "start-a", tty=True)
    other = await _start(sessions, ctx, "python3", "start-b", tty=True)
    assert [c.tool_id for c in prompt.cards] == ["exec_command", "exec_command"]
    assert "what is written into it runs as this program" in prompt.cards[0].describe()
    assert "asked about separately" in prompt.cards[0].scopes["approve"]

    # Rejected: nothing is written.
    with pytest.raises(ToolDeniedByUserError):
        await sessions.dispatch(_write(repl, "import os\x03\n", "w1"), ctx)
    assert arm.sessions[repl].written == b""
    card = prompt.cards[-1]
    assert card.tool_id == "write_stdin" and card.preview.session == repl
    assert card.preview.input == "import os\\x03\\n"  # control characters made visible
    assert "always" not in card.choices  # never for code
    assert (
        repl in card.scopes["allow-session"] and "no other session" in card.scopes["allow-session"]
    )

    await sessions.dispatch(_write(repl, "print(6*7)\n", "w2"), ctx)  # approve once
    await sessions.dispatch(_write(repl, "x = 1\n", "w3"), ctx)  # allow-session
    cards = len(prompt.cards)
    await sessions.dispatch(_write(repl, "x += 1\n", "w4"), ctx)  # the grant covers it
    assert len(prompt.cards) == cards
    assert bytes(arm.sessions[repl].written) == b"print(6*7)\nx = 1\nx += 1\n"

    # No grant covers another session, even of the same program.
    await sessions.dispatch(_write(other, "1\n", "w5"), ctx)
    assert len(prompt.cards) == cards + 1 and prompt.cards[-1].preview.session == other

    # Nor the same exec session from another engine session.
    elsewhere = _ctx(make_ctx, ApprovalPolicy("accept-edits", prompt=Prompt("approve")),
                     session_id="session-2")  # fmt: skip
    with pytest.raises(ToolExecutionError) as foreign:
        await sessions.dispatch(_write(repl, "2\n", "w6"), elsewhere)
    assert foreign.value.host_reason == "NOT_FOUND"
    assert bytes(arm.sessions[repl].written).endswith(b"x += 1\n")


async def test_reading_and_closing_an_interpreter_session_take_no_card(
    sessions: ToolRegistry, arm: SessionArm, make_ctx: MakeCtx
) -> None:
    prompt = Prompt("approve")
    ctx = _ctx(make_ctx, ApprovalPolicy("accept-edits", prompt=prompt))
    repl = await _start(sessions, ctx, "python3", "start", stdin_open=True)
    await sessions.dispatch(_write(repl, "", "poll"), ctx)
    await sessions.dispatch(_write(repl, "", "eof", close=True), ctx)
    assert len(prompt.cards) == 1 and arm.sessions[repl].closed


async def test_auto_approves_and_ask_refuses_a_write_into_an_interpreter(
    sessions: ToolRegistry, arm: SessionArm, make_ctx: MakeCtx
) -> None:
    auto = _ctx(make_ctx, ApprovalPolicy("auto"))
    repl = await _start(sessions, auto, "sh", "start", tty=True)
    data = await _start(sessions, auto, "cat", "start-cat", stdin_open=True)
    await sessions.dispatch(_write(repl, "echo hi\n"), auto)
    assert bytes(arm.sessions[repl].written) == b"echo hi\n"
    ask = _ctx(make_ctx, ApprovalPolicy("ask"))
    with pytest.raises(ToolDeniedByUserError) as refused:
        await sessions.dispatch(_write(repl, "rm -rf ~\n"), ask)
    assert refused.value.label == "ask mode is read-only"
    assert bytes(arm.sessions[repl].written) == b"echo hi\n"
    await sessions.dispatch(_write(data, "text\n"), ask)  # input to an approved data program
    assert bytes(arm.sessions[data].written) == b"text\n"


@pytest.mark.parametrize("contract", ["plan", "goal"])
async def test_a_contract_refuses_input_unless_that_exact_session_was_approved_for_it(
    sessions: ToolRegistry, arm: SessionArm, make_ctx: MakeCtx, contract: str
) -> None:
    # A session started outside the contract (its writes were carded one by one).
    before = _ctx(make_ctx, ApprovalPolicy("accept-edits", prompt=Prompt("approve")))
    unapproved = await _start(sessions, before, "python3", "old", tty=True)

    prompt = Prompt("approve")
    ctx = _ctx(make_ctx, ApprovalPolicy("auto", contract, prompt=prompt))
    repl = await _start(sessions, ctx, "python3", "start", tty=True)
    card = prompt.cards[0]
    assert card.tool_id == "exec_command"
    assert "approving this approves those writes too" in card.scopes["approve"]
    await sessions.dispatch(_write(repl, "print(6*7)\n", "w1"), ctx)
    await sessions.dispatch(_write(repl, "print(7)\n", "w2"), ctx)
    assert len(prompt.cards) == 1  # no card per write: the session's start approved them
    assert bytes(arm.sessions[repl].written) == b"print(6*7)\nprint(7)\n"

    with pytest.raises(ToolDeniedByUserError) as refused:
        await sessions.dispatch(_write(unapproved, "import os\n", "w3"), ctx)
    assert "refuses input" in (refused.value.label or "")
    assert len(prompt.cards) == 1 and arm.sessions[unapproved].written == b""

    # The same exec session from another engine session is not approved either.
    other = _ctx(make_ctx, ApprovalPolicy("auto", contract, prompt=Prompt()),
                 session_id="session-2")  # fmt: skip
    with pytest.raises((ToolDeniedByUserError, ToolExecutionError)):
        await sessions.dispatch(_write(repl, "print(1)\n", "w4"), other)
    assert bytes(arm.sessions[repl].written) == b"print(6*7)\nprint(7)\n"


async def test_a_contract_session_started_without_a_card_answer_is_not_approved(
    sessions: ToolRegistry, arm: SessionArm, make_ctx: MakeCtx
) -> None:
    # No one to ask: the start is refused, so no session exists to write into.
    ctx = _ctx(make_ctx, ApprovalPolicy("auto", "plan"))
    with pytest.raises(ToolDeniedByUserError):
        await _start(sessions, ctx, "python3", "start", tty=True)
    assert arm.sessions == {}


async def test_a_contract_admits_input_to_an_approved_data_program(
    sessions: ToolRegistry, arm: SessionArm, make_ctx: MakeCtx
) -> None:
    prompt = Prompt("approve")
    ctx = _ctx(make_ctx, ApprovalPolicy("accept-edits", "plan", prompt=prompt))
    data = await _start(sessions, ctx, "cat", "start", stdin_open=True)
    await sessions.dispatch(_write(data, "rows\n"), ctx)
    assert len(prompt.cards) == 1 and bytes(arm.sessions[data].written) == b"rows\n"


async def test_unknown_and_closed_sessions_are_typed_refusals(
    sessions: ToolRegistry, arm: SessionArm, make_ctx: MakeCtx
) -> None:
    ctx = _ctx(make_ctx, ApprovalPolicy("auto"))
    with pytest.raises(ToolExecutionError) as unknown:
        await sessions.dispatch(_write("sess-404", "x\n"), ctx)
    assert unknown.value.host_reason == "NOT_FOUND"
    closed = await _start(sessions, ctx, "cat", "start")  # stdin not open
    with pytest.raises(ToolExecutionError) as not_open:
        await sessions.dispatch(_write(closed, "x\n"), ctx)
    assert not_open.value.host_reason == "STDIN_NOT_OPEN"
    assert arm.sessions[closed].written == b""


async def test_what_a_write_returns_is_bounded_and_marked(
    sessions: ToolRegistry, arm: SessionArm, make_ctx: MakeCtx
) -> None:
    ctx = _ctx(make_ctx, None, limits=ToolResultLimits(max_bytes=2048, max_lines=50))
    data = await _start(sessions, ctx, "cat", "start", tty=True)
    outcome = await sessions.dispatch(_write(data, "y\n" * 5000), ctx)
    assert outcome.truncated and len(outcome.tool_result.unwrap().encode()) < 4096
    assert outcome.untrusted_content
    assert "--- terminal ---" in outcome.tool_result.unwrap()
    assert outcome.result.unwrap().stdout.count("y\n") == 5000  # the full result, for the engine


# ------------------------------------------------------------- the wire pieces


def test_a_write_goes_in_pieces_the_daemon_takes_and_closes_on_the_last() -> None:
    data = b"x" * (2 * MAX_INPUT_CHUNK + 10)
    pieces = list(write_requests("s", data, close=True))
    assert [len(p.data) for p in pieces] == [MAX_INPUT_CHUNK, MAX_INPUT_CHUNK, 10]
    assert [p.close for p in pieces] == [False, False, True]
    assert b"".join(p.data for p in pieces) == data
    assert [(p.data, p.close) for p in write_requests("s", b"", close=True)] == [(b"", True)]
    assert list(write_requests("s", b"", close=False)) == []


# ------------------------------------------------- the same tools, elsewhere


def test_mcp_and_the_adapters_offer_the_session_tools(
    sessions: ToolRegistry, make_ctx: MakeCtx
) -> None:
    from hostcap.adapters.anthropic import anthropic_tools
    from hostcap.adapters.openai import chat_tools, responses_tools
    from hostcap.builtins import WRITE_STDIN
    from hostcap.mcp_server import tool_annotations

    ctx = _ctx(make_ctx, ApprovalPolicy("accept-edits"))
    for tools in (chat_tools(sessions, ctx, strict=True), responses_tools(sessions, ctx)):
        by_name = {t.get("name") or t["function"]["name"]: t for t in tools}
        assert {"exec_command", "write_stdin", "read_output", "kill_session"} <= set(by_name)
    anthropic = {t["name"]: t for t in anthropic_tools(sessions, ctx)}
    assert set(anthropic["write_stdin"]["input_schema"]["properties"]) == {
        "session_id", "chars", "yield_time_ms", "close",
    }  # fmt: skip
    assert {"tty", "stdin_open"} <= set(anthropic["exec_command"]["input_schema"]["properties"])
    # Writing into a session is no read: MCP clients see it as a process.
    hints = tool_annotations(WRITE_STDIN)
    assert (hints.read_only_hint, hints.destructive_hint) == (False, True)


async def test_under_a_contract_an_exec_command_grant_approves_the_sessions_it_starts(
    sessions: ToolRegistry, arm: SessionArm, make_ctx: MakeCtx
) -> None:
    # allow-session on exec_command already approves any command line (any
    # code), so the writes into each interpreter session it starts are too.
    prompt = Prompt("allow-session")
    ctx = _ctx(make_ctx, ApprovalPolicy("accept-edits", "goal", prompt=prompt))
    first = await _start(sessions, ctx, "python3", "start-1", tty=True)
    second = await _start(sessions, ctx, "node", "start-2", stdin_open=True)
    assert len(prompt.cards) == 1
    assert "writes into each session" in prompt.cards[0].scopes["allow-session"]
    await sessions.dispatch(_write(first, "1\n", "w1"), ctx)
    await sessions.dispatch(_write(second, "2\n", "w2"), ctx)
    assert (arm.sessions[first].written, arm.sessions[second].written) == (b"1\n", b"2\n")
    # A session started without an open input was not approved for any.
    closed = await _start(sessions, ctx, "python3", "start-3")
    assert arm.sessions[closed].info.stdin_open is False


def test_a_write_card_shows_the_session_and_what_is_typed() -> None:
    from hostcap.approval import ToolActionPreview

    card = ApprovalCard(
        tool_id="write_stdin", action="process",
        preview=ToolActionPreview(command="python3 -q", session="abc", input="print(1)\\n"),
        choices=("approve", "reject"), why="accept-edits asks", session_id="s",
    )  # fmt: skip
    text = card.describe()
    assert "write into session abc (python3 -q)" in text and "print(1)\\n" in text


async def test_a_lone_surrogate_is_refused_before_the_host(
    sessions: ToolRegistry, arm: SessionArm, make_ctx: MakeCtx
) -> None:
    ctx = _ctx(make_ctx, None)
    data = await _start(sessions, ctx, "cat", "start", stdin_open=True)
    with pytest.raises(ToolArgsInvalidError) as refused:
        await sessions.dispatch(_write(data, "a\ud800"), ctx)
    assert "chars" in refused.value.message and arm.sessions[data].written == b""


async def test_another_engine_sessions_session_cannot_be_read_or_ended(
    sessions: ToolRegistry, arm: SessionArm, make_ctx: MakeCtx
) -> None:
    ctx = _ctx(make_ctx, ApprovalPolicy("auto"))
    mine = await _start(sessions, ctx, "cat", "start", stdin_open=True)
    elsewhere = _ctx(make_ctx, ApprovalPolicy("auto"), session_id="session-2")
    for call in (
        ToolCall("r", "read_output", {"session_id": mine, "yield_time_ms": 0}),
        ToolCall("k", "kill_session", {"session_id": mine}),
    ):
        with pytest.raises(ToolExecutionError) as foreign:
            await sessions.dispatch(call, elsewhere)
        assert foreign.value.host_reason == "NOT_FOUND"
    # Still running, and its own engine session reads it.
    outcome = await sessions.dispatch(
        ToolCall("r2", "read_output", {"session_id": mine, "yield_time_ms": 0}), ctx
    )
    assert outcome.result.unwrap().running
