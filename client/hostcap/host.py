"""The ToolHost seam: the engine's only path to a side effect.

A `ToolHost` offers capability arms, each optional: `process` (spawn a
command, shell-free, the host resolving the executable and building the
environment), `fs` (read, write, list, stat, jailed by the host), `egress`,
`os`, `mcp`, and the `output_store` that holds spilled results. A tool whose
arm is absent fails with `ToolUnavailableError` naming the arm.

`hostcap.connect()` gives a ToolHost backed by hostcapd; `hostcap.testing`
holds an in-memory one. An engine may supply its own: anything with these
attributes satisfies the protocol.

Arms report refusals by raising `hostcap.errors.HostError` with a wire
reason. Cancellation is task cancellation: cancelling the awaiting task
cancels the host call (for hostcapd, the RPC, which kills the process tree).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from types import MappingProxyType
from typing import Any, Protocol, runtime_checkable

from hostcap_proto.limits import LimitValues
from hostcap_proto.names import Outcome as Outcome  # the wire's; part of this module's API

from hostcap.bounding import ToolResultLimits


@dataclass(frozen=True, kw_only=True)
class ProcessLimits(LimitValues):
    """Limits a spawn asks for; each may only narrow the host's ceiling. The
    fields, their types and units are `hostcap_proto.limits.LimitValues`'s."""


#: `(stream, text)`: a piece of a running command's output ("stdout" or
#: "stderr"), as the host receives it. The registry bounds and marks it
#: before an engine sees it (`DispatchContext.on_output`).
OutputHandler = Callable[[str, str], Awaitable[None]]


@dataclass(frozen=True, kw_only=True)
class SpawnOptions:
    """How to run a command. `labels` tie the host's audit records to the
    engine's decision (session, node_id, tool_call_id) and are required.
    `deadline` (seconds since the epoch) is when the host call must be over:
    the host passes it on as its RPC deadline."""

    labels: Mapping[str, str]
    cwd: str | None = None
    limits: ProcessLimits = field(default_factory=ProcessLimits)
    stdin: bytes | None = None
    request_id: str | None = None
    deadline: float | None = None
    #: Given: the host streams the output to it as it comes (the result still
    #: holds the whole, bounded by the host's output limit).
    on_output: OutputHandler | None = None
    #: Keep its stdin open after `stdin` for `write_stdin` (a session only).
    stdin_open: bool = False
    #: Run it on a pseudo-terminal of this size (implies `stdin_open`).
    tty: TerminalSize | None = None


@dataclass(frozen=True)
class TerminalSize:
    """A terminal's size in character cells, 1..MAX_TERMINAL_CELLS each."""

    rows: int
    cols: int

    def __post_init__(self) -> None:
        for name in ("rows", "cols"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int):
                raise TypeError(f"TerminalSize.{name} must be an integer")
            if not 1 <= value <= MAX_TERMINAL_CELLS:
                raise ValueError(f"TerminalSize.{name} must be 1-{MAX_TERMINAL_CELLS}")


#: The host's bound on a terminal's rows and columns (hostcapd's).
MAX_TERMINAL_CELLS = 1000
#: The size a terminal gets when none is asked for.
DEFAULT_TERMINAL = TerminalSize(24, 80)
#: The most the host takes in one write to a session's input (hostcapd's).
MAX_INPUT_CHUNK = 64 * 1024


#: The host's bounds on labels (hostcapd's): the correlation labels take three.
MAX_LABELS = 32
MAX_LABEL_KEY = 128
MAX_LABEL_VALUE = 1024
CORRELATION_LABELS = frozenset({"session", "node_id", "tool_call_id"})


@dataclass(frozen=True, kw_only=True)
class HostCallOptions:
    """Trusted, execution-only options an engine passes through to the host
    call (`DispatchContext.host_call_options`), never through tool arguments.

    `deadline` (seconds since the epoch, `time.time()`) is when the host call
    must be over: it reaches the process arm as the RPC deadline, and the
    registry bounds every host call by it. `labels` are extra audit labels
    (a trace id, ...) added to every spawn and write; they can never replace
    the correlation labels (`session`, `node_id`, `tool_call_id`)."""

    deadline: float | None = None
    labels: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.deadline is not None and (
            isinstance(self.deadline, bool) or not isinstance(self.deadline, int | float)
        ):
            raise TypeError("HostCallOptions.deadline must be seconds since the epoch")
        if not isinstance(self.labels, Mapping):
            raise TypeError("HostCallOptions.labels must be a mapping of strings")
        labels = dict(self.labels)
        for key, value in labels.items():
            if not isinstance(key, str) or not isinstance(value, str):
                raise TypeError("HostCallOptions.labels must map strings to strings")
            if not key or len(key) > MAX_LABEL_KEY or len(value) > MAX_LABEL_VALUE:
                raise ValueError(
                    f"a label key must be 1-{MAX_LABEL_KEY} and a value at most "
                    f"{MAX_LABEL_VALUE} characters"
                )
            if key in CORRELATION_LABELS:
                raise ValueError(f"label {key!r} is the registry's correlation label")
        if len(labels) > MAX_LABELS - len(CORRELATION_LABELS):
            raise ValueError(f"at most {MAX_LABELS - len(CORRELATION_LABELS)} extra labels")
        object.__setattr__(self, "labels", MappingProxyType(labels))


