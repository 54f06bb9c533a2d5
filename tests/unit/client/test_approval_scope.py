"""Issue 16 (1): `always` covers only the exact tool and its exact effective
target; `allow-session` is the separately named broader grant, and the card
says what each answer approves."""

from __future__ import annotations

from typing import Any

import pytest
from client_support import MakeCtx
from hostcap import (
    BUILTIN_TOOLS,
    ApprovalPolicy,
    ToolCall,
    ToolDeniedByUserError,
    ToolPolicy,
    create_tool_registry,
)
from hostcap.approval import ApprovalCard
from hostcap.testing import MemoryToolHost, ProgramIO

POLICY = ToolPolicy(allowed_commands={"rm", "echo", "cat"})


def _host() -> MemoryToolHost:
    host = MemoryToolHost()
    assert host.process is not None

    async def rm(io: ProgramIO) -> int:
        io.out("removed " + " ".join(io.argv[1:]) + "\n")
        return 0

    host.process.programs["rm"] = rm
    return host


def _call(command: str, *args: str, cwd: str | None = None) -> ToolCall:
    body: dict[str, Any] = {"command": command, "args": list(args)}
    if cwd is not None:
        body["cwd"] = cwd
    return ToolCall("c", "run_command", body)


async def test_always_for_one_command_line_does_not_approve_another(make_ctx: MakeCtx) -> None:
    host = _host()
    registry = create_tool_registry(tools=BUILTIN_TOOLS, host=host)
    cards: list[ApprovalCard] = []

    async def prompt(card: ApprovalCard) -> str:
        cards.append(card)
        return "always" if len(cards) == 1 else "reject"

    policy = ApprovalPolicy("accept-edits", prompt=prompt)
    ctx = make_ctx(approval=policy.context(), tool_policy=POLICY)
    await registry.dispatch(_call("rm", "-f", "scratch.tmp"), ctx)
    # The exact same line again: covered by the grant, no card.
    await registry.dispatch(_call("rm", "-f", "scratch.tmp"), ctx)
    assert len(cards) == 1
    # Another argument vector of the same program is another target: a card, rejected.
    with pytest.raises(ToolDeniedByUserError) as caught:
        await registry.dispatch(_call("rm", "-rf", "keep"), ctx)
    assert caught.value.reason == "user_rejected"
    # The same line in another working directory is another target too.
    with pytest.raises(ToolDeniedByUserError):
        await registry.dispatch(_call("rm", "-f", "scratch.tmp", cwd="sub"), ctx)
    assert len(cards) == 3
    assert host.process is not None
    assert [s.argv for s in host.process.spawns] == [("rm", "-f", "scratch.tmp")] * 2


async def test_always_for_a_file_covers_that_path_only(make_ctx: MakeCtx) -> None:
    registry = create_tool_registry(tools=BUILTIN_TOOLS, host=_host())
    cards: list[ApprovalCard] = []

    async def prompt(card: ApprovalCard) -> str:
        cards.append(card)
        return "always"

    # Absolute paths take a card in accept-edits (the client cannot see the root).
    policy = ApprovalPolicy("accept-edits", prompt=prompt)
    ctx = make_ctx(approval=policy.context())
    write = ToolCall("c", "write_file", {"path": "/workspace/a.txt", "content": "1"})
    await registry.dispatch(write, ctx)
    await registry.dispatch(write, ctx)
    await registry.dispatch(
        ToolCall("c", "write_file", {"path": "/workspace/b.txt", "content": "1"}), ctx
    )
    assert [card.preview.path for card in cards] == ["/workspace/a.txt", "/workspace/b.txt"]


async def test_allow_session_is_a_separate_answer_covering_the_whole_tool(
    make_ctx: MakeCtx,
) -> None:
    registry = create_tool_registry(tools=BUILTIN_TOOLS, host=_host())
    cards: list[ApprovalCard] = []

    async def prompt(card: ApprovalCard) -> str:
        cards.append(card)
        return "allow-session"

    policy = ApprovalPolicy("accept-edits", prompt=prompt)
    ctx = make_ctx(approval=policy.context(), tool_policy=POLICY, session_id="S")
    await registry.dispatch(_call("rm", "-f", "scratch.tmp"), ctx)
    await registry.dispatch(_call("rm", "-rf", "keep"), ctx)
    assert len(cards) == 1
    (card,) = cards
    assert card.choices == ("approve", "reject", "allow-session", "always")
    # The card shows each grant's scope, and the two grants say different things.
    assert "rm -f scratch.tmp" in card.scopes["always"]
    assert "any other target still asks" in card.scopes["always"]
    assert "whatever its target" in card.scopes["allow-session"]
    assert "session S" in card.scopes["allow-session"]
    described = card.describe()
    assert card.scopes["always"] in described and card.scopes["allow-session"] in described


async def test_the_always_key_reads_the_unscrubbed_target(make_ctx: MakeCtx) -> None:
    """Two secret-shaped arguments scrub to the same `[redacted]` display: an
    `always` for one must not cover the other."""
    registry = create_tool_registry(tools=BUILTIN_TOOLS, host=_host())
    cards: list[ApprovalCard] = []

    async def prompt(card: ApprovalCard) -> str:
        cards.append(card)
        return "always"

    policy = ApprovalPolicy("accept-edits", prompt=prompt)
    ctx = make_ctx(approval=policy.context(), tool_policy=POLICY)
    await registry.dispatch(_call("echo", "token=aaaaaaaaaaaa"), ctx)
    await registry.dispatch(_call("echo", "token=bbbbbbbbbbbb"), ctx)
    assert len(cards) == 2
    assert cards[0].preview.command == cards[1].preview.command == "echo token=[redacted]"


async def test_look_alike_cards_carry_different_target_keys(make_ctx: MakeCtx) -> None:
    """`hostcap mcp` keys a card's answer by `target_key`: a scrubbed preview
    that looks the same for two targets must not let one answer approve both."""
    registry = create_tool_registry(tools=BUILTIN_TOOLS, host=_host())
    cards: list[ApprovalCard] = []

    async def prompt(card: ApprovalCard) -> str:
        cards.append(card)
        return "approve"

    policy = ApprovalPolicy("accept-edits", prompt=prompt)
    ctx = make_ctx(approval=policy.context(), tool_policy=POLICY)
    for arg in ("token=aaaaaaaaaaaa", "token=bbbbbbbbbbbb", "token=aaaaaaaaaaaa"):
        await registry.dispatch(_call("echo", arg), ctx)
    first, second, again = cards
    assert first.preview == second.preview
    assert first.target_key != second.target_key and first.target_key == again.target_key
    assert "aaaa" not in first.target_key  # a digest, not the target
