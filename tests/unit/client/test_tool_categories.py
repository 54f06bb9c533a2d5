"""Issue 16 (5): a plugin-contributed MCP tool, a trusted-extension tool,
and `read_media`, the 13th built-in."""

from __future__ import annotations

import base64
from typing import Any

import pytest
from client_support import ALL_BUILTINS, MakeCtx
from hostcap import (
    BUILTIN_TOOLS,
    ApprovalPolicy,
    ToolCall,
    ToolDef,
    ToolPolicyClass,
    ToolPolicyError,
    ToolRegistrationError,
    Untrusted,
    create_tool_registry,
)
from hostcap.approval import ApprovalCard
from hostcap.extensions import McpToolResult, plugin_mcp_tool, trusted_extension_tool
from hostcap.host import MediaHandle
from hostcap.testing import MemoryMcp, MemoryToolHost
from hostcap.tooldef import ToolRunContext
from pydantic import BaseModel


class SearchArgs(BaseModel):
    model_config = {"extra": "forbid", "frozen": True}
    query: str = ""


class Summary(BaseModel):
    text: str


def _mcp_host(calls: list[Any]) -> MemoryToolHost:
    async def search(arguments: Any) -> Any:
        calls.append(dict(arguments))
        return ["hit"]

    return MemoryToolHost(mcp=MemoryMcp({("docs", "search"): search}))


PLUGIN_SEARCH = plugin_mcp_tool(
    plugin="acme", server="docs", tool="search", description="search docs", args_model=SearchArgs
)


def _run_ctx(contract: str | None) -> ToolRunContext:
    return ToolRunContext(
        tool_id=PLUGIN_SEARCH.id, tool_call_id="c", node_id="n", session_id="s",
        fs_scope="workspace-write", labels={}, contract=contract,
    )  # fmt: skip


@pytest.mark.parametrize("contract", ["plan", "goal"])
@pytest.mark.parametrize("mode", ["accept-edits", "auto"])
async def test_a_plugin_mcp_tool_is_refused_in_a_contract_mode_before_the_server(
    contract: str, mode: str, make_ctx: MakeCtx
) -> None:
    calls: list[Any] = []
    registry = create_tool_registry(tools=(*BUILTIN_TOOLS, PLUGIN_SEARCH), host=_mcp_host(calls))

    async def approve(card: ApprovalCard) -> str:
        return "approve"

    ctx = make_ctx(
        granted_tool_ids=ALL_BUILTINS | {PLUGIN_SEARCH.id},
        approval=ApprovalPolicy(mode, contract, prompt=approve).context(),
    )
    assert PLUGIN_SEARCH.id not in {tool.id for tool in registry.catalogue(ctx)}
    with pytest.raises(ToolPolicyError) as caught:
        await registry.dispatch(ToolCall("c", PLUGIN_SEARCH.id, {"query": "x"}), ctx)
    assert caught.value.reason == "mode_denied"
    assert calls == []


async def test_the_plugin_mcp_execution_callback_refuses_a_contract_itself() -> None:
    """The guard does not rest on the registry's admission: the callback
    refuses a contract mode before the server is called."""
    calls: list[Any] = []
    host = _mcp_host(calls)
    with pytest.raises(ToolPolicyError) as caught:
        await PLUGIN_SEARCH.dispatch(SearchArgs(query="x"), host, _run_ctx("plan"))
    assert caught.value.reason == "mode_denied" and calls == []
    result = await PLUGIN_SEARCH.dispatch(SearchArgs(query="x"), host, _run_ctx(None))
    assert result == McpToolResult(output=["hit"]) and calls == [{"query": "x"}]


async def test_outside_a_contract_a_plugin_mcp_tool_is_governed_egress(
    make_ctx: MakeCtx,
) -> None:
    calls: list[Any] = []
    registry = create_tool_registry(tools=(PLUGIN_SEARCH,), host=_mcp_host(calls))
    cards: list[ApprovalCard] = []

    async def approve(card: ApprovalCard) -> str:
        cards.append(card)
        return "approve"

    ctx = make_ctx(
        granted_tool_ids={PLUGIN_SEARCH.id},
        approval=ApprovalPolicy("accept-edits", prompt=approve).context(),
    )
    outcome = await registry.dispatch(ToolCall("c", PLUGIN_SEARCH.id, {"query": "x"}), ctx)
    assert isinstance(outcome.result, Untrusted)
    assert [card.action for card in cards] == ["egress"] and calls == [{"query": "x"}]


def test_a_plugin_mcp_tool_cannot_declare_a_plan_safe_list() -> None:
    with pytest.raises(ToolRegistrationError):
        ToolDef(
            id="plugin_acme_search", source="plugin_mcp", description="d", args_model=SearchArgs,
            result_model=McpToolResult, policy=ToolPolicyClass(egress="mcp"),
            dispatch=PLUGIN_SEARCH.dispatch, arms=frozenset({"mcp"}),
            policy_target=PLUGIN_SEARCH.policy_target, plan_safe_actions=("read",),
        )  # fmt: skip


# --------------------------------------------------------------- trusted extension


def _extension(executed: list[str]) -> ToolDef[SearchArgs, Summary]:
    async def execute(args: SearchArgs, ctx: ToolRunContext) -> Summary:
        executed.append(args.query)
        return Summary(text=f"summary of {args.query}")

    return trusted_extension_tool(
        tool_id="ext_summarise", description="summarise in the sidecar", args_model=SearchArgs,
        result_model=Summary, execute=execute,
    )  # fmt: skip


