"""The event seam: what a dispatch reports to an engine that logs, traces or
shows progress.

    def log(event: ToolEvent) -> None:
        print(event.to_dict())

    registry = create_tool_registry(tools=BUILTIN_TOOLS, host=host, on_event=log)
    # or, per dispatch: DispatchContext(..., on_event=log)

One callback, sync or async, on the registry or on the context (both are
called when both are set, the registry's first). Every dispatch emits, in
order:

- `approval_requested` and `approval_answered`, for a governed call that
  reaches the approval gate (the preview is the scrubbed display copy, never
  the unredacted one);
- `tool_call_started`, immediately before the one host call, with
  `tool_input_summary`;
- exactly one terminal event: `tool_call_finished` (with
  `tool_output_summary`), `tool_call_denied` (a `tool_denied` refusal: a
  guardrail, the grant, the contract, the approval, the before-dispatch
  veto or the host's floor, with its `reason`), or `tool_call_failed`
  (every other error: an unknown tool, invalid arguments, an unavailable
  arm, a host failure, a cancellation).

Summaries are bounded and redacted the way the approval preview is:
secret-shaped spans are replaced by `[redacted]` over the complete text
*before* anything is clipped (a cut can never make a credential
unrecognisable), credential and secret-tainted arguments are masked whole,
and the output summary is one line. Text that comes from the model or a
tool (the summaries, the preview) is carried `Untrusted`, and `to_dict()`
places it under an explicit `{"untrusted": ...}` marker; `detail` holds
only what the engine itself decided (codes, reasons, labels, sizes).

A callback's exception is logged and never changes the dispatch; the
callback cannot veto (that is `DispatchContext.before_dispatch`'s job).
"""

from __future__ import annotations

import inspect
import json
import logging
import re
from collections.abc import Awaitable, Callable, Mapping
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Literal

from hostcap.redaction import REDACTED, redact_secret_shaped_text
from hostcap.untrusted import Untrusted

EventKind = Literal[
    "approval_requested",
    "approval_answered",
    "tool_call_started",
    "tool_call_finished",
    "tool_call_denied",
    "tool_call_failed",
]
EVENT_KINDS: tuple[EventKind, ...] = EventKind.__args__  # type: ignore[attr-defined]

#: Bounds of the summaries (characters).
LEAF_CHARS = 200
INPUT_SUMMARY_CHARS = 1000
OUTPUT_SUMMARY_CHARS = 500
_MAX_DEPTH = 6
_MAX_ITEMS = 32
ELLIPSIS = "…"

_log = logging.getLogger("hostcap.events")


@dataclass(frozen=True, kw_only=True)
class ToolEvent:
    """One thing a dispatch did. `detail` is engine-authored and trusted; the
    summaries and the preview derive from model or tool text and are
    `Untrusted`."""

    kind: EventKind
    tool_call_id: str
    tool_id: str | None
    node_id: str
    session_id: str | None
    detail: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))
    tool_input_summary: Untrusted[str] | None = None
    tool_output_summary: Untrusted[str] | None = None
    preview: Untrusted[Mapping[str, str]] | None = None

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable form: untrusted text sits under an explicit
        `{"untrusted": ...}` marker, never as a bare field."""
        out: dict[str, Any] = {
            "kind": self.kind,
            "tool_call_id": self.tool_call_id,
            "tool_id": self.tool_id,
            "node_id": self.node_id,
            "session_id": self.session_id,
            "detail": dict(self.detail),
        }
        if self.tool_input_summary is not None:
            out["tool_input_summary"] = {"untrusted": self.tool_input_summary.unwrap()}
        if self.tool_output_summary is not None:
            out["tool_output_summary"] = {"untrusted": self.tool_output_summary.unwrap()}
        if self.preview is not None:
            out["preview"] = {"untrusted": dict(self.preview.unwrap())}
        return out


EventCallback = Callable[[ToolEvent], Awaitable[None] | None]


async def deliver(event: ToolEvent, *callbacks: EventCallback | None) -> None:
    """Hand `event` to each callback; a failing callback is logged, never raised."""
    for callback in callbacks:
        if callback is None:
            continue
        try:
            result = callback(event)
            if inspect.isawaitable(result):
                await result
        except Exception:
            _log.warning("a tool event callback failed on %s", event.kind, exc_info=True)


# ------------------------------------------------------------------ summaries


def clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + ELLIPSIS


#: How much of one huge string leaf is scanned for secrets (the leaf shows
#: only LEAF_CHARS of it); when redaction leaves too little of the window to
#: be sure what follows it is clean, the leaf is masked whole.
_SCAN_WINDOW = 64 * 1024


def _redacted_leaf(text: str) -> str:
    if len(text) <= _SCAN_WINDOW:
        return clip(redact_secret_shaped_text(text), LEAF_CHARS)
    scanned = redact_secret_shaped_text(text[:_SCAN_WINDOW])
    if len(scanned) < 4 * LEAF_CHARS:
        return f"{REDACTED} ({len(text)} characters)"
    return clip(scanned, LEAF_CHARS)


def _project(value: Any, depth: int, ancestors: set[int]) -> Any:
    """Secret projection of one argument value: string leaves redacted whole,
    then clipped; containers bounded; a genuine cycle marked."""
    if isinstance(value, str):
        return _redacted_leaf(value)
    if isinstance(value, bytes | bytearray):
        return f"[{len(value)} bytes]"
    if value is None or isinstance(value, bool | int | float):
        return value
    if depth >= _MAX_DEPTH:
        return "[nested]"
    if id(value) in ancestors:
        return "[cyclic]"
    ancestors.add(id(value))
    try:
        if isinstance(value, Mapping):
            items = list(value.items())
            out: Any = {
                _redacted_leaf(str(k)): _project(v, depth + 1, ancestors)
                for k, v in items[:_MAX_ITEMS]
            }
            if len(items) > _MAX_ITEMS:
                out[ELLIPSIS] = f"{len(items) - _MAX_ITEMS} more"
            return out
        if isinstance(value, list | tuple | set | frozenset):
            seq = list(value)
            projected = [_project(v, depth + 1, ancestors) for v in seq[:_MAX_ITEMS]]
            if len(seq) > _MAX_ITEMS:
                projected.append(f"{ELLIPSIS} {len(seq) - _MAX_ITEMS} more")
            return projected
        return f"[{type(value).__name__}]"
    finally:
        ancestors.discard(id(value))


def summarize_input(args: Mapping[str, Any], masked: AbstractSet[str] = frozenset()) -> str:
    """A bounded, redacted one-line summary of a call's arguments. Keys in
    `masked` (credential and secret-tainted arguments) are masked whole."""
    projected = {
        _redacted_leaf(key): (REDACTED if key in masked else _project(value, 0, set()))
        for key, value in list(args.items())[:_MAX_ITEMS]
    }
    text = json.dumps(projected, ensure_ascii=False, sort_keys=True, default=str)
    return clip(text, INPUT_SUMMARY_CHARS)


_WHITESPACE = re.compile(r"\s+")


def summarize_output(text: str) -> str:
    """A bounded, redacted one-line summary of a result's model-facing text:
    recognised spans redacted over the complete text, whitespace folded to
    one line, redacted again (a span split by a line break), then clipped."""
    one_line = _WHITESPACE.sub(" ", redact_secret_shaped_text(text)).strip()
    return clip(redact_secret_shaped_text(one_line), OUTPUT_SUMMARY_CHARS)
