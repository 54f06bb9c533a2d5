"""For tests: an in-memory ToolHost, a real implementation of the protocol, no daemon.

It keeps hostcapd's floor in miniature (its defaults are the daemon's own,
from `hostcap_proto.floor` and `hostcap_proto.limits`), so a pipeline test meets the same
refusals a real host gives: files live beneath roots with tiers (a path
leaving them is `PATH_ESCAPES_ROOT`, a symlink leaving them
`SYMLINK_REFUSED`), protected and secret patterns, read and write ceilings,
optimistic concurrency; commands are async Python programs resolved by
name, with an environment allowlist, limit ceilings, a concurrency quota,
a wall-clock limit, head-and-tail output and cancellation. Every spawn and
write is recorded with its labels (`MemoryProcess.spawns`,
`MemoryFs.writes`), which is this host's audit log.

    host = MemoryToolHost()
    host.fs.put("notes.txt", b"hello")
    registry = create_tool_registry(tools=BUILTIN_TOOLS, host=host)
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping

from hostcap.errors import HostError
from hostcap.host import EgressRequest, EgressResponse, McpCallInput
from hostcap.output_store import MemoryOutputStore
from hostcap.testing.memory_fs import (
    DEFAULT_PROTECTED,
    DEFAULT_SECRET,
    REQUIRED_LABELS,
    MemoryFs,
    MemoryRoot,
    WriteRecord,
)
from hostcap.testing.memory_process import MemoryProcess, ProgramIO, SpawnRecord


class MemoryEgress:
    """Answers HTTPS requests from a table of canned responses, by exact URL."""

    def __init__(self, responses: Mapping[str, EgressResponse] | None = None) -> None:
        self.responses = dict(responses or {})
        self.requests: list[EgressRequest] = []

    async def fetch(self, request: EgressRequest) -> EgressResponse:
        self.requests.append(request)
        response = self.responses.get(request.url)
        if response is None:
            raise HostError("NOT_FOUND", "no canned response")
        return response


class MemoryOs:
    def __init__(self, clipboard: str = "") -> None:
        self.clipboard = clipboard
        self.notifications: list[tuple[str, str]] = []

    async def read_clipboard(self) -> str:
        return self.clipboard

    async def notify(self, title: str, body: str) -> None:
        self.notifications.append((title, body))


class MemoryMcp:
    def __init__(
        self,
        handlers: Mapping[tuple[str, str], Callable[[Mapping[str, object]], Awaitable[object]]],
    ) -> None:
        self.handlers = dict(handlers)
        self.calls: list[McpCallInput] = []

    async def call(self, request: McpCallInput) -> object:
        self.calls.append(request)
        handler = self.handlers.get((request.server, request.tool))
        if handler is None:
            raise HostError("NOT_FOUND", "no such MCP tool")
        return await handler(request.arguments)


class MemoryToolHost:
    """A ToolHost of in-memory arms. By default: fs, process (sharing the fs)
    and an output store; egress, os and mcp absent, as over hostcapd."""

    def __init__(
        self,
        *,
        fs: MemoryFs | None = None,
        process: MemoryProcess | None = None,
        egress: MemoryEgress | None = None,
        os: MemoryOs | None = None,
        mcp: MemoryMcp | None = None,
        output_store: MemoryOutputStore | None = None,
        without: Iterable[str] = (),
    ) -> None:
        omit = set(without)
        self.fs: MemoryFs | None = None if "fs" in omit else (fs if fs is not None else MemoryFs())
        self.process: MemoryProcess | None = (
            None
            if "process" in omit
            else (process if process is not None else MemoryProcess(fs=self.fs))
        )
        self.egress = egress
        self.os = os
        self.mcp = mcp
        self.output_store: MemoryOutputStore | None = (
            None
            if "output_store" in omit
            else (output_store if output_store is not None else MemoryOutputStore())
        )


__all__ = [
    "DEFAULT_PROTECTED",
    "DEFAULT_SECRET",
    "REQUIRED_LABELS",
    "MemoryEgress",
    "MemoryFs",
    "MemoryMcp",
    "MemoryOs",
    "MemoryProcess",
    "MemoryRoot",
    "MemoryToolHost",
    "ProgramIO",
    "SpawnRecord",
    "WriteRecord",
]
