"""The Anthropic adapter: the Messages API's `tool_use` blocks.

    tools = anthropic_tools(registry, ctx)
    message = await client.messages.create(model=..., messages=messages, tools=tools, max_tokens=...)
    messages.append({"role": "assistant", "content": message.content})
    if (results := await run_tool_calls(message, registry, ctx)) is not None:
        messages.append(results)        # the user message holding the tool_result blocks

`run_tool_calls` takes the SDK's `Message` (or its JSON as a mapping),
dispatches every `tool_use` block through the registry and returns the
`user` message holding one `tool_result` block per call (`is_error` on a
refusal or failure), or None when the message made no call. Provider-run
blocks (`server_tool_use`) are the API's own and are left alone. Needs the
`adapters` extra.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

try:
    import anthropic as _sdk  # noqa: F401  (the extra must be installed)
except ImportError as _missing:  # pragma: no cover - depends on the environment
    raise ImportError(
        "hostcap.adapters.anthropic needs the anthropic SDK: pip install 'hostcap-client[adapters]'"
    ) from _missing

from hostcap.adapters.common import (
    ParsedCall,
    ToolCallResult,
    as_mapping,
    as_sequence,
    dispatch_calls,
    parse_call,
)
from hostcap.registry import DispatchContext, ToolRegistry

__all__ = [
    "anthropic_tools",
    "dispatch_tool_calls",
    "parse_tool_calls",
    "run_tool_calls",
    "tool_result_block",
]


def anthropic_tools(
    registry: ToolRegistry, ctx: DispatchContext | None = None
) -> list[dict[str, Any]]:
    """The catalogue for `ctx` as Messages API `tools`."""
    return [
        {
            "name": tool.id,
            "description": registry.description(tool, ctx),
            "input_schema": dict(tool.llm_visible_params),
        }
        for tool in registry.catalogue(ctx)
    ]


def parse_tool_calls(
    message: Any, registry: ToolRegistry, ctx: DispatchContext
) -> list[ParsedCall]:
    """The `tool_use` blocks of a Messages API response."""
    data = as_mapping(message)
    calls: list[ParsedCall] = []
    for block in as_sequence(data.get("content")):
        entry = as_mapping(block)
        if entry.get("type") != "tool_use":
            continue
        arguments = entry.get("input")
        # The SDK parses `input` already; anything but an object is the model's error.
        if not isinstance(arguments, (Mapping, str)) and arguments is not None:
            arguments = "[]"
        calls.append(
            parse_call(
                str(entry.get("id") or ""), entry.get("name") or "", arguments, registry, ctx
            )
        )
    return calls


def tool_result_block(result: ToolCallResult) -> dict[str, Any]:
    """The `tool_result` content block for one result."""
    return {
        "type": "tool_result",
        "tool_use_id": result.call_id,
        "content": result.text,
        "is_error": result.is_error,
    }


async def dispatch_tool_calls(
    message: Any, registry: ToolRegistry, ctx: DispatchContext
) -> list[ToolCallResult]:
    """Dispatch every `tool_use` block; the results in block order (see `ToolCallResult.fatal`)."""
    return await dispatch_calls(parse_tool_calls(message, registry, ctx), registry, ctx)


async def run_tool_calls(
    message: Any, registry: ToolRegistry, ctx: DispatchContext
) -> dict[str, Any] | None:
    """Dispatch every `tool_use` block of `message`; the `user` message of
    `tool_result` blocks to append, or None when there was no call."""
    results = await dispatch_tool_calls(message, registry, ctx)
    if not results:
        return None
    return {"role": "user", "content": [tool_result_block(result) for result in results]}
