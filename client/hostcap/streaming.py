"""A running command's output, passed to the engine as it comes.

`DispatchContext.on_output` receives `OutputChunk`s. The registry puts this
module's forwarder between the host and that callback, so every chunk is
bounded and marked like the result it becomes part of: each piece is at
most `CHUNK_CHARS`, a call streams at most `max_streamed_bytes` in all
(then one final chunk says the stream stopped; the result itself is
bounded and spilled as usual), and each text is `Untrusted`.
"""

from __future__ import annotations

import inspect
from typing import Literal

from hostcap.bounding import DEFAULT_TOOL_RESULT_LIMITS
from hostcap.dispatch_context import DispatchContext, OutputChunk
from hostcap.host import OutputHandler
from hostcap.untrusted import Untrusted

#: The largest text one chunk carries.
CHUNK_CHARS = 4096


def bounded_output(ctx: DispatchContext, tool_call_id: str, tool_id: str) -> OutputHandler | None:
    """The host-side output handler for one call, or None when the engine
    asked for no streaming."""
    callback = ctx.on_output
    if callback is None:
        return None
    budget = (ctx.limits or DEFAULT_TOOL_RESULT_LIMITS).max_streamed_bytes
    sent = 0
    stopped = False

    async def deliver(chunk: OutputChunk) -> None:
        answer = callback(chunk)
        if inspect.isawaitable(answer):
            await answer

    async def forward(stream: str, text: str) -> None:
        nonlocal sent, stopped
        if stopped:
            return
        which: Literal["stdout", "stderr"] = "stderr" if stream == "stderr" else "stdout"
        data = text.encode()
        if sent + len(data) > budget:
            keep = data[: budget - sent].decode(errors="ignore")
            stopped = True
        else:
            keep = text
        for start in range(0, len(keep), CHUNK_CHARS):
            piece = keep[start : start + CHUNK_CHARS]
            sent += len(piece.encode())
            await deliver(OutputChunk(tool_call_id, tool_id, which, Untrusted(piece)))
        if stopped:
            note = (
                f"[hostcap: streaming stopped after {sent} bytes; the result holds the "
                "bounded output]"
            )
            await deliver(OutputChunk(tool_call_id, tool_id, which, Untrusted(note), final=True))

    return forward
