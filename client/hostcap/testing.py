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

import asyncio
import dataclasses
import hashlib
import mimetypes
import posixpath
import time
import uuid
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from hostcap_proto.floor import (
    DEV_ENV_ALLOWLIST,
    FORBIDDEN_ENV,
    MAX_READ_BYTES,
    MAX_WRITE_BYTES,
    PROTECTED_PATHS,
    SECRET_PATHS,
)
from hostcap_proto.limits import DEV_CEILING, DEV_DEFAULT

from hostcap.approval import path_matches
from hostcap.errors import HostError
from hostcap.host import (
    DirEntry,
    DirListing,
    EgressRequest,
    EgressResponse,
    FileRead,
    FileStat,
    FileType,
    FileWritten,
    McpCallInput,
    Outcome,
    ProcessLimits,
    ProcessResult,
    SpawnOptions,
)
from hostcap.output_store import MemoryOutputStore

#: Labels every spawn and write must carry.
REQUIRED_LABELS = ("session", "node_id", "tool_call_id")
#: The daemon's default floor patterns (its `FsSettings` defaults).
DEFAULT_PROTECTED = PROTECTED_PATHS
DEFAULT_SECRET = SECRET_PATHS


def _require_labels(labels: Mapping[str, str]) -> None:
    missing = [name for name in REQUIRED_LABELS if name not in labels]
    if missing:
        raise HostError("INVALID_ARGUMENT", f"labels missing: {', '.join(missing)}")


# --------------------------------------------------------------------------- fs


@dataclass(frozen=True)
class MemoryRoot:
    path: str
    tier: str = "read-write"  # or "read-only"


@dataclass(frozen=True)
class WriteRecord:
    path: str
    size: int
    sha256: str
    labels: Mapping[str, str]


