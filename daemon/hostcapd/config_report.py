"""How an invalid config is reported: one line a problem, the key path
readable (`tenant 'beta': roots[1].path`), pydantic's own wording and
internals left out.
"""

from __future__ import annotations

import difflib
import re
import typing
from collections.abc import Iterator, Mapping
from typing import Any

from pydantic import BaseModel, ValidationError


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


def _message(msg: str) -> str:
    for noise in ("Value error, ", "Assertion failed, "):
        if msg.startswith(noise):
            return msg[len(noise) :]
    return msg


def format_errors(
    error: ValidationError,
    source: str,
    data: Mapping[str, Any],
    model: type[BaseModel] | None = None,
    text: str | None = None,
) -> str:
    """One line a problem. An unknown key says which known key it is
    likely a misspelling of (the keys of `model` at that place) and the
    line of `text` it is on; the "required" error of the key it replaced,
    and a list's "at least 1 item" that only follows from an item's own
    error, are left out (they say the same thing again, less clearly)."""
    items = [(tuple(e["loc"]), e["type"], str(e["msg"])) for e in error.errors()]
    explained: set[tuple[int | str, ...]] = set()
    messages: dict[int, str] = {}
    for index, (loc, kind, _) in enumerate(items):
        if kind != "extra_forbidden" or model is None:
            continue
        known = _field_names(model, loc[:-1])
        guess = difflib.get_close_matches(str(loc[-1]), known, n=1, cutoff=0.6)
        message = "unknown key"
        if guess:
            message += f" (did you mean {guess[0]!r}?)"
            explained.add((*loc[:-1], guess[0]))
        line = _line_of(text, _toml_path(data, loc)) if text is not None else None
        if line is not None:
            message += f" (line {line})"
        messages[index] = message
    lines = [f"{source}: invalid config"]
    for index, (loc, kind, msg) in enumerate(items):
        if kind == "missing" and loc in explained:
            continue
        if kind == "too_short" and any(
            other[: len(loc)] == loc and len(other) > len(loc) for other, _, _ in items
        ):
            continue
        lines.append(f"  {_location(data, loc)}: {messages.get(index) or _message(msg)}")
    return "\n".join(lines)


def _models_in(annotation: Any) -> Iterator[type[BaseModel]]:
    """The models an annotation holds (`Root` in `tuple[Root, ...] | None`)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        yield annotation
        return
    for arg in typing.get_args(annotation):
        yield from _models_in(arg)


def _field_names(model: type[BaseModel], parent: tuple[int | str, ...]) -> list[str]:
    """The keys the model at `parent` (a path of field names and list
    positions below `model`) knows."""
    current = [model]
    for part in parent:
        if isinstance(part, int):
            continue
        found = [
            m
            for c in current
            if part in c.model_fields
            for m in _models_in(c.model_fields[part].annotation)
        ]
        if not found:
            return []
        current = found
    return sorted({name for c in current for name in c.model_fields})


def _toml_path(data: Mapping[str, Any], loc: tuple[int | str, ...]) -> list[str]:
    """The key path as the TOML file spells it: tenants by name, without
    list positions (`tenants.beta.limits.ceiling.memroy_bytes`)."""
    path: list[str] = []
    rest = list(loc)
    if len(rest) >= 2 and rest[0] == "tenants" and isinstance(rest[1], int):
        label = _tenant_label(data, rest[1])
        if label.startswith("tenant "):
            path = ["tenants", label[len("tenant ") :].strip("'")]
            rest = rest[2:]
    return path + [str(part) for part in rest if not isinstance(part, int)]


_HEADER = re.compile(r"^\s*\[\[?\s*([^\]]+?)\s*\]\]?\s*(#.*)?$")
_KEY = re.compile(
    r"""^\s*((?:"[^"]*"|'[^']*'|[A-Za-z0-9_-]+)(?:\s*\.\s*(?:"[^"]*"|'[^']*'|[A-Za-z0-9_-]+))*)\s*="""
)


def _parts(dotted: str) -> list[str]:
    return [p.strip().strip("\"'") for p in re.findall(r"\"[^\"]*\"|'[^']*'|[^.]+", dotted)]


def _line_of(text: str, path: list[str]) -> int | None:
    """The 1-based line where the key `path` is set: under its table's
    header, else the first line that sets a key of that name (an inline
    table, a dotted key)."""
    table: list[str] = []
    fallback: int | None = None
    key = path[-1] if path else ""
    pattern = re.compile(r"""(^|[{,\s])["']?""" + re.escape(key) + r"""["']?\s*=""")
    for number, line in enumerate(text.splitlines(), start=1):
        header = _HEADER.match(line)
        if header:
            table = _parts(header.group(1))
            if table[: len(path)] == path:
                return number  # the key is a table of its own
            continue
        match = _KEY.match(line)
        if match and table + _parts(match.group(1)) == path:
            return number
        if fallback is None and pattern.search(line):
            fallback = number
    return fallback
