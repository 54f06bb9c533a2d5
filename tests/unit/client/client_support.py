"""Shared values of the client unit tests (a module, so tests can import it)."""

from __future__ import annotations

from collections.abc import Callable

from hostcap import BUILTIN_TOOLS, DispatchContext, ToolPolicy

ALL_BUILTINS = frozenset(tool.id for tool in BUILTIN_TOOLS)
DEFAULT_POLICY = ToolPolicy(
    allowed_commands={"echo", "cat", "sleep", "seq", "false"}, allowed_domains={"api.example.com"}
)

MakeCtx = Callable[..., DispatchContext]
