"""The policy file of `hostcap mcp`: a small TOML document.

    granted_tools = ["read_file", "list_directory", "write_file", "run_command"]
    allowed_commands = ["echo", "ls", "git"]
    allowed_command_globs = []
    read_only_commands = ["ls", "cat"]  # optional: allowed programs that only read
    allowed_domains = []
    fs_scope = "workspace-write"      # or "read-only"
    mode = "accept-edits"             # ask / accept-edits / auto
    contract = "plan"                 # optional: plan / goal

Unknown keys, wrong types and unknown tool ids are refused with
`McpConfigError` naming the key: a typo must never silently widen or
narrow what a client may do.
"""

from __future__ import annotations

import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from hostcap.approval import PermissionMode
from hostcap.bounding import ToolResultLimits
from hostcap.contract import Contract
from hostcap.policy import FS_SCOPES, FsScope, ToolPolicy


class McpConfigError(ValueError):
    """The policy file is missing, not TOML, or names an unknown key or value."""


_KEYS = frozenset(
    {
        "granted_tools",
        "allowed_commands",
        "allowed_command_globs",
        "read_only_commands",
        "allowed_domains",
        "fs_scope",
        "mode",
        "contract",
        "node_id",
        "max_result_bytes",
        "max_result_lines",
    }
)


@dataclass(frozen=True)
class McpServerConfig:
    granted_tools: frozenset[str]
    tool_policy: ToolPolicy
    fs_scope: FsScope
    mode: PermissionMode
    contract: Contract | None = None
    node_id: str = "mcp"
    limits: ToolResultLimits | None = None


def _strings(data: Mapping[str, Any], key: str) -> tuple[str, ...]:
    value = data.get(key, [])
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise McpConfigError(f"{key} must be a list of non-empty strings")
    return tuple(value)


def parse_config(data: Mapping[str, Any], known_tools: Iterable[str]) -> McpServerConfig:
    """The config of a parsed TOML document, checked against the registry's tool ids."""
    unknown = sorted(set(data) - _KEYS)
    if unknown:
        raise McpConfigError(f"unknown keys: {', '.join(unknown)}")
    granted = _strings(data, "granted_tools")
    missing = sorted(set(granted) - set(known_tools))
    if missing:
        raise McpConfigError(f"granted_tools names unknown tools: {', '.join(missing)}")
    fs_scope = data.get("fs_scope", "read-only")
    if fs_scope not in FS_SCOPES:
        raise McpConfigError(f"fs_scope must be one of {', '.join(FS_SCOPES)}")
    try:
        mode = PermissionMode(data.get("mode", "ask"))
    except ValueError:
        raise McpConfigError(
            f"mode must be one of {', '.join(m.value for m in PermissionMode)}"
        ) from None
    contract_value = data.get("contract")
    try:
        contract = Contract(contract_value) if contract_value is not None else None
    except ValueError:
        raise McpConfigError(
            f"contract must be one of {', '.join(c.value for c in Contract)}"
        ) from None
    node_id = data.get("node_id", "mcp")
    if not isinstance(node_id, str) or not node_id:
        raise McpConfigError("node_id must be a non-empty string")
    limits = None
    if "max_result_bytes" in data or "max_result_lines" in data:
        try:
            limits = ToolResultLimits(
                max_bytes=data.get("max_result_bytes", 32 * 1024),
                max_lines=data.get("max_result_lines", 400),
            )
        except ValueError as error:
            raise McpConfigError(str(error)) from None
    return McpServerConfig(
        granted_tools=frozenset(granted),
        tool_policy=ToolPolicy(
            allowed_commands=_strings(data, "allowed_commands"),
            allowed_command_globs=_strings(data, "allowed_command_globs"),
            allowed_domains=_strings(data, "allowed_domains"),
            read_only_commands=_strings(data, "read_only_commands"),
        ),
        fs_scope=cast(FsScope, fs_scope),
        mode=mode,
        contract=contract,
        node_id=node_id,
        limits=limits,
    )


def load_config(path: str | Path, known_tools: Iterable[str]) -> McpServerConfig:
    try:
        with open(path, "rb") as file:
            data = tomllib.load(file)
    except OSError as error:
        raise McpConfigError(f"cannot read {path}: {error.strerror}") from None
    except tomllib.TOMLDecodeError as error:
        raise McpConfigError(f"{path} is not valid TOML: {error}") from None
    return parse_config(data, known_tools)