class MemoryFs:
    """A jailed file tree in memory. The first root is the primary one:
    relative paths resolve against it."""

    def __init__(
        self,
        roots: Sequence[MemoryRoot] = (
            MemoryRoot("/workspace"),
            MemoryRoot("/reference", "read-only"),
        ),
        *,
        protected_paths: Iterable[str] = DEFAULT_PROTECTED,
        secret_paths: Iterable[str] = DEFAULT_SECRET,
        max_read_bytes: int = MAX_READ_BYTES,
        max_write_bytes: int = MAX_WRITE_BYTES,
        max_list_entries: int = 10_000,
    ) -> None:
        if not roots or not all(posixpath.isabs(root.path) for root in roots):
            raise ValueError("MemoryFs needs at least one absolute root")
        self.roots = tuple(MemoryRoot(posixpath.normpath(r.path), r.tier) for r in roots)
        self.protected_paths = tuple(protected_paths)
        self.secret_paths = tuple(secret_paths)
        self.max_read_bytes = max_read_bytes
        self.max_write_bytes = max_write_bytes
        self.max_list_entries = max_list_entries
        self.files: dict[str, bytes] = {}
        self.dirs: set[str] = {root.path for root in self.roots}
        self.symlinks: dict[str, str] = {}
        #: Every write this host performed, with its labels (its audit log).
        self.writes: list[WriteRecord] = []
        #: When False, writes are refused AUDIT_UNAVAILABLE (the audit log cannot be written).
        self.audit_available = True

    # --------------------------------------------------------------- set-up

    def put(self, path: str, data: bytes | str) -> None:
        """Create a file (and its parents) directly, bypassing the floor: test set-up."""
        absolute = self._absolute(path)
        self._mkdirs(posixpath.dirname(absolute))
        self.files[absolute] = data.encode() if isinstance(data, str) else bytes(data)

    def symlink(self, path: str, target: str) -> None:
        """Create a symlink at `path` pointing to `target` (absolute or relative to its directory)."""
        absolute = self._absolute(path)
        self._mkdirs(posixpath.dirname(absolute))
        self.symlinks[absolute] = target

    def content(self, path: str) -> bytes | None:
        return self.files.get(self._absolute(path))

    # ------------------------------------------------------------ resolution

    def _absolute(self, path: str) -> str:
        return posixpath.normpath(posixpath.join(self.roots[0].path, path))

    def _root_of(self, absolute: str) -> MemoryRoot | None:
        for root in self.roots:
            if absolute == root.path or absolute.startswith(root.path.rstrip("/") + "/"):
                return root
        return None

    def resolve(self, path: str) -> tuple[str, MemoryRoot]:
        """The absolute path `path` names, following symlinks that stay inside the roots."""
        if not path or "\x00" in path:
            raise HostError("INVALID_ARGUMENT", "empty path or NUL byte")
        absolute = self._absolute(path)
        if self._root_of(absolute) is None:
            raise HostError("PATH_ESCAPES_ROOT", "the path is outside every root")
        for _ in range(40):
            link = self._first_link(absolute)
            if link is None:
                break
            link_path, rest = link
            target = posixpath.normpath(
                posixpath.join(posixpath.dirname(link_path), self.symlinks[link_path], rest)
            )
            if self._root_of(target) is None:
                raise HostError("SYMLINK_REFUSED", "a symlink on the path leaves the roots")
            absolute = target
        else:
            raise HostError("SYMLINK_REFUSED", "too many symlinks")
        root = self._root_of(absolute)
        assert root is not None
        return absolute, root

    def _first_link(self, absolute: str) -> tuple[str, str] | None:
        parts = absolute.strip("/").split("/")
        for i in range(1, len(parts) + 1):
            prefix = "/" + "/".join(parts[:i])
            if prefix in self.symlinks:
                return prefix, "/".join(parts[i:])
        return None

    def _relative(self, absolute: str, root: MemoryRoot) -> str:
        return posixpath.relpath(absolute, root.path)

    def _check_secret(self, absolute: str, root: MemoryRoot) -> None:
        if path_matches(self._relative(absolute, root), self.secret_paths):
            raise HostError("SECRET_PATH", "secret path")

    def _mkdirs(self, directory: str) -> None:
        while directory not in self.dirs and directory != "/":
            self.dirs.add(directory)
            directory = posixpath.dirname(directory)

    # ---------------------------------------------------------- the arm

    async def read_file(self, path: str, *, max_bytes: int | None = None) -> FileRead:
        absolute, root = self.resolve(path)
        self._check_secret(absolute, root)
        if max_bytes is not None and (max_bytes <= 0 or max_bytes > self.max_read_bytes):
            raise HostError("LIMIT_INVALID", "max_bytes above the read ceiling")
        if absolute in self.dirs:
            raise HostError("INVALID_ARGUMENT", "is a directory")
        data = self.files.get(absolute)
        if data is None:
            raise HostError("NOT_FOUND", "no such file")
        limit = max_bytes or self.max_read_bytes
        kept = data[:limit]
        binary = _is_binary(kept)
        media_type = mimetypes.guess_type(absolute)[0] or (
            "application/octet-stream" if binary else "text/plain"
        )
        return FileRead(
            path=absolute, data=kept, size=len(data), truncated=len(kept) < len(data), is_binary=binary,
            media_type=media_type, sha256=hashlib.sha256(kept).hexdigest(),
        )  # fmt: skip

    async def write_file(
        self,
        path: str,
        data: bytes,
        *,
        labels: Mapping[str, str],
        create_parents: bool = True,
        expected_sha256: str | None = None,
    ) -> FileWritten:
        _require_labels(labels)
        absolute, root = self.resolve(path)
        self._check_secret(absolute, root)
        if root.tier != "read-write":
            raise HostError("READ_ONLY_TIER", "read-only root")
        if path_matches(self._relative(absolute, root), self.protected_paths):
            raise HostError("PROTECTED_PATH", "protected path")
        if len(data) > self.max_write_bytes:
            raise HostError("TOO_LARGE", "content above the write ceiling")
        if absolute in self.dirs:
            raise HostError("INVALID_ARGUMENT", "is a directory")
        parent = posixpath.dirname(absolute)
        if parent not in self.dirs and not create_parents:
            raise HostError("NOT_FOUND", "parent directory missing")
        previous = self.files.get(absolute)
        previous_sha = hashlib.sha256(previous).hexdigest() if previous is not None else None
        if expected_sha256 is not None and expected_sha256 != (previous_sha or ""):
            raise HostError("CONFLICT", "expected sha256 did not match")
        if not self.audit_available:
            raise HostError("AUDIT_UNAVAILABLE", "audit log unavailable")
        self._mkdirs(parent)
        self.files[absolute] = bytes(data)
        sha = hashlib.sha256(data).hexdigest()
        self.writes.append(WriteRecord(absolute, len(data), sha, dict(labels)))
        return FileWritten(
            path=absolute,
            size=len(data),
            sha256=sha,
            created=previous is None,
            previous_sha256=previous_sha,
        )

    async def list_directory(
        self,
        path: str,
        *,
        max_entries: int | None = None,
        depth: int | None = None,
        include_hidden: bool = False,
    ) -> DirListing:
        absolute, _ = self.resolve(path)
        if absolute not in self.dirs:
            raise HostError("NOT_FOUND", "no such directory")
        limit = min(max_entries or self.max_list_entries, self.max_list_entries)
        levels = depth or 1
        names: list[DirEntry] = []
        prefix = absolute.rstrip("/") + "/"
        candidates = sorted({*self.files, *self.dirs, *self.symlinks})
        for candidate in candidates:
            if not candidate.startswith(prefix):
                continue
            relative = candidate[len(prefix) :]
            parts = relative.split("/")
            if len(parts) > levels or (
                not include_hidden and any(p.startswith(".") for p in parts)
            ):
                continue
            if path_matches(relative, self.secret_paths):
                continue
            if candidate in self.symlinks:
                kind, size = FileType.SYMLINK, 0
            elif candidate in self.dirs:
                kind, size = FileType.DIRECTORY, 0
            else:
                kind, size = FileType.REGULAR, len(self.files[candidate])
            names.append(DirEntry(name=relative, type=kind, size=size))
        return DirListing(path=absolute, entries=tuple(names[:limit]), truncated=len(names) > limit)

    async def stat(self, path: str) -> FileStat:
        absolute, root = self.resolve(path)
        self._check_secret(absolute, root)
        writable = root.tier == "read-write" and not path_matches(
            self._relative(absolute, root), self.protected_paths
        )
        if absolute in self.dirs:
            return FileStat(
                path=absolute,
                type=FileType.DIRECTORY,
                size=0,
                mode=0o755,
                mtime=0.0,
                writable=writable,
            )
        if absolute in self.files:
            size = len(self.files[absolute])
            return FileStat(
                path=absolute,
                type=FileType.REGULAR,
                size=size,
                mode=0o644,
                mtime=0.0,
                writable=writable,
            )
        raise HostError("NOT_FOUND", "no such file")


