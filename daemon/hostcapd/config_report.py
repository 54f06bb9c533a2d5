"""How an invalid config is reported: one line a problem, the key path
readable (`tenant 'beta': roots[1].path`), pydantic's own wording and
internals left out.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError


def _tenant_label(data: Mapping[str, Any], index: object) -> str:
    """`tenant 'beta'` for the tenant at list position `index` of the input."""
    tenants = data.get("tenants")
    if isinstance(index, int) and isinstance(tenants, list) and 0 <= index < len(tenants):
        body = tenants[index]
        if isinstance(body, Mapping) and isinstance(body.get("name"), str):
            return f"tenant {body['name']!r}"
    return f"tenants[{index}]"


def _location(data: Mapping[str, Any], loc: tuple[int | str, ...]) -> str:
    """A readable key path: tenants by name, list positions in brackets
    (`tenant 'beta': roots[1].path`)."""
    parts: list[str] = []
    prefix = ""
    rest = list(loc)
    if len(rest) >= 2 and rest[0] == "tenants":
        prefix = _tenant_label(data, rest[1])
        rest = rest[2:]
    for part in rest:
        if isinstance(part, int) and parts:
            parts[-1] += f"[{part}]"
        else:
            parts.append(str(part))
    path = ".".join(parts)
    if prefix:
        return f"{prefix}: {path}" if path else prefix
    return path or "(top level)"


def _message(item: Mapping[str, Any]) -> str:
    msg = str(item["msg"])
    for noise in ("Value error, ", "Assertion failed, "):
        if msg.startswith(noise):
            return msg[len(noise) :]
    return msg


def format_errors(error: ValidationError, source: str, data: Mapping[str, Any]) -> str:
    lines = [f"{source}: invalid config"]
    for item in error.errors():
        lines.append(f"  {_location(data, tuple(item['loc']))}: {_message(item)}")
    return "\n".join(lines)
