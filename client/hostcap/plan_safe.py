"""`plan_safe_actions`, enforced where a plugin tool's effects happen.

A plugin tool declares what it does under a contract mode (Plan, Goal) as
`plan_safe_actions`. The PR seed admits it on that declaration "which the
plugin runtime also enforces": an approval the callee would reject is not a
gate. hostcap's plugin runtime is the ToolHost a tool's dispatch is given,
so in a contract mode the registry hands a plugin tool `PlanSafeHost`: the
arms its actions allow, each call checked before it reaches the real arm.
A call outside them is refused there, before any effect, as
`ToolPolicyError("action_not_declared")`, which the registry reports as the
call's terminal `tool_call_denied` event (the client's audit record). An
allowed call carries the declared actions to the host as the audit label
`plan_safe_actions`, so the daemon's record of the spawn or write says
under which declaration it ran.

The actions the runtime can enforce, and what each lets through:

- `read`: the fs arm's reads (`read_file`, `list_directory`, `stat`);
- `write`: the fs arm's `write_file`;
- `process`: the process arm's `spawn`;
- `egress`: the egress arm's `fetch`;
- `mcp`: the mcp arm's `call`;
- `os`: the os arm (clipboard, notification);
- `media`: the output store's stored media (`media`, `open`).

A declaration naming anything else cannot be enforced, so the contract
modes refuse the tool (`hostcap.contract`). What a plugin's Python does
without the ToolHost is outside any runtime's reach; a plugin tool is code
the engine chose to load.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from hostcap.errors import ToolPolicyError
from hostcap.host import (
    EgressRequest,
    McpCallInput,
    SpawnOptions,
    ToolHost,
)

#: Every action the runtime enforces (see the module docstring).
ENFORCED_ACTIONS: frozenset[str] = frozenset(
    {"read", "write", "process", "egress", "mcp", "os", "media"}
)
#: The audit label an allowed call carries to the host.
LABEL = "plan_safe_actions"


def enforceable(actions: Sequence[str]) -> bool:
    """Whether the runtime can hold a tool to `actions` (non-empty, all known)."""
    return bool(actions) and set(actions) <= ENFORCED_ACTIONS


class PlanSafeHost:
    """The ToolHost a plugin tool gets in a contract mode: only the arms and
    calls its declared actions allow. The output store's spill stays the
    registry's own (it bounds results, not the tool)."""

    def __init__(self, host: ToolHost, actions: Sequence[str], tool_id: str) -> None:
        self._host = host
        self._actions = frozenset(actions)
        self._tool_id = tool_id
        self._label = ",".join(sorted(self._actions))

    def _check(self, action: str, what: str) -> None:
        if action not in self._actions:
            raise ToolPolicyError(
                "action_not_declared",
                tool_id=self._tool_id,
                detail=f"{what} needs {action!r}; the tool declared {sorted(self._actions)}",
            )

    def _labels(self, labels: Mapping[str, str]) -> dict[str, str]:
        return {**labels, LABEL: self._label}

    @property
    def fs(self) -> Any:
        arm = self._host.fs
        return None if arm is None else _Fs(self, arm)

    @property
    def process(self) -> Any:
        arm = self._host.process
        return None if arm is None else _Process(self, arm)

    @property
    def egress(self) -> Any:
        arm = self._host.egress
        return None if arm is None else _Egress(self, arm)

    @property
    def mcp(self) -> Any:
        arm = self._host.mcp
        return None if arm is None else _Mcp(self, arm)

    @property
    def os(self) -> Any:
        arm = self._host.os
        return None if arm is None else _Os(self, arm)

    @property
    def output_store(self) -> Any:
        arm = self._host.output_store
        return None if arm is None else _Store(self, arm)


class _Fs:
    def __init__(self, gate: PlanSafeHost, arm: Any) -> None:
        self._gate, self._arm = gate, arm

    async def read_file(self, path: str, **kwargs: Any) -> Any:
        self._gate._check("read", "reading a file")
        return await self._arm.read_file(path, **kwargs)

    async def list_directory(self, path: str, **kwargs: Any) -> Any:
        self._gate._check("read", "listing a directory")
        return await self._arm.list_directory(path, **kwargs)

    async def stat(self, path: str) -> Any:
        self._gate._check("read", "reading a file's metadata")
        return await self._arm.stat(path)

    async def write_file(
        self, path: str, data: bytes, *, labels: Mapping[str, str], **kwargs: Any
    ) -> Any:
        self._gate._check("write", "writing a file")
        return await self._arm.write_file(path, data, labels=self._gate._labels(labels), **kwargs)


class _Process:
    def __init__(self, gate: PlanSafeHost, arm: Any) -> None:
        self._gate, self._arm = gate, arm

    async def spawn(
        self, command: str, args: Sequence[str], declared_env: Mapping[str, str], opts: SpawnOptions
    ) -> Any:
        self._gate._check("process", "starting a process")
        opts = replace(opts, labels=self._gate._labels(opts.labels))
        return await self._arm.spawn(command, args, declared_env, opts)


class _Egress:
    def __init__(self, gate: PlanSafeHost, arm: Any) -> None:
        self._gate, self._arm = gate, arm

    async def fetch(self, request: EgressRequest) -> Any:
        self._gate._check("egress", "a network request")
        return await self._arm.fetch(request)


class _Mcp:
    def __init__(self, gate: PlanSafeHost, arm: Any) -> None:
        self._gate, self._arm = gate, arm

    async def call(self, request: McpCallInput) -> Any:
        self._gate._check("mcp", "an MCP call")
        return await self._arm.call(request)


class _Os:
    def __init__(self, gate: PlanSafeHost, arm: Any) -> None:
        self._gate, self._arm = gate, arm

    async def read_clipboard(self) -> Any:
        self._gate._check("os", "reading the clipboard")
        return await self._arm.read_clipboard()

    async def notify(self, title: str, body: str) -> Any:
        self._gate._check("os", "a notification")
        return await self._arm.notify(title, body)


class _Store:
    def __init__(self, gate: PlanSafeHost, arm: Any) -> None:
        self._gate, self._arm = gate, arm

    async def media(self, handle: str) -> Any:
        self._gate._check("media", "reading stored media")
        return await self._arm.media(handle)

    async def open(self, handle: str) -> Any:
        self._gate._check("media", "reading stored media")
        return await self._arm.open(handle)

    async def store_media(self, data: bytes, media_type: str) -> Any:
        self._gate._check("write", "storing media")
        return await self._arm.store_media(data, media_type)

    async def spill(self, *args: Any, **kwargs: Any) -> Any:
        return await self._arm.spill(*args, **kwargs)

    async def sweep(self) -> None:
        self._gate._check("write", "sweeping the output store")
        await self._arm.sweep()