def _is_binary(data: bytes) -> bool:
    if b"\x00" in data[:8192]:
        return True
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as error:
        # A multi-byte character cut at the end of a truncated read is still text.
        return error.start < len(data) - 3
    return False


# ---------------------------------------------------------------------- process


@dataclass
class ProgramIO:
    """What a running program sees: its argv, cwd, environment and stdin, and
    where it writes. `fs` is the host's file tree, when it has one."""

    argv: tuple[str, ...]
    cwd: str
    env: Mapping[str, str]
    stdin: bytes
    fs: MemoryFs | None
    stdout: bytearray = field(default_factory=bytearray)
    stderr: bytearray = field(default_factory=bytearray)

    def out(self, text: str | bytes) -> None:
        self.stdout += text.encode() if isinstance(text, str) else text

    def err(self, text: str | bytes) -> None:
        self.stderr += text.encode() if isinstance(text, str) else text


Program = Callable[[ProgramIO], Awaitable[int]]


@dataclass(frozen=True)
class SpawnRecord:
    """One spawn, as this host's audit log has it."""

    spawn_id: str
    argv: tuple[str, ...]
    cwd: str
    env_names: tuple[str, ...]
    labels: Mapping[str, str]
    request_id: str | None
    outcome: Outcome | None = None
    deadline: float | None = None


