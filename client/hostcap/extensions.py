"""Tools that are neither built in nor an engine's own MCP tools: the two
categories the contract-mode PR seed names.

- `plugin_mcp_tool`: an MCP tool a plugin contributes. Its registration
  path carries no enforced plan-safe action list, so the host can only take
  the caller's word for what it does: a contract mode (Plan, Goal) refuses
  it, in the registry's admission (it is never offered) *and* in its own
  execution callback, before the server is called, rather than trusting
  admission metadata the caller supplies. Outside a contract mode it is an
  ordinary MCP egress call: governed, so it takes the approval path.
- `trusted_extension_tool`: a tool a trusted extension executes elsewhere
  (a sidecar): no host call is made for it, so the permission path cannot
  see what it does. It is withheld in a contract mode (not offered, and its
  execution callback refuses too); outside one it is ordinary, decided by
  the policy class its author declares (ungoverned unless that says it
  writes, reaches the network or acts on the OS).

Both results come back `Untrusted`, like every tool's.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict

from hostcap.errors import ToolPolicyError
from hostcap.host import McpCallInput, McpCapability, ToolHost
from hostcap.policy import PolicyTarget, ToolPolicyClass
from hostcap.tooldef import ToolDef, ToolRunContext, require_arm

A = TypeVar("A", bound=BaseModel)
R = TypeVar("R", bound=BaseModel)

_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


class McpToolResult(BaseModel):
    """What a plugin MCP tool's server answered."""

    model_config = ConfigDict(frozen=True)

    output: Any


def _name(what: str, value: str) -> str:
    if not isinstance(value, str) or not _NAME.match(value):
        raise ValueError(f"{what} must be 1-64 characters of [A-Za-z0-9_-], not {value!r}")
    return value


def _refuse_contract(ctx: ToolRunContext) -> None:
    # The execution callback's own guard: the run context the registry built
    # says which contract is active; nothing the caller declares changes it.
    if ctx.contract is not None:
        raise ToolPolicyError("mode_denied", tool_id=ctx.tool_id)


def plugin_mcp_tool(
    *,
    plugin: str,
    server: str,
    tool: str,
    description: str,
    args_model: type[A],
    tool_id: str | None = None,
) -> ToolDef[A, McpToolResult]:
    """The ToolDef of MCP tool `tool` of `server`, contributed by `plugin`
    (id `plugin_{plugin}_{tool}` unless given)."""
    _name("plugin", plugin)
    _name("server", server)
    _name("tool", tool)

    async def dispatch(args: A, host: ToolHost, ctx: ToolRunContext) -> McpToolResult:
        _refuse_contract(ctx)  # before the server is called
        mcp: McpCapability = require_arm(host, "mcp", ctx.tool_id)
        output = await mcp.call(
            McpCallInput(server=server, tool=tool, arguments=args.model_dump(mode="json"))
        )
        return McpToolResult(output=output)

    return ToolDef(
        id=tool_id or f"plugin_{plugin}_{tool}",
        source="plugin_mcp",
        description=description,
        args_model=args_model,
        result_model=McpToolResult,
        policy=ToolPolicyClass(egress="mcp"),
        dispatch=dispatch,
        arms=frozenset({"mcp"}),
        policy_target=lambda a: PolicyTarget(host=server, mcp_tool=tool),
    )


def trusted_extension_tool(
    *,
    tool_id: str,
    description: str,
    args_model: type[A],
    result_model: type[R],
    execute: Callable[[A, ToolRunContext], Awaitable[R]],
    policy: ToolPolicyClass | None = None,
    policy_target: Callable[[A], PolicyTarget] | None = None,
) -> ToolDef[A, R]:
    """The ToolDef of a trusted extension's tool: `execute` runs it elsewhere
    (no ToolHost arm is used)."""

    async def dispatch(args: A, host: ToolHost, ctx: ToolRunContext) -> R:
        _refuse_contract(ctx)
        return await execute(args, ctx)

    return ToolDef(
        id=tool_id,
        source="extension",
        description=description,
        args_model=args_model,
        result_model=result_model,
        policy=policy or ToolPolicyClass(),
        dispatch=dispatch,
        policy_target=policy_target,
    )