@dataclass(frozen=True, kw_only=True)
class ProcessResult:
    """A finished spawn. stdout/stderr are what the host kept (head and tail
    within its output limit), decoded as UTF-8 with replacement."""

    spawn_id: str
    outcome: Outcome
    exit_code: int | None
    signal_name: str | None = None
    stdout: str = ""
    stderr: str = ""
    stdout_dropped_bytes: int = 0
    stderr_dropped_bytes: int = 0
    duration_seconds: float = 0.0
    message: str = ""
    executable: str | None = None
    executable_sha256: str | None = None


@dataclass(frozen=True, kw_only=True)
class FileRead:
    path: str
    data: bytes
    size: int
    truncated: bool
    is_binary: bool
    media_type: str
    sha256: str


@dataclass(frozen=True, kw_only=True)
class FileWritten:
    path: str
    size: int
    sha256: str
    created: bool
    previous_sha256: str | None = None


class FileType(StrEnum):
    REGULAR = "regular"
    DIRECTORY = "directory"
    SYMLINK = "symlink"
    OTHER = "other"


@dataclass(frozen=True, kw_only=True)
class DirEntry:
    name: str
    type: FileType
    size: int = 0
    mtime: float = 0.0


@dataclass(frozen=True, kw_only=True)
class DirListing:
    path: str
    entries: tuple[DirEntry, ...]
    truncated: bool


@dataclass(frozen=True, kw_only=True)
class FileStat:
    path: str
    type: FileType
    size: int
    mode: int
    mtime: float
    writable: bool


@dataclass(frozen=True, kw_only=True)
class EgressRequest:
    method: str
    url: str
    headers: Mapping[str, str] = field(default_factory=dict)
    body: str | None = None
    #: An opaque secret-store reference the host resolves inside its boundary.
    credential_ref: str | None = None


@dataclass(frozen=True, kw_only=True)
class EgressResponse:
    status: int
    headers: Mapping[str, str]
    body: str
    media_type: str = "text/plain"


@dataclass(frozen=True, kw_only=True)
class McpCallInput:
    server: str
    tool: str
    arguments: Mapping[str, Any]


@dataclass(frozen=True, kw_only=True)
class SpilledResult:
    """A result held by the output store: an opaque handle and its size."""

    handle: str
    byte_length: int


@dataclass(frozen=True, kw_only=True)
class MediaHandle:
    """Binary content held by the output store, referenced by handle."""

    handle: str
    media_type: str
    byte_length: int
    sha256: str


class ProcessCapability(Protocol):
    async def spawn(
        self, command: str, args: Sequence[str], declared_env: Mapping[str, str], opts: SpawnOptions
    ) -> ProcessResult:
        """Run an already policy-checked command, shell-free. The host resolves
        the executable and builds the minimal base environment, admitting only
        the declared variables its allowlist names."""
        ...


@dataclass(frozen=True, kw_only=True)
class SessionOutput:
    """What a background command printed since the last read (issue 30).
    `result` is set once it has ended (its stdout/stderr there are empty:
    the output is here)."""

    session_id: str
    stdout: str
    stderr: str
    #: Bytes of its output that fell out of the host's buffer before they were read.
    dropped_bytes: int
    running: bool
    result: ProcessResult | None = None


@dataclass(frozen=True, kw_only=True)
class SessionInfo:
    """What the arm that started a session knows of it, without asking the
    host: what approval of a write into it is decided on (issue 31)."""

    session_id: str
    #: The program it runs (argv[0]) and its arguments.
    command: str
    args: tuple[str, ...]
    #: Its input stays open for `write_stdin`.
    stdin_open: bool
    #: Its terminal's size, when it has one.
    tty: TerminalSize | None
    #: The correlation labels it was started with: the engine session and
    #: the tool call that started it.
    engine_session: str
    started_by: str


@dataclass(frozen=True, kw_only=True)
class InputWritten:
    """What a write into a session's input did."""

    session_id: str
    bytes_written: int
    #: Everything written into it so far, and the number of writes.
    total_bytes: int
    writes: int
    closed: bool