async def _echo(io: ProgramIO) -> int:
    io.out(" ".join(io.argv[1:]) + "\n")
    return 0


async def _cat(io: ProgramIO) -> int:
    if len(io.argv) == 1:
        io.out(io.stdin)
        return 0
    status = 0
    for name in io.argv[1:]:
        try:
            if io.fs is None:
                raise HostError("NOT_FOUND")
            read = await io.fs.read_file(posixpath.join(io.cwd, name))
            io.out(read.data)
        except HostError:
            io.err(f"cat: {name}: cannot open\n")
            status = 1
    return status


async def _sleep(io: ProgramIO) -> int:
    await asyncio.sleep(float(io.argv[1]) if len(io.argv) > 1 else 1.0)
    return 0


async def _true(io: ProgramIO) -> int:
    return 0


async def _false(io: ProgramIO) -> int:
    return 1


async def _seq(io: ProgramIO) -> int:
    io.out("".join(f"{i}\n" for i in range(1, int(io.argv[1]) + 1)))
    return 0


#: Programs every MemoryProcess knows unless told otherwise.
STOCK_PROGRAMS: Mapping[str, Program] = {
    "echo": _echo, "cat": _cat, "sleep": _sleep, "true": _true, "false": _false, "seq": _seq,
}  # fmt: skip

#: The ``--dev`` tenant's ceilings (`hostcap_proto.limits.DEV_CEILING`).
DEFAULT_CEILINGS = ProcessLimits(**dataclasses.asdict(DEV_CEILING))


