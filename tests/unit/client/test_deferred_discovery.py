"""Deferred discovery of MCP tools (issue 34, item 5): in Plan and Goal a
request carries the core tools and `tool_search`, not every granted MCP
tool's schema; the search returns the schemas of matching granted MCP tools,
and a call naming one is dispatched as before (with its contract card)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import pytest
from client_support import MakeCtx
from hostcap import (
    BUILTIN_TOOLS,
    ApprovalPolicy,
    PolicyTarget,
    ToolCall,
    ToolDef,
    ToolPolicyClass,
    ToolPolicyError,
    create_tool_registry,
)
from hostcap.adapters import anthropic
from hostcap.adapters.common import parse_call
from hostcap.approval import ApprovalCard
from hostcap.builtins.common import FrozenArgs, FrozenResult
from hostcap.host import McpCallInput, ToolHost
from hostcap.registry import ToolRegistry
from hostcap.testing import MemoryMcp, MemoryToolHost
from hostcap.tooldef import ToolRunContext
from pydantic import Field


class IssueQuery(FrozenArgs):
    repo: str = Field(description="owner/name of the repository")
    state: str = Field(default="open", description="open, closed or all")
    labels: list[str] = Field(default_factory=list, description="only issues with these labels")
    since: str | None = Field(default=None, description="ISO 8601 time: updated after it")
    per_page: int = Field(default=30, ge=1, le=100, description="results per page")


class Output(FrozenResult):
    output: Any


def _mcp_tool(server: str, name: str, description: str) -> ToolDef[IssueQuery, Output]:
    async def dispatch(args: IssueQuery, host: ToolHost, ctx: ToolRunContext) -> Output:
        assert host.mcp is not None
        payload = args.model_dump()
        return Output(
            output=await host.mcp.call(McpCallInput(server=server, tool=name, arguments=payload))
        )

    return ToolDef(
        id=f"mcp_{server}_{name}", source="mcp", description=description,
        args_model=IssueQuery, result_model=Output, dispatch=dispatch,
        policy=ToolPolicyClass(egress="mcp"), arms=frozenset({"mcp"}),
        policy_target=lambda a: PolicyTarget(host=server, mcp_tool=name),
    )  # fmt: skip


GITHUB = [
    _mcp_tool("github", "list_issues", "List the issues of a repository, newest first."),
    _mcp_tool("github", "get_issue", "Read one issue with its comments."),
    _mcp_tool("github", "search_code", "Search code across repositories."),
    _mcp_tool("github", "list_pull_requests", "List the pull requests of a repository."),
    _mcp_tool("github", "get_file_contents", "Read a file of a repository at a ref."),
    _mcp_tool("github", "list_commits", "List the commits of a branch."),
    _mcp_tool("github", "delete_repo", "Delete a repository. Irreversible."),
    _mcp_tool("github", "create_issue", "Open an issue in a repository."),
]
GRANTED = {"read_file", "list_directory", "git_status", *(t.id for t in GITHUB)} - {
    "mcp_github_create_issue"
}


def _registry() -> tuple[ToolRegistry, MemoryMcp]:
    async def answer(arguments: Mapping[str, object]) -> object:
        return [{"number": 7, "title": "a bug"}]

    mcp = MemoryMcp({("github", t.id.removeprefix("mcp_github_")): answer for t in GITHUB})
    return create_tool_registry(tools=[*BUILTIN_TOOLS, *GITHUB], host=MemoryToolHost(mcp=mcp)), mcp


def _plan(make_ctx: MakeCtx, prompt: Any = None) -> Any:
    return make_ctx(
        granted_tool_ids=GRANTED, approval=ApprovalPolicy("auto", "plan", prompt=prompt).context()
    )


def test_a_contract_request_carries_the_core_tools_and_the_search(make_ctx: MakeCtx) -> None:
    registry, _ = _registry()
    offered = [t.id for t in registry.catalogue(_plan(make_ctx))]
    assert offered == ["git_status", "list_directory", "read_file", "tool_search"]
    # Outside a contract every granted MCP tool is offered, and there is no search.
    default = [t.id for t in registry.catalogue(make_ctx(granted_tool_ids=GRANTED))]
    assert "mcp_github_list_issues" in default and "tool_search" not in default


def test_the_context_saved_by_deferring(make_ctx: MakeCtx) -> None:
    registry, _ = _registry()
    deferred = len(json.dumps(anthropic.anthropic_tools(registry, _plan(make_ctx))))
    ctx = make_ctx(granted_tool_ids=GRANTED, approval=ApprovalPolicy("auto").context())
    every = len(json.dumps(anthropic.anthropic_tools(registry, ctx)))
    print(f"\ntools JSON: {every} bytes with 7 MCP tools, {deferred} deferred")
    assert deferred < every / 2


async def test_the_search_returns_the_schemas_of_matching_granted_mcp_tools(
    make_ctx: MakeCtx,
) -> None:
    registry, _ = _registry()
    ctx = _plan(make_ctx)
    found = await registry.dispatch(ToolCall("s", "tool_search", {"query": "issue"}), ctx)
    names = [m["name"] for m in found.result.unwrap().matches]
    assert names == [
        "mcp_github_list_issues",
        "mcp_github_get_issue",
    ]  # not create_issue: not granted
    text = found.tool_result.unwrap()
    assert '"input_schema"' in text and "owner/name of the repository" in text
    every = await registry.dispatch(
        ToolCall("s", "tool_search", {"query": "*", "max_results": 25}), ctx
    )
    assert len(every.result.unwrap().matches) == 7


async def test_a_discovered_tool_is_called_by_name_and_takes_its_card(make_ctx: MakeCtx) -> None:
    registry, mcp = _registry()
    cards: list[ApprovalCard] = []

    async def prompt(card: ApprovalCard) -> str:
        cards.append(card)
        return "approve"

    outcome = await registry.dispatch(
        ToolCall("c", "mcp_github_list_issues", {"repo": "acme/app"}), _plan(make_ctx, prompt)
    )
    assert "a bug" in outcome.tool_result.unwrap()
    assert len(cards) == 1 and [c.tool for c in mcp.calls] == ["list_issues"]


async def test_the_search_is_granted_only_while_it_stands_in_for_mcp_tools(
    make_ctx: MakeCtx,
) -> None:
    registry, _ = _registry()
    outside = make_ctx(granted_tool_ids=GRANTED)
    assert not registry.is_granted("tool_search", outside)
    with pytest.raises(ToolPolicyError, match="not_granted"):
        await registry.dispatch(ToolCall("s", "tool_search", {"query": "x"}), outside)
    plan = _plan(make_ctx)
    parsed = parse_call("s", "tool_search", '{"query": "issue"}', registry, plan)
    assert parsed.call is not None and parsed.call.args == {"query": "issue"}