class SessionCapability(ProcessCapability, Protocol):
    """A process arm that can leave a command running past its call and read
    it later (hostcapd's detached spawns), and open the environments such
    commands share (a network namespace, IPC and /tmp)."""

    async def start_detached(
        self,
        command: str,
        args: Sequence[str],
        declared_env: Mapping[str, str],
        opts: SpawnOptions,
        *,
        environment_id: str = "",
    ) -> str:
        """Start an already policy-checked command detached: its session id."""
        ...

    async def read_session(self, session_id: str, *, yield_ms: int) -> SessionOutput:
        """What is new since the last read of this session, waiting up to
        `yield_ms` for it to end (returning earlier when it does). Only
        sessions this arm started (HostError NOT_FOUND otherwise)."""
        ...

    async def kill_session(self, session_id: str) -> None:
        """End a session this arm started (its whole tree)."""
        ...

    def session_info(self, session_id: str) -> SessionInfo | None:
        """What this arm knows of a session it started; None for any other.
        Synchronous and without I/O: admission reads it."""
        ...

    async def write_stdin(
        self, session_id: str, data: bytes, *, close: bool = False
    ) -> InputWritten:
        """Write into the input of a session this arm started with its input
        open (in pieces of at most MAX_INPUT_CHUNK bytes, each waiting for
        room), then close it when asked. HostError STDIN_NOT_OPEN,
        SPAWN_ENDED or NOT_FOUND otherwise."""
        ...

    async def resize(self, session_id: str, size: TerminalSize) -> None:
        """Set a tty session's terminal size (HostError NOT_A_TERMINAL otherwise)."""
        ...

    async def open_environment(
        self,
        *,
        idle_timeout_s: float = 0.0,
        lifetime_s: float = 0.0,
        labels: Mapping[str, str] | None = None,
    ) -> str: ...

    async def close_environment(self, environment_id: str) -> list[str]: ...


class FsCapability(Protocol):
    async def read_file(self, path: str, *, max_bytes: int | None = None) -> FileRead: ...

    async def write_file(
        self,
        path: str,
        data: bytes,
        *,
        labels: Mapping[str, str],
        create_parents: bool = True,
        expected_sha256: str | None = None,
    ) -> FileWritten: ...

    async def list_directory(
        self,
        path: str,
        *,
        max_entries: int | None = None,
        depth: int | None = None,
        include_hidden: bool = False,
    ) -> DirListing: ...

    async def stat(self, path: str) -> FileStat: ...


class EgressCapability(Protocol):
    async def fetch(self, request: EgressRequest) -> EgressResponse:
        """An already policy-checked HTTPS request; the host runs its SSRF checks."""
        ...


class OsCapability(Protocol):
    async def read_clipboard(self) -> str: ...

    async def notify(self, title: str, body: str) -> None: ...


class McpCapability(Protocol):
    async def call(self, request: McpCallInput) -> Any: ...


class ToolOutputStore(Protocol):
    """A run-scoped store for over-ceiling results and binary content,
    swept when the run ends."""

    async def spill(
        self, text: str, limits: ToolResultLimits, signal: asyncio.Event | None = None
    ) -> SpilledResult:
        """Keep the full `text` of an over-ceiling result under `limits`
        (`max_spill_bytes`); refuse entry once `signal` is set. Refusals
        raise `hostcap.output_store.OutputStoreError` with its `kind`."""
        ...

    async def store_media(self, data: bytes, media_type: str) -> MediaHandle: ...

    async def media(self, handle: str) -> MediaHandle:
        """The handle of media this store holds (OutputStoreError when it holds none by that name)."""
        ...

    async def open(self, handle: str) -> bytes: ...

    async def sweep(self) -> None: ...


@runtime_checkable
class ToolHost(Protocol):
    """The capability arms an engine's tools run against. Each may be None."""

    @property
    def process(self) -> ProcessCapability | None: ...

    @property
    def fs(self) -> FsCapability | None: ...

    @property
    def egress(self) -> EgressCapability | None: ...

    @property
    def os(self) -> OsCapability | None: ...

    @property
    def mcp(self) -> McpCapability | None: ...

    @property
    def output_store(self) -> ToolOutputStore | None: ...


@dataclass(frozen=True, kw_only=True)
class StaticToolHost:
    """A ToolHost assembled from arms: what an engine builds to combine its own."""

    process: ProcessCapability | None = None
    fs: FsCapability | None = None
    egress: EgressCapability | None = None
    os: OsCapability | None = None
    mcp: McpCapability | None = None
    output_store: ToolOutputStore | None = None
