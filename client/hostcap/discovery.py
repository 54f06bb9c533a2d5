"""Deferred discovery of MCP tools in the contract modes.

The PR seed keeps MCP tools "discoverable through ToolSearch rather than
being declared core, so a server's schemas do not enter every contract-mode
request". Under Plan or Goal the catalogue therefore offers the core tools
and `tool_search`, not the granted MCP tools' schemas; `tool_search`
returns the schemas of the granted MCP tools matching a query, and a call
naming one is dispatched as before (it takes its contract card).

`tool_search` belongs to the registry: it is offered, and granted, exactly
when a node has a granted MCP tool deferred this way. It reads the
registry only (no host call), so it is an ordinary read.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Annotated, Any

from pydantic import AfterValidator, Field

from hostcap.admission import tool_admission
from hostcap.builtins.common import FrozenArgs, FrozenResult, printable
from hostcap.dispatch_context import AnyToolDef, DispatchContext
from hostcap.host import ToolHost
from hostcap.policy import ToolPolicyClass
from hostcap.tooldef import ToolDef, ToolRunContext

TOOL_SEARCH_ID = "tool_search"
#: The sources whose tools are deferred behind the search (an engine's MCP tools).
DEFERRED_SOURCES = frozenset({"mcp"})


class ToolSearchArgs(FrozenArgs):
    query: Annotated[str, Field(min_length=1, max_length=256), AfterValidator(printable)] = Field(
        description="Words to look for in the tool names and descriptions (all must match); "
        '"*" lists every tool.'
    )
    max_results: int = Field(default=5, ge=1, le=25)


class ToolSearchResult(FrozenResult):
    #: Each match: its `name`, `description` and `input_schema`, callable by name.
    matches: tuple[Mapping[str, Any], ...]
    more: int

    def model_text(self) -> str:
        if not self.matches:
            return "no tool matches; try other words, or * for all"
        note = f"\n({self.more} more match: narrow the query)" if self.more else ""
        return json.dumps(list(self.matches), indent=1, ensure_ascii=False) + note


def deferred_tools(tools: Iterable[AnyToolDef], ctx: DispatchContext | None) -> list[AnyToolDef]:
    """The granted tools a contract mode keeps out of the request, behind the search."""
    if ctx is None or ctx.contract is None:
        return []
    return [
        tool
        for tool in tools
        if tool.source in DEFERRED_SOURCES
        and tool.id in ctx.granted_tool_ids
        and not tool_admission(tool, ctx.approval).denied
    ]


def schema_of(tool: AnyToolDef) -> dict[str, Any]:
    return {
        "name": tool.id,
        "description": tool.description,
        "input_schema": dict(tool.llm_visible_params),
    }


def matches(query: str, schema: Mapping[str, Any]) -> bool:
    words = query.lower().split()
    if words == ["*"]:
        return True
    haystack = f"{schema['name']} {schema['description']}".lower().replace("_", " ")
    return all(word.replace("_", " ") in haystack for word in words)


async def _tool_search(
    args: ToolSearchArgs, host: ToolHost, ctx: ToolRunContext
) -> ToolSearchResult:
    found = [schema for schema in ctx.discoverable if matches(args.query, schema)]
    return ToolSearchResult(
        matches=tuple(found[: args.max_results]), more=max(0, len(found) - args.max_results)
    )


TOOL_SEARCH = ToolDef(
    id=TOOL_SEARCH_ID, source="builtin",
    description="Find the MCP tools you may call in this mode: returns the name, description "
    "and input schema of each match. Call a match by its name.",
    args_model=ToolSearchArgs, result_model=ToolSearchResult, dispatch=_tool_search,
    policy=ToolPolicyClass(),
)  # fmt: skip
