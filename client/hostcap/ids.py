"""Tool ids and the one ordering of ids and field names.

A tool id is exactly `[A-Za-z0-9_-]`, 1 to 64 characters: ASCII only (not
`str.isalnum`, which admits `r\u00e9ad`, a full-width `\uff21tool` or a
mathematical `\U0001d400tool`). The seeds give no length; 64 is the longest function name the
OpenAI and Anthropic tool APIs accept, so a registered id always reaches the
model unchanged.

Registry ids and field-only refusal lists sort by UTF-16 code units,
independent of locale, as the seed requires (Python's own `sorted` orders
by code point, which differs above U+FFFF).
"""

from __future__ import annotations

import re
from collections.abc import Iterable

TOOL_ID_MAX_CHARS = 64
_TOOL_ID = re.compile(rf"[A-Za-z0-9_-]{{1,{TOOL_ID_MAX_CHARS}}}")


def is_tool_id(value: object) -> bool:
    """Whether `value` is a well-formed tool id."""
    return isinstance(value, str) and _TOOL_ID.fullmatch(value) is not None


def utf16_key(value: str) -> bytes:
    """A sort key ordering strings by UTF-16 code units (big-endian bytes
    compare as the units do; a lone surrogate is kept, not refused)."""
    return value.encode("utf-16-be", "surrogatepass")


def utf16_sorted(values: Iterable[str]) -> list[str]:
    """`values` in UTF-16 code-unit order."""
    return sorted(values, key=utf16_key)