class MemoryProcess:
    """Runs programs by name, with hostcapd's spawn rules in miniature."""

    def __init__(
        self,
        programs: Mapping[str, Program] = STOCK_PROGRAMS,
        *,
        fs: MemoryFs | None = None,
        env_allowlist: Iterable[str] = DEV_ENV_ALLOWLIST,
        ceilings: ProcessLimits = DEFAULT_CEILINGS,
        default_output_bytes: int = DEV_DEFAULT.output_bytes or 0,
        max_concurrent_spawns: int = 8,
    ) -> None:
        self.programs = dict(programs)
        self.fs = fs
        self.env_allowlist = frozenset(env_allowlist)
        self.ceilings = ceilings
        self.default_output_bytes = default_output_bytes
        self.max_concurrent_spawns = max_concurrent_spawns
        #: Every spawn this host started, with its labels and outcome (its audit log).
        self.spawns: list[SpawnRecord] = []
        #: Spawns running now, by id.
        self.live: dict[str, SpawnRecord] = {}
        #: When False, spawns are refused AUDIT_UNAVAILABLE.
        self.audit_available = True
        #: When False, spawns are refused PROTECTION_UNAVAILABLE.
        self.protections_available = True

    def _check_limits(self, limits: ProcessLimits) -> None:
        for name in vars(limits):
            value = getattr(limits, name)
            ceiling = getattr(self.ceilings, name)
            if value is not None and (value <= 0 or (ceiling is not None and value > ceiling)):
                raise HostError("LIMIT_INVALID", f"{name} is invalid or above the ceiling")

    async def spawn(
        self, command: str, args: Sequence[str], declared_env: Mapping[str, str], opts: SpawnOptions
    ) -> ProcessResult:
        _require_labels(opts.labels)
        argv = (command, *args)
        if not command or any("\x00" in part for part in argv):
            raise HostError("INVALID_ARGUMENT", "empty command or NUL byte")
        if command.startswith("/"):
            raise HostError("EXECUTABLE_NOT_ALLOWED", "absolute executables are not allowed here")
        program = self.programs.get(command)
        if program is None:
            raise HostError("EXECUTABLE_NOT_FOUND", "not on PATH")
        for name in declared_env:
            if FORBIDDEN_ENV.match(name) or name not in self.env_allowlist:
                raise HostError("ENV_NOT_ALLOWED", "a declared variable is not allowed")
        self._check_limits(opts.limits)
        if opts.deadline is not None and opts.deadline <= time.time():
            raise HostError("DEADLINE_EXCEEDED", "the deadline passed before the call")
        cwd = self.fs.resolve(opts.cwd or ".")[0] if self.fs is not None else (opts.cwd or "/")
        if not self.protections_available:
            raise HostError("PROTECTION_UNAVAILABLE", "a required protection is unavailable")
        if len(self.live) >= self.max_concurrent_spawns:
            raise HostError("QUOTA_EXCEEDED", "too many live spawns")
        if not self.audit_available:
            raise HostError("AUDIT_UNAVAILABLE", "audit log unavailable")

        record = SpawnRecord(
            spawn_id=uuid.uuid4().hex[:16], argv=argv, cwd=cwd, env_names=tuple(sorted(declared_env)),
            labels=dict(opts.labels), request_id=opts.request_id, deadline=opts.deadline,
        )  # fmt: skip
        self.live[record.spawn_id] = record
        io = ProgramIO(
            argv=argv, cwd=cwd, env=dict(declared_env), stdin=opts.stdin or b"", fs=self.fs
        )
        started = time.monotonic()
        outcome = Outcome.EXITED
        exit_code: int | None = None
        message = ""
        wall = opts.limits.wall_seconds
        remaining = opts.deadline - time.time() if opts.deadline is not None else None
        by_deadline = remaining is not None and (wall is None or remaining < wall)
        try:
            exit_code = await asyncio.wait_for(
                program(io), timeout=remaining if by_deadline else wall
            )
        except TimeoutError:
            if by_deadline:
                outcome = Outcome.CANCELLED
                raise HostError("DEADLINE_EXCEEDED", "the call passed its deadline") from None
            outcome, message = (
                Outcome.TIMEOUT,
                f"wall-clock limit of {opts.limits.wall_seconds:g} s exceeded",
            )
        except asyncio.CancelledError:
            outcome = Outcome.CANCELLED
            raise
        except Exception as error:
            outcome, message = Outcome.SPAWN_FAILED, f"program failed: {type(error).__name__}"
        finally:
            del self.live[record.spawn_id]
            self.spawns.append(
                SpawnRecord(
                    spawn_id=record.spawn_id, argv=argv, cwd=cwd, env_names=record.env_names,
                    labels=record.labels, request_id=opts.request_id, outcome=outcome,
                    deadline=opts.deadline,
                )
            )  # fmt: skip
        keep = opts.limits.output_bytes or self.default_output_bytes
        stdout, out_dropped = _head_tail(bytes(io.stdout), keep)
        stderr, err_dropped = _head_tail(bytes(io.stderr), keep)
        return ProcessResult(
            spawn_id=record.spawn_id, outcome=outcome, exit_code=exit_code, stdout=stdout, stderr=stderr,
            stdout_dropped_bytes=out_dropped, stderr_dropped_bytes=err_dropped,
            duration_seconds=time.monotonic() - started, message=message, executable=command,
        )  # fmt: skip


def _head_tail(data: bytes, keep: int) -> tuple[str, int]:
    if len(data) <= keep:
        return data.decode(errors="replace"), 0
    head, tail = data[: keep // 2], data[len(data) - (keep - keep // 2) :]
    dropped = len(data) - keep
    return (
        f"{head.decode(errors='replace')}\n[... {dropped} bytes dropped ...]\n{tail.decode(errors='replace')}",
        dropped,
    )


# -------------------------------------------------------------- egress, os, mcp


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
