"""The OpenAI adapter: Chat Completions and the Responses API.

Chat Completions:

    tools = chat_tools(registry, ctx, strict=True)
    response = await client.chat.completions.create(model=..., messages=messages, tools=tools)
    messages.append(assistant_message(response))
    messages += await run_tool_calls(response, registry, ctx)   # role "tool" messages

Responses API:

    tools = responses_tools(registry, ctx, strict=True)
    response = await client.responses.create(model=..., input=items, tools=tools)
    items += [item.model_dump(exclude_none=True) for item in response.output]
    items += await run_tool_calls(response, registry, ctx)      # function_call_output items

`run_tool_calls` takes the SDK's `ChatCompletion`, `ChatCompletionMessage`
or `Response` (or their JSON as a mapping) and dispatches every function
call through the registry. A call's arguments are the JSON string the model
wrote; malformed JSON becomes a correctable `ToolArgsInvalidError` result
the model sees, never an exception. Needs the `adapters` extra.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

try:
    import openai as _sdk  # noqa: F401  (the extra must be installed)
except ImportError as _missing:  # pragma: no cover - depends on the environment
    raise ImportError(
        "hostcap.adapters.openai needs the openai SDK: pip install 'hostcap-client[adapters]'"
    ) from _missing

from hostcap.adapters.common import (
    ParsedCall,
    StrictSchemaError,
    ToolCallResult,
    as_mapping,
    as_sequence,
    dispatch_calls,
    parse_call,
    strict_schema,
)
from hostcap.registry import DispatchContext, ToolRegistry
from hostcap.tooldef import ToolDef

__all__ = [
    "assistant_message",
    "chat_tools",
    "dispatch_tool_calls",
    "parse_tool_calls",
    "responses_tools",
    "run_tool_calls",
    "tool_result_item",
    "tool_result_message",
]


def _function(tool: ToolDef[Any, Any], description: str, strict: bool) -> dict[str, Any]:
    parameters = dict(tool.llm_visible_params)
    if strict:
        try:
            return {"name": tool.id, "description": description,
                    "parameters": strict_schema(parameters), "strict": True}  # fmt: skip
        except StrictSchemaError:
            # A free-form mapping argument: this one tool is offered non-strict.
            pass
    return {
        "name": tool.id,
        "description": description,
        "parameters": parameters,
        "strict": False,
    }


def chat_tools(
    registry: ToolRegistry, ctx: DispatchContext | None = None, *, strict: bool = False
) -> list[dict[str, Any]]:
    """The catalogue for `ctx` as Chat Completions `tools`. `strict=True`
    gives the strict-mode schemas (a tool whose schema strict mode cannot
    express, such as a free-form mapping, stays non-strict)."""
    return [
        {"type": "function", "function": _function(t, registry.description(t, ctx), strict)}
        for t in registry.catalogue(ctx)
    ]


def responses_tools(
    registry: ToolRegistry, ctx: DispatchContext | None = None, *, strict: bool = False
) -> list[dict[str, Any]]:
    """The catalogue for `ctx` as Responses API function tools."""
    return [
        {"type": "function", **_function(t, registry.description(t, ctx), strict)}
        for t in registry.catalogue(ctx)
    ]


def _is_responses(data: Mapping[str, Any]) -> bool:
    return data.get("object") == "response" or ("output" in data and "choices" not in data)


def parse_tool_calls(
    response: Any, registry: ToolRegistry, ctx: DispatchContext
) -> list[ParsedCall]:
    """The function calls of a Chat Completions response (or its message) or a Responses API response."""
    data = as_mapping(response)
    calls: list[ParsedCall] = []
    if _is_responses(data):
        for item in as_sequence(data.get("output")):
            entry = as_mapping(item)
            if entry.get("type") == "function_call":
                calls.append(
                    parse_call(str(entry.get("call_id") or ""), entry.get("name") or "",
                               entry.get("arguments"), registry, ctx)
                )  # fmt: skip
        return calls
    message = data
    if "choices" in data:
        choices = as_sequence(data.get("choices"))
        if not choices:
            return []
        message = as_mapping(as_mapping(choices[0]).get("message") or {})
    for item in as_sequence(message.get("tool_calls")):
        entry = as_mapping(item)
        if entry.get("type", "function") != "function":
            continue  # a custom (free-text) tool call: not one of the registry's
        function = as_mapping(entry.get("function") or {})
        calls.append(
            parse_call(str(entry.get("id") or ""), function.get("name") or "",
                       function.get("arguments"), registry, ctx)
        )  # fmt: skip
    return calls


def tool_result_message(result: ToolCallResult) -> dict[str, Any]:
    """The Chat Completions `role: tool` message for one result."""
    return {"role": "tool", "tool_call_id": result.call_id, "content": result.text}


def tool_result_item(result: ToolCallResult) -> dict[str, Any]:
    """The Responses API `function_call_output` input item for one result."""
    return {"type": "function_call_output", "call_id": result.call_id, "output": result.text}


async def dispatch_tool_calls(
    response: Any, registry: ToolRegistry, ctx: DispatchContext
) -> list[ToolCallResult]:
    """Dispatch every call of `response`; the results in call order (see `ToolCallResult.fatal`)."""
    return await dispatch_calls(parse_tool_calls(response, registry, ctx), registry, ctx)


async def run_tool_calls(
    response: Any, registry: ToolRegistry, ctx: DispatchContext
) -> list[dict[str, Any]]:
    """Dispatch every function call in `response` and return what to append:
    `role: tool` messages for Chat Completions, `function_call_output`
    items for the Responses API. Empty when the response made no call."""
    results = await dispatch_tool_calls(response, registry, ctx)
    render = tool_result_item if _is_responses(as_mapping(response)) else tool_result_message
    return [render(result) for result in results]


def assistant_message(response: Any) -> dict[str, Any]:
    """The assistant message of a Chat Completions response, as the dict to append
    to `messages` before the tool results."""
    data = as_mapping(response)
    if "choices" in data:
        choices = as_sequence(data.get("choices"))
        if not choices:
            raise ValueError("the response has no choices")
        data = as_mapping(as_mapping(choices[0]).get("message") or {})
    message: dict[str, Any] = {"role": "assistant", "content": data.get("content")}
    calls = [as_mapping(c) for c in as_sequence(data.get("tool_calls"))]
    if calls:
        message["tool_calls"] = [
            {
                "id": c.get("id"),
                "type": c.get("type", "function"),
                "function": dict(as_mapping(c.get("function") or {})),
            }
            for c in calls
        ]
    return message
