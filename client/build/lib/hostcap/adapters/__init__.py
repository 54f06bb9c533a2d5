"""Adapters between model SDKs' tool-use objects and the registry.

    from hostcap.adapters import openai as hostcap_openai
    tools = hostcap_openai.chat_tools(registry, ctx, strict=True)
    response = await client.chat.completions.create(model=..., messages=messages, tools=tools)
    messages.append(hostcap_openai.assistant_message(response))
    messages += await hostcap_openai.run_tool_calls(response, registry, ctx)

`hostcap.adapters.openai` (Chat Completions and the Responses API) and
`hostcap.adapters.anthropic` (Messages) need the `adapters` extra
(`pip install 'hostcap-client[adapters]'`). Both go through
`hostcap.adapters.common`: the JSON arguments are parsed here (malformed
JSON is a correctable `ToolArgsInvalidError` fed back to the model), every
call goes through `registry.dispatch`, and each result is placed in a tool
position, fenced as untrusted data.
"""

from hostcap.adapters.common import (
    ParsedCall,
    ToolCallResult,
    dispatch_calls,
    render_error,
    render_outcome,
    strict_schema,
)

__all__ = [
    "ParsedCall",
    "ToolCallResult",
    "dispatch_calls",
    "render_error",
    "render_outcome",
    "strict_schema",
]
