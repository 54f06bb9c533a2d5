"""The egress tools (`http_request`, `web_search`) and `mcp_call`."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import AfterValidator, Field

from hostcap.builtins.common import FrozenArgs, FrozenResult, printable
from hostcap.errors import ToolUnavailableError
from hostcap.host import (
    EgressCapability,
    EgressRequest,
    McpCallInput,
    McpCapability,
    ToolHost,
)
from hostcap.policy import PolicyTarget, ToolPolicyClass
from hostcap.tooldef import ToolDef, ToolRunContext, require_arm


class HttpRequestArgs(FrozenArgs):
    url: Annotated[str, Field(min_length=1, max_length=8192)] = Field(description="An https URL.")
    method: Literal["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE"] = "GET"
    headers: dict[str, Annotated[str, AfterValidator(printable)]] | None = None
    body: Annotated[str, Field(max_length=16 * 1024 * 1024)] | None = None
    credential_ref: str | None = None


class HttpResponseResult(FrozenResult):
    status: int
    headers: dict[str, str]
    body: str
    media_type: str

    def model_text(self) -> str:
        return f"HTTP {self.status} ({self.media_type})\n{self.body}"


async def _http_request(
    args: HttpRequestArgs, host: ToolHost, ctx: ToolRunContext
) -> HttpResponseResult:
    egress: EgressCapability = require_arm(host, "egress", ctx.tool_id)
    response = await egress.fetch(
        EgressRequest(
            method=args.method, url=args.url, headers=dict(args.headers or {}), body=args.body,
            credential_ref=args.credential_ref,
        )
    )  # fmt: skip
    return HttpResponseResult(
        status=response.status,
        headers=dict(response.headers),
        body=response.body,
        media_type=response.media_type,
    )


class WebSearchArgs(FrozenArgs):
    query: Annotated[str, Field(min_length=1, max_length=1000), AfterValidator(printable)] = Field(
        description="The search query."
    )
    provider_url: str = ""
    credential_ref: str | None = None


async def _web_search(
    args: WebSearchArgs, host: ToolHost, ctx: ToolRunContext
) -> HttpResponseResult:
    egress: EgressCapability = require_arm(host, "egress", ctx.tool_id)
    if not args.provider_url:
        raise ToolUnavailableError(
            tool_id=ctx.tool_id, arm="egress", detail="no search provider is configured"
        )
    response = await egress.fetch(
        EgressRequest(
            method="POST",
            url=args.provider_url,
            body=args.query,
            credential_ref=args.credential_ref,
        )
    )
    return HttpResponseResult(
        status=response.status,
        headers=dict(response.headers),
        body=response.body,
        media_type=response.media_type,
    )


class McpCallArgs(FrozenArgs):
    server: Annotated[str, Field(min_length=1, max_length=256)] = Field(
        description="A configured MCP server."
    )
    tool: Annotated[str, Field(min_length=1, max_length=256)] = Field(
        description="The server's tool name."
    )
    arguments: dict[str, Any] = Field(default_factory=dict)


class McpCallResult(FrozenResult):
    output: Any


async def _mcp_call(args: McpCallArgs, host: ToolHost, ctx: ToolRunContext) -> McpCallResult:
    mcp: McpCapability = require_arm(host, "mcp", ctx.tool_id)
    return McpCallResult(
        output=await mcp.call(
            McpCallInput(server=args.server, tool=args.tool, arguments=args.arguments)
        )
    )


HTTP_REQUEST = ToolDef(
    id="http_request", source="builtin", description="Make an HTTPS request to an allowed host.",
    args_model=HttpRequestArgs, result_model=HttpResponseResult, dispatch=_http_request,
    policy=ToolPolicyClass(egress="http"), arms=frozenset({"egress"}),
    config_only_params=frozenset({"credential_ref"}), credential_params=frozenset({"credential_ref"}),
    policy_target=lambda a: PolicyTarget(url=a.url),
)  # fmt: skip

WEB_SEARCH = ToolDef(
    id="web_search", source="builtin", description="Search the web through the configured provider.",
    args_model=WebSearchArgs, result_model=HttpResponseResult, dispatch=_web_search,
    policy=ToolPolicyClass(egress="search"), arms=frozenset({"egress"}),
    config_only_params=frozenset({"provider_url", "credential_ref"}), credential_params=frozenset({"credential_ref"}),
    policy_target=lambda a: PolicyTarget(host="search provider"),
)  # fmt: skip

MCP_CALL = ToolDef(
    id="mcp_call", source="builtin", description="Call a tool of a configured MCP server.",
    args_model=McpCallArgs, result_model=McpCallResult, dispatch=_mcp_call,
    policy=ToolPolicyClass(egress="mcp"), arms=frozenset({"mcp"}),
    policy_target=lambda a: PolicyTarget(host=a.server, mcp_tool=a.tool),
)  # fmt: skip
