"""The policy file of `hostcap mcp` and the tool annotations, without a daemon."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest
from hostcap import BUILTIN_TOOLS
from hostcap.approval import PermissionMode
from hostcap.contract import Contract
from hostcap.mcp_config import McpConfigError, load_config, parse_config
from hostcap.mcp_server import tool_annotations

KNOWN = [tool.id for tool in BUILTIN_TOOLS]
EXAMPLE = Path(__file__).resolve().parents[3] / "docs" / "examples" / "hostcap-mcp.toml"


def test_the_example_policy_loads() -> None:
    config = load_config(EXAMPLE, KNOWN)
    assert config.mode is PermissionMode.ACCEPT_EDITS and config.fs_scope == "workspace-write"
    assert "run_command" in config.granted_tools
    assert config.tool_policy.command_allowed("echo") and not config.tool_policy.command_allowed(
        "rm"
    )


def test_defaults_are_the_narrowest() -> None:
    config = parse_config({}, KNOWN)
    assert config.granted_tools == frozenset() and config.mode is PermissionMode.ASK
    assert config.fs_scope == "read-only" and config.contract is None
    assert not config.tool_policy.command_allowed("echo")


def test_contract_and_limits() -> None:
    config = parse_config({"contract": "plan", "max_result_bytes": 4096}, KNOWN)
    assert config.contract is Contract.PLAN
    assert config.limits is not None and config.limits.max_bytes == 4096


@pytest.mark.parametrize(
    ("data", "says"),
    [
        ({"granted_tool": ["read_file"]}, "unknown keys: granted_tool"),
        ({"granted_tools": ["read_files"]}, "unknown tools: read_files"),
        ({"granted_tools": "read_file"}, "granted_tools must be a list"),
        ({"allowed_commands": ["echo", ""]}, "allowed_commands must be a list"),
        ({"mode": "yolo"}, "mode must be one of"),
        ({"contract": "none"}, "contract must be one of"),
        ({"fs_scope": "everything"}, "fs_scope must be one of"),
        ({"max_result_bytes": 10}, "max_bytes"),
    ],
)
def test_bad_policies_are_refused_naming_the_key(data: dict[str, object], says: str) -> None:
    with pytest.raises(McpConfigError, match=says):
        parse_config(data, KNOWN)


def test_a_file_that_is_not_toml(tmp_path: Path) -> None:
    bad = tmp_path / "p.toml"
    bad.write_text("mode = \n")
    with pytest.raises(McpConfigError, match="not valid TOML"):
        load_config(bad, KNOWN)
    with pytest.raises(McpConfigError, match="cannot read"):
        load_config(tmp_path / "absent.toml", KNOWN)
    assert tomllib.loads(EXAMPLE.read_text())  # the example stays plain TOML


def test_annotations_follow_the_effect_class() -> None:
    tools = {tool.id: tool_annotations(tool) for tool in BUILTIN_TOOLS}
    for read in ("read_file", "list_directory"):
        assert tools[read].read_only_hint and not tools[read].destructive_hint
        assert tools[read].open_world_hint is False
    for acting in ("write_file", "run_command", "git_commit", "http_request"):
        assert tools[acting].read_only_hint is False and tools[acting].destructive_hint is True
    assert tools["http_request"].open_world_hint and tools["web_search"].open_world_hint
    assert tools["write_file"].idempotent_hint and not tools["run_command"].idempotent_hint


def test_annotations_follow_what_the_allowlist_can_prove() -> None:
    from hostcap import ToolPolicy

    tools = {tool.id: tool for tool in BUILTIN_TOOLS}
    # git_status runs git that only reads (decision 0025): read-only, not destructive.
    status = tool_annotations(tools["git_status"])
    assert status.read_only_hint and not status.destructive_hint and status.idempotent_hint
    # A command runner whose every allowed program is declared read-only.
    reading = ToolPolicy(allowed_commands={"ls", "cat"}, read_only_commands={"ls", "cat", "grep"})
    hints = tool_annotations(tools["run_command"], reading)
    assert hints.read_only_hint and not hints.destructive_hint
    # One program not declared read-only, or a glob, and nothing is proven.
    for unproven in (
        ToolPolicy(allowed_commands={"ls", "rm"}, read_only_commands={"ls"}),
        ToolPolicy(
            allowed_commands={"ls"}, allowed_command_globs={"py*"}, read_only_commands={"ls"}
        ),
        ToolPolicy(),
    ):
        hints = tool_annotations(tools["run_command"], unproven)
        assert not hints.read_only_hint and hints.destructive_hint
    assert tool_annotations(tools["git_commit"], reading).destructive_hint
