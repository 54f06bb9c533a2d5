"""Fixtures of the client unit tests: an in-memory ToolHost (a real
implementation of the protocol) and a registry of the built-in tools."""

from __future__ import annotations

from typing import Any

import pytest
from client_support import ALL_BUILTINS, DEFAULT_POLICY, MakeCtx
from hostcap import BUILTIN_TOOLS, DispatchContext, ToolRegistry, create_tool_registry
from hostcap.testing import MemoryToolHost


@pytest.fixture
def host() -> MemoryToolHost:
    host = MemoryToolHost()
    assert host.fs is not None
    host.fs.put("notes.txt", "hello from the workspace\n")
    return host


@pytest.fixture
def registry(host: MemoryToolHost) -> ToolRegistry:
    return create_tool_registry(tools=BUILTIN_TOOLS, host=host)


@pytest.fixture
def make_ctx() -> MakeCtx:
    """A DispatchContext with every builtin granted and the test policy; override any field."""

    def make(**overrides: Any) -> DispatchContext:
        fields: dict[str, Any] = {
            "node_id": "node-1",
            "granted_tool_ids": ALL_BUILTINS,
            "config": {},
            "tool_policy": DEFAULT_POLICY,
            "fs_scope": "workspace-write",
            "gate_approved": False,
            "session_id": "session-1",
        }
        fields.update(overrides)
        return DispatchContext(**fields)

    return make
