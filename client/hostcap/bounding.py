"""Model-facing bounding of a tool result.

A result over the ceiling (bytes or lines) reaches the model as its head and
tail with one marker line between them saying how much was omitted and
naming the spill handle where the full text is kept. Only the model-facing
copy is bounded: output mapping has already seen the full result.
"""

from __future__ import annotations

from dataclasses import dataclass

#: Smallest ceilings that still leave room for a head, the marker and a tail.
MIN_BYTES = 512
MIN_LINES = 4


@dataclass(frozen=True)
class ToolResultLimits:
    """The model-facing ceilings of a tool result."""

    max_bytes: int = 32 * 1024
    max_lines: int = 400
    #: The largest full result one spill may keep (None: only the store's own
    #: total bound applies). Above it the store refuses and the marker says so.
    max_spill_bytes: int | None = None
    #: The most of a command's output `DispatchContext.on_output` receives
    #: while it runs (the result is bounded and spilled as usual).
    max_streamed_bytes: int = 1024 * 1024

    def __post_init__(self) -> None:
        if not isinstance(self.max_streamed_bytes, int) or self.max_streamed_bytes <= 0:
            raise ValueError("ToolResultLimits.max_streamed_bytes must be a positive integer")
        if self.max_spill_bytes is not None and (
            not isinstance(self.max_spill_bytes, int) or self.max_spill_bytes <= 0
        ):
            raise ValueError("ToolResultLimits.max_spill_bytes must be a positive integer or None")
        if not isinstance(self.max_bytes, int) or self.max_bytes < MIN_BYTES:
            raise ValueError(f"ToolResultLimits.max_bytes must be an integer >= {MIN_BYTES}")
        if not isinstance(self.max_lines, int) or self.max_lines < MIN_LINES:
            raise ValueError(f"ToolResultLimits.max_lines must be an integer >= {MIN_LINES}")


DEFAULT_TOOL_RESULT_LIMITS = ToolResultLimits()


@dataclass(frozen=True)
class BoundedText:
    text: str
    truncated: bool
    omitted_bytes: int = 0
    omitted_lines: int = 0


def fits(text: str, limits: ToolResultLimits) -> bool:
    """Whether `text` is within both ceilings."""
    return len(text.encode()) <= limits.max_bytes and _line_count(text) <= limits.max_lines


#: Why a full result was not kept, as the marker line says it.
NO_OUTPUT_STORE = "no output store"


def marker_line(
    omitted_bytes: int,
    omitted_lines: int,
    total_bytes: int,
    handle: str | None,
    not_kept: str = NO_OUTPUT_STORE,
) -> str:
    """The one line standing in for the omitted middle. Without a handle,
    `not_kept` says why the full result was not kept ("output store full",
    ...)."""
    where = (
        f"full result ({total_bytes} bytes) spilled to output store handle {handle}"
        if handle
        else f"the full result was not kept ({not_kept})"
    )
    return f"[... hostcap: {omitted_bytes} bytes in {omitted_lines} lines omitted; {where} ...]"


def bound_text(
    text: str, limits: ToolResultLimits, handle: str | None, not_kept: str = NO_OUTPUT_STORE
) -> BoundedText:
    """`text` itself when it fits, else head + marker line + tail within both ceilings."""
    if fits(text, limits):
        return BoundedText(text, truncated=False)
    data = text.encode()
    total_bytes = len(data)
    # Size the marker for the largest numbers it can show, then split what is
    # left between head and tail.
    reserve = len(marker_line(total_bytes, total_bytes, total_bytes, handle, not_kept).encode()) + 2
    byte_budget = max(limits.max_bytes - reserve, 0)
    line_budget = limits.max_lines - 1
    head_lines = _take_lines(text, byte_budget - byte_budget // 2, line_budget - line_budget // 2)
    rest = text[len(head_lines) :]
    tail_lines = _take_lines(rest[::-1], byte_budget // 2, line_budget // 2, reverse=True)[::-1]
    middle = rest[: len(rest) - len(tail_lines)]
    omitted_bytes = len(middle.encode())
    omitted_lines = _line_count(middle)
    head = head_lines if head_lines.endswith("\n") or not head_lines else head_lines + "\n"
    marker = marker_line(omitted_bytes, omitted_lines, total_bytes, handle, not_kept)
    return BoundedText(
        f"{head}{marker}\n{tail_lines}",
        truncated=True,
        omitted_bytes=omitted_bytes,
        omitted_lines=omitted_lines,
    )


def _line_count(text: str) -> int:
    if not text:
        return 0
    return text.count("\n") + (0 if text.endswith("\n") else 1)


def _take_lines(text: str, max_bytes: int, max_lines: int, *, reverse: bool = False) -> str:
    """The longest prefix of `text` of whole lines within both budgets; when
    not even one line fits, a byte-cut fragment of the first (so a single huge
    line still shows its start and end). `reverse` means `text` is reversed:
    lines end at the *start* of a reversed chunk."""
    taken: list[str] = []
    used_bytes = 0
    position = 0
    while len(taken) < max_lines and position < len(text):
        end = text.find("\n", position + (1 if reverse else 0))
        end = len(text) if end == -1 else (end if reverse else end + 1)
        line = text[position:end]
        size = len(line.encode())
        if used_bytes + size > max_bytes:
            if not taken:
                fragment = line.encode()[: max(max_bytes - 1, 0)].decode(errors="ignore")
                # Never let a fragment carry a line break that would add lines.
                taken.append(fragment.replace("\n", " "))
            break
        taken.append(line)
        used_bytes += size
        position = end
    return "".join(taken)