@pytest.mark.parametrize("contract", ["plan", "goal"])
async def test_a_trusted_extension_tool_is_withheld_in_a_contract_mode(
    contract: str, make_ctx: MakeCtx
) -> None:
    executed: list[str] = []
    tool = _extension(executed)
    registry = create_tool_registry(tools=(tool,), host=MemoryToolHost())
    ctx = make_ctx(granted_tool_ids={tool.id}, approval=ApprovalPolicy("auto", contract).context())
    assert registry.catalogue(ctx) == ()
    with pytest.raises(ToolPolicyError) as caught:
        await registry.dispatch(ToolCall("c", tool.id, {"query": "q"}), ctx)
    assert caught.value.reason == "mode_denied"
    with pytest.raises(ToolPolicyError):
        await tool.dispatch(SearchArgs(query="q"), MemoryToolHost(), _run_ctx(contract))
    assert executed == []


@pytest.mark.parametrize("mode", ["ask", "accept-edits", "auto"])
async def test_outside_a_contract_a_trusted_extension_tool_is_ordinary(
    mode: str, make_ctx: MakeCtx
) -> None:
    executed: list[str] = []
    tool = _extension(executed)
    host = MemoryToolHost()
    registry = create_tool_registry(tools=(tool,), host=host)
    ctx = make_ctx(granted_tool_ids={tool.id}, approval=ApprovalPolicy(mode).context())
    assert [t.id for t in registry.catalogue(ctx)] == [tool.id]
    outcome = await registry.dispatch(ToolCall("c", tool.id, {"query": "q"}), ctx)
    assert outcome.result.unwrap() == Summary(text="summary of q")
    assert isinstance(outcome.tool_result, Untrusted)
    # It executes elsewhere: no host arm is touched.
    assert executed == ["q"]
    assert host.process is not None and host.process.spawns == []


# ------------------------------------------------------------------ read_media

PNG = b"\x89PNG\r\n\x1a\n\x00\x00\x00\x0dIHDR" + bytes(range(256)) * 4


async def _stored_png(registry: Any, host: MemoryToolHost, make_ctx: MakeCtx) -> MediaHandle:
    assert host.fs is not None
    host.fs.put("logo.png", PNG)
    read = await registry.dispatch(ToolCall("c0", "read_file", {"path": "logo.png"}), make_ctx())
    assert read.media is not None
    media: MediaHandle = read.media.unwrap()
    return media


def test_read_media_is_the_thirteenth_builtin() -> None:
    # The seeds' thirteen, with edit_file (issue 34) beside write_file.
    assert len(BUILTIN_TOOLS) == 18 and BUILTIN_TOOLS[13].id == "read_media"
    # Then the session tools of issues 30 and 31.
    assert [t.id for t in BUILTIN_TOOLS[14:]] == [
        "exec_command", "read_output", "kill_session", "write_stdin",
    ]  # fmt: skip
    assert [t.id for t in BUILTIN_TOOLS[:14] if t.id != "edit_file"][-1] == "read_media"


async def test_read_media_returns_an_untrusted_handle_never_base64(
    host: MemoryToolHost, make_ctx: MakeCtx
) -> None:
    registry = create_tool_registry(tools=BUILTIN_TOOLS, host=host)
    stored = await _stored_png(registry, host, make_ctx)
    outcome = await registry.dispatch(
        ToolCall("c1", "read_media", {"handle": stored.handle}), make_ctx()
    )
    assert isinstance(outcome.media, Untrusted)
    assert outcome.media.unwrap() == stored
    text = outcome.tool_result.unwrap()
    assert stored.handle in text and "image/png" in text
    encoded = base64.b64encode(PNG).decode()
    assert encoded[:40] not in text and "iVBOR" not in text
    assert "iVBOR" not in outcome.result.unwrap().model_dump_json()


async def test_a_handle_outside_the_media_scope_is_the_recoverable_scope_denial(
    host: MemoryToolHost, make_ctx: MakeCtx
) -> None:
    registry = create_tool_registry(tools=BUILTIN_TOOLS, host=host)
    stored = await _stored_png(registry, host, make_ctx)
    for handle, ctx in (
        (stored.handle, make_ctx(media_scope={"hostcap-media:other/0001"})),
        ("hostcap-media:another-run/0001", make_ctx()),
        ("hostcap-spill:whatever/0001", make_ctx()),
    ):
        with pytest.raises(ToolPolicyError) as caught:
            await registry.dispatch(ToolCall("c1", "read_media", {"handle": handle}), ctx)
        assert caught.value.reason == "media_scope_denied"
        assert caught.value.recoverable and not caught.value.retryable
    # In scope, it attaches.
    outcome = await registry.dispatch(
        ToolCall("c2", "read_media", {"handle": stored.handle}),
        make_ctx(media_scope={stored.handle}),
    )
    assert outcome.media is not None


async def test_read_media_is_admitted_by_plan_and_ask(
    host: MemoryToolHost, make_ctx: MakeCtx
) -> None:
    registry = create_tool_registry(tools=BUILTIN_TOOLS, host=host)
    stored = await _stored_png(registry, host, make_ctx)
    for policy in (ApprovalPolicy("ask"), ApprovalPolicy("auto", "plan")):
        ctx = make_ctx(approval=policy.context())
        assert "read_media" in {tool.id for tool in registry.catalogue(ctx)}
        outcome = await registry.dispatch(
            ToolCall("c1", "read_media", {"handle": stored.handle}), ctx
        )
        assert outcome.media is not None
