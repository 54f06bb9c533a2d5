"""Exact grants in the contract modes (issue 34, item 2).

The PR's rule: an exact-tool `allow-session` grant suppresses later cards
for that tool in that session and carries to no other tool or session. A
Plan/Goal card offers approve, reject and allow-session only; an `always`
grant given on a card of the permission mode never suppresses a contract
card; an MCP grant is keyed on the server and the tool, never the server
alone. The case the review found: approving `github/list_issues` in Plan
let `github/delete_repo` run with no card, in that session and another.
"""

from __future__ import annotations

from collections.abc import Mapping

import pytest
from client_support import MakeCtx
from hostcap import (
    BUILTIN_TOOLS,
    ApprovalPolicy,
    Contract,
    ToolCall,
    ToolDeniedByUserError,
    create_tool_registry,
)
from hostcap.approval import ApprovalCard
from hostcap.registry import ToolRegistry
from hostcap.testing import MemoryMcp, MemoryToolHost


def _github() -> tuple[ToolRegistry, MemoryMcp]:
    async def list_issues(arguments: Mapping[str, object]) -> object:
        return [{"number": 1, "title": "a bug"}]

    async def delete_repo(arguments: Mapping[str, object]) -> object:
        return {"deleted": arguments.get("repo")}

    mcp = MemoryMcp(
        {("github", "list_issues"): list_issues, ("github", "delete_repo"): delete_repo}
    )
    host = MemoryToolHost(mcp=mcp)
    return create_tool_registry(tools=BUILTIN_TOOLS, host=host), mcp


def _mcp(tool: str, **arguments: object) -> ToolCall:
    return ToolCall(
        f"call-{tool}", "mcp_call", {"server": "github", "tool": tool, "arguments": arguments}
    )


class Prompt:
    """Answers each card from a script, and keeps the cards it was shown."""

    def __init__(self, *answers: str) -> None:
        self.answers = list(answers)
        self.cards: list[ApprovalCard] = []

    async def __call__(self, card: ApprovalCard) -> str:
        self.cards.append(card)
        return self.answers.pop(0)


@pytest.mark.parametrize("contract", ["plan", "goal"])
async def test_allow_session_on_list_issues_covers_neither_delete_repo_nor_another_session(
    contract: str, make_ctx: MakeCtx
) -> None:
    registry, mcp = _github()
    prompt = Prompt("allow-session", "reject", "reject")
    policy = ApprovalPolicy("auto", contract=contract, prompt=prompt)

    def in_session(session: str) -> object:
        return make_ctx(approval=policy.context(), session_id=session)

    await registry.dispatch(_mcp("list_issues"), in_session("one"))  # type: ignore[arg-type]
    card = prompt.cards[0]
    # A contract card offers no `always`, and says exactly what allow-session covers.
    assert card.choices == ("approve", "reject", "allow-session")
    assert "github/list_issues" in card.scopes["allow-session"]
    assert "no other tool, no other session" in card.scopes["allow-session"]
    # The same tool again in the same session: no card.
    await registry.dispatch(_mcp("list_issues", state="open"), in_session("one"))  # type: ignore[arg-type]
    assert len(prompt.cards) == 1
    # Another tool of the same server, with arguments: a card (rejected), nothing run.
    with pytest.raises(ToolDeniedByUserError):
        await registry.dispatch(_mcp("delete_repo", repo="acme/app"), in_session("one"))  # type: ignore[arg-type]
    assert len(prompt.cards) == 2
    assert "github/delete_repo" in prompt.cards[1].describe()
    # The granted tool in another session: a card again.
    with pytest.raises(ToolDeniedByUserError):
        await registry.dispatch(_mcp("list_issues"), in_session("two"))  # type: ignore[arg-type]
    assert len(prompt.cards) == 3
    assert [call.tool for call in mcp.calls] == ["list_issues", "list_issues"]
    assert policy.session_grants("one") == {"mcp_call:github/list_issues"}
    assert policy.session_grants("two") == frozenset()


async def test_an_always_grant_of_the_mode_never_suppresses_a_contract_card(
    make_ctx: MakeCtx,
) -> None:
    registry, mcp = _github()
    prompt = Prompt("always", "reject", "reject")
    policy = ApprovalPolicy("accept-edits", prompt=prompt)
    # The permission mode's card offers `always`, keyed on server and tool.
    await registry.dispatch(_mcp("list_issues"), make_ctx(approval=policy.context()))
    assert "always" in prompt.cards[0].choices
    assert "github/list_issues" in prompt.cards[0].scopes["always"]
    await registry.dispatch(_mcp("list_issues"), make_ctx(approval=policy.context()))
    assert len(prompt.cards) == 1
    # The same server's other tool is not covered by it.
    with pytest.raises(ToolDeniedByUserError):
        await registry.dispatch(
            _mcp("delete_repo", repo="acme/app"), make_ctx(approval=policy.context())
        )
    # The user switches to Plan: the contract card comes back for the granted tool.
    policy.contract = Contract.PLAN
    with pytest.raises(ToolDeniedByUserError):
        await registry.dispatch(_mcp("list_issues"), make_ctx(approval=policy.context()))
    assert len(prompt.cards) == 3
    assert prompt.cards[2].choices == ("approve", "reject", "allow-session")
    assert [call.tool for call in mcp.calls] == ["list_issues", "list_issues"]


async def test_an_mcp_allow_session_outside_a_contract_is_keyed_on_server_and_tool(
    make_ctx: MakeCtx,
) -> None:
    registry, mcp = _github()
    prompt = Prompt("allow-session", "reject")
    policy = ApprovalPolicy("accept-edits", prompt=prompt)
    ctx = make_ctx(approval=policy.context())
    await registry.dispatch(_mcp("list_issues"), ctx)
    await registry.dispatch(_mcp("list_issues"), ctx)
    with pytest.raises(ToolDeniedByUserError):
        await registry.dispatch(_mcp("delete_repo", repo="acme/app"), ctx)
    assert len(prompt.cards) == 2
    assert [call.tool for call in mcp.calls] == ["list_issues", "list_issues"]


async def test_allow_session_on_run_command_in_plan_covers_that_tool_in_that_session(
    make_ctx: MakeCtx,
) -> None:
    # The exact-tool grant is what the card is for: later run_command cards in
    # the session are suppressed, whatever the command line.
    from hostcap import ToolPolicy

    registry = create_tool_registry(tools=BUILTIN_TOOLS, host=MemoryToolHost())
    prompt = Prompt("allow-session", "reject")
    policy = ApprovalPolicy("auto", contract="plan", prompt=prompt)
    allowed = ToolPolicy(allowed_commands={"echo", "cat"})
    ctx = make_ctx(approval=policy.context(), tool_policy=allowed, session_id="s")
    await registry.dispatch(ToolCall("r1", "run_command", {"command": "echo", "args": ["a"]}), ctx)
    await registry.dispatch(ToolCall("r2", "run_command", {"command": "cat", "args": []}), ctx)
    assert len(prompt.cards) == 1
    with pytest.raises(ToolDeniedByUserError):
        await registry.dispatch(
            ToolCall("r3", "run_command", {"command": "echo", "args": ["a"]}),
            make_ctx(approval=policy.context(), tool_policy=allowed, session_id="other"),
        )
