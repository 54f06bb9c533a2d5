"""The in-memory process arm: async Python programs resolved by name, with the daemon's limits."""

from __future__ import annotations

import asyncio
import codecs
import dataclasses
import posixpath
import time
import uuid
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from hostcap_proto.floor import (
    DEV_ENV_ALLOWLIST,
    FORBIDDEN_ENV,
)
from hostcap_proto.limits import DEV_CEILING, DEV_DEFAULT

from hostcap.errors import HostError
from hostcap.host import (
    Outcome,
    ProcessLimits,
    ProcessResult,
    SpawnOptions,
)
from hostcap.testing.memory_fs import MemoryFs, require_labels

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
    #: Set while the caller streams: each write goes here as it is made.
    live: asyncio.Queue[tuple[str, bytes]] | None = None

    def out(self, text: str | bytes) -> None:
        data = text.encode() if isinstance(text, str) else text
        self.stdout += data
        if self.live is not None:
            self.live.put_nowait(("stdout", data))

    def err(self, text: str | bytes) -> None:
        data = text.encode() if isinstance(text, str) else text
        self.stderr += data
        if self.live is not None:
            self.live.put_nowait(("stderr", data))


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
        require_labels(opts.labels)
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
        forwarding: asyncio.Task[None] | None = None
        if opts.on_output is not None:
            io.live = asyncio.Queue()
            forwarding = asyncio.create_task(_forward(io.live, opts.on_output))
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
            if forwarding is not None:
                assert io.live is not None
                io.live.put_nowait(("", b""))  # the end: what was written is forwarded first
                if outcome is Outcome.CANCELLED:
                    forwarding.cancel()
                else:
                    await forwarding
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


async def _forward(
    live: asyncio.Queue[tuple[str, bytes]], on_output: Callable[[str, str], Awaitable[None]]
) -> None:
    decoders = {
        name: codecs.getincrementaldecoder("utf-8")(errors="replace")
        for name in ("stdout", "stderr")
    }
    while True:
        stream, data = await live.get()
        if not stream:
            return
        text = decoders[stream].decode(data)
        if text:
            await on_output(stream, text)


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
