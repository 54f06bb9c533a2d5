"""A minimal TOML writer for test configs (tables, arrays of tables, scalars)."""

from __future__ import annotations

import json
from typing import Any


def _scalar(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_scalar(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{json.dumps(k)} = {_scalar(v)}" for k, v in value.items()) + "}"
    raise TypeError(f"cannot write {value!r} as TOML")


def _is_table_list(value: Any) -> bool:
    return isinstance(value, list) and bool(value) and all(isinstance(v, dict) for v in value)


def dumps(data: dict[str, Any], prefix: str = "") -> str:
    lines: list[str] = []
    tables: list[tuple[str, Any]] = []
    for key, value in data.items():
        if (isinstance(value, dict) and not (prefix and key == "env")) or _is_table_list(value):
            tables.append((key, value))
        else:
            lines.append(f"{json.dumps(key)} = {_scalar(value)}")
    out = "\n".join(lines) + ("\n" if lines else "")
    for key, value in tables:
        name = f"{prefix}.{json.dumps(key)}" if prefix else json.dumps(key)
        if isinstance(value, dict):
            out += f"\n[{name}]\n" + dumps(value, name)
        else:
            for item in value:
                out += f"\n[[{name}]]\n" + dumps(item, name)
    return out
