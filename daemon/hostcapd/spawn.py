"""One spawn, from a validated request to its final report.

A `Spawn` owns everything of one run — its process tree, cgroup, pipes,
cancel eventfd, timers — and releases all of it on every way out
(completion, cancel, timeout, limit, shutdown), the way a value is dropped.
It runs as its own task owned by the tenant runtime, so a client that goes
away cancels the tree but never skips the cleanup or the exit audit record.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import errno
import fcntl
import logging
import os
import signal
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from hostcapd import environment, executable
from hostcapd import limits as limits_mod
from hostcapd.audit import AuditUnavailable
from hostcapd.config import Limits, Tenant
from hostcapd.errors import Refusal
from hostcapd.fs.syscalls import RESOLVE_BENEATH, RESOLVE_NO_MAGICLINKS, openat2
from hostcapd.output import StreamBuffer
from hostcapd.sandbox import identity, rlimits
from hostcapd.sandbox.cgroups import CgroupError, CgroupStats, SpawnCgroup
from hostcapd.sandbox.profile import ProtectionStatus
from hostcapd.spawner.client import ExitStatus, SetupFailed, SpawnerLost

if TYPE_CHECKING:
    from hostcapd.tenant import TenantRuntime

log = logging.getLogger("hostcapd.spawn")

MAX_ARGV_BYTES = 1024 * 1024
MAX_ARG_BYTES = 128 * 1024
#: Largest read of an output pipe: a whole pipe, and the largest Output event.
READ_CHUNK = 1024 * 1024
PIPE_SIZE = 1024 * 1024
#: Streamed-but-unsent bytes above which we stop reading the pipe (back-pressure
#: on a slow client for the kept head; what is dropped is always drained).
#: At 0 a pipe is read again only once what it gave has been sent: the pipe
#: is the buffer, and each read takes all that piled up during the send, so
#: a fast writer is streamed in few large events (measured: bench/README.md,
#: "Stream tuning"), and a slow one without delay.
HIGH_WATER = 0
EOF_GRACE = 2.0


class Outcome(enum.Enum):
    EXITED = "EXITED"
    SIGNALED = "SIGNALED"
    TIMEOUT = "TIMEOUT"
    CPU_LIMIT = "CPU_LIMIT"
    MEMORY_LIMIT = "MEMORY_LIMIT"
    OUTPUT_LIMIT = "OUTPUT_LIMIT"
    PIDS_LIMIT = "PIDS_LIMIT"
    CANCELLED = "CANCELLED"
    DAEMON_SHUTDOWN = "DAEMON_SHUTDOWN"
    SPAWN_FAILED = "SPAWN_FAILED"


@dataclass(frozen=True)
class SpawnRequest:
    """A spawn request as plain values (the front-end converts the wire message)."""

    argv: tuple[str, ...]
    cwd: str = ""
    env: Mapping[str, str] = field(default_factory=dict)
    stdin: bytes | None = None
    limits: Mapping[str, float | int] = field(default_factory=dict)
    request_id: str = ""
    dry_run: bool = False
    labels: Mapping[str, str] = field(default_factory=dict)


@dataclass
class Prepared:
    """Everything decided before anything runs."""

    exe: executable.ResolvedExecutable
    argv: tuple[str, ...]
    cwd: Cwd
    env: dict[str, str]
    limits: Limits
    #: The protections as applied to this spawn (the profile's, adjusted).
    protections: tuple[ProtectionStatus, ...]

    def close(self) -> None:
        self.exe.close()

    @property
    def by_fd(self) -> bool:
        return any(s.name == "exec_by_fd" and s.applied for s in self.protections)


@dataclass
class Report:
    """The final report (mirrors hostcap.v1.Exited)."""

    outcome: Outcome
    exit_code: int = 0
    signal: int = 0
    message: str = ""
    failed_step: str = ""
    errno: int = 0
    rusage: tuple[float, float, int, int, int, int, int] = (0.0, 0.0, 0, 0, 0, 0, 0)
    peak_memory_bytes: int | None = None
    oom_kills: int = 0
    duration: float = 0.0


def signal_name(sig: int) -> str:
    try:
        return signal.Signals(sig).name
    except ValueError:
        return f"SIG{sig}"


@dataclass(frozen=True)
class Cwd:
    """A validated cwd: the root it lies beneath and the path relative to it.
    The child opens it again beneath the root in its own mount namespace."""

    path: str
    root: str
    relative: str


def resolve_cwd(cwd: str, tenant: Tenant) -> Cwd:
    """Check the cwd resolves beneath a root, with openat2(RESOLVE_BENEATH):
    no `..`, symlink or magic link may leave it."""
    if "\0" in cwd:
        raise Refusal("INVALID_ARGUMENT", "cwd contains a NUL byte")
    if os.path.isabs(cwd):
        lexical = os.path.normpath(cwd)
        for root in tenant.roots:
            r = str(root.path)
            if lexical == r or lexical.startswith(r + "/"):
                base, rel = r, os.path.relpath(lexical, r)
                break
        else:
            raise Refusal("PATH_ESCAPES_ROOT", f"cwd {cwd!r} is outside the tenant's roots")
    else:
        base, rel = str(tenant.primary_root.path), cwd or "."
    try:
        root_fd = os.open(base, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        raise Refusal("NOT_FOUND", "the tenant root does not exist") from None
    try:
        fd = openat2(
            root_fd, rel, os.O_PATH | os.O_DIRECTORY, RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS
        )
    except OSError as error:
        if error.errno in (errno.EXDEV, errno.ELOOP):
            raise Refusal(
                "PATH_ESCAPES_ROOT", f"cwd {cwd!r} resolves outside the tenant's roots"
            ) from None
        raise Refusal(
            "NOT_FOUND", f"cwd {cwd!r} is not a directory in the tenant's roots"
        ) from None
    finally:
        os.close(root_fd)
    try:
        resolved = os.readlink(f"/proc/self/fd/{fd}")
    finally:
        os.close(fd)
    return Cwd(resolved, base, rel)


def validate_argv(argv: tuple[str, ...]) -> None:
    if not argv:
        raise Refusal("INVALID_ARGUMENT", "argv must not be empty")
    total = 0
    for arg in argv:
        if "\0" in arg:
            raise Refusal("INVALID_ARGUMENT", "argv contains a NUL byte")
        size = len(arg.encode())
        if size > MAX_ARG_BYTES:
            raise Refusal("TOO_LARGE", f"an argument is longer than {MAX_ARG_BYTES} bytes")
        total += size + 1 + 8
        if total > MAX_ARGV_BYTES:
            raise Refusal("TOO_LARGE", f"argv is larger than {MAX_ARGV_BYTES} bytes")


MAX_LABELS = 32
MAX_LABEL_KEY = 128
MAX_LABEL_VALUE = 1024
MAX_REQUEST_ID = 256
PATH_MAX = 4096


def validate_correlation(labels: Mapping[str, str], request_id: str) -> None:
    """Labels and request_id go whole into fsynced audit records: bound them."""
    if len(request_id) > MAX_REQUEST_ID:
        raise Refusal("INVALID_ARGUMENT", f"request_id is longer than {MAX_REQUEST_ID} characters")
    if len(labels) > MAX_LABELS:
        raise Refusal("INVALID_ARGUMENT", f"more than {MAX_LABELS} labels")
    for key, value in labels.items():
        if not key or len(key) > MAX_LABEL_KEY or len(value) > MAX_LABEL_VALUE:
            raise Refusal(
                "INVALID_ARGUMENT",
                f"a label key must be 1-{MAX_LABEL_KEY} and a value at most "
                f"{MAX_LABEL_VALUE} characters",
            )


def prepare(request: SpawnRequest, runtime: TenantRuntime) -> Prepared:
    """Step 1 of the spawn sequence: validate and resolve everything."""
    tenant = runtime.tenant
    validate_correlation(request.labels, request.request_id)
    validate_argv(request.argv)
    if len(request.cwd.encode()) > PATH_MAX:
        raise Refusal("INVALID_ARGUMENT", f"cwd is longer than {PATH_MAX} bytes")
    applied = limits_mod.apply(dict(request.limits), tenant.limits)
    env = environment.build(tenant, request.env)
    cwd = resolve_cwd(request.cwd, tenant)
    exe = executable.resolve(
        request.argv[0], tenant.path, tenant.allowed_executable_dirs, runtime.hash_cache
    )
    protections = runtime.profile.protections
    if exe.is_script:
        # The kernel cannot hand a close-on-exec fd to a script's interpreter.
        protections = tuple(
            ProtectionStatus(
                s.name, False, "a #! script is exec'd by its resolved path", s.required
            )
            if s.name == "exec_by_fd" and s.applied
            else s
            for s in protections
        )
    return Prepared(
        exe=exe,
        argv=request.argv,
        cwd=cwd,
        env=env,
        limits=applied,
        protections=protections,
    )


class Spawn:
    def __init__(
        self, runtime: TenantRuntime, request: SpawnRequest, prepared: Prepared, streaming: bool
    ) -> None:
        self.runtime = runtime
        self.request = request
        self.prepared = prepared
        self.id = uuid.uuid4().hex
        self.streaming = streaming
        self.pid = 0
        self.started_at = time.monotonic()
        # A streaming caller gets the head as it comes: it is not kept here.
        keep = prepared.limits.output_bytes or 0
        self.stdout = StreamBuffer(keep, retain_head=not streaming)
        self.stderr = StreamBuffer(keep, retain_head=not streaming)
        #: Streamed events for the owning caller: ("started"|"output"|"exited", payload).
        self.events: asyncio.Queue[tuple[str, Any]] = asyncio.Queue()
        self.pending_bytes = 0
        self.report: Report | None = None
        self.done = asyncio.get_running_loop().create_future()
        self.started = asyncio.get_running_loop().create_future()
        self._kill_reason: Outcome | None = None
        self._kill_message = ""
        self._kill_task: asyncio.Task[None] | None = None
        self._cancel_fd = -1
        self._exit: asyncio.Future[ExitStatus] | None = None
        self._readers: dict[int, tuple[StreamBuffer, int]] = {}
        self._eof = asyncio.Event()
        self._paused: set[int] = set()
        self._cgroup: SpawnCgroup | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._exec_time = 0.0
        self._exec_audited = False
        self._go_fd = -1
        self._audit_failure: AuditUnavailable | None = None

    # --- control from outside -------------------------------------------

    def cancel(self, reason: Outcome = Outcome.CANCELLED, message: str = "") -> None:
        """Kill the tree (once) for `reason`; safe to call at any time."""
        self._terminate(
            reason, message or ("cancelled by the client" if reason is Outcome.CANCELLED else "")
        )

    def signal(self, sig: int) -> None:
        if self.pid:
            self.runtime.spawner.kill(self.id, self.pid, sig)

    def consumed(self, nbytes: int) -> None:
        """The caller sent `nbytes` of streamed output: lift back-pressure."""
        self.pending_bytes -= nbytes
        if self._paused and self.pending_bytes <= HIGH_WATER // 2:
            loop = asyncio.get_running_loop()
            for fd in list(self._paused):
                self._paused.discard(fd)
                loop.add_reader(fd, self._on_readable, fd)

    # --- the run ----------------------------------------------------------

    async def run(self) -> Report | None:
        """The spawn sequence; None when refused before anything ran."""
        fds_to_close: list[int] = []
        read_ends: list[int] = []
        loop = asyncio.get_running_loop()
        profile = self.runtime.profile
        tenant = self.runtime.tenant
        p = self.prepared
        try:
            # Step 2: the write-ahead exec record, appended first and fsynced
            # while the cgroup, the pipes and the child's set-up are made (the
            # fsync is the longest of them); the child waits right before exec
            # for the go given once the record is durable. No record, no exec.
            try:
                _, synced = self.runtime.audit.write_pending("process.exec", **self._exec_record())
            except AuditUnavailable as error:
                raise _Refused(_audit_refusal(error)) from None
            synced.add_done_callback(_retrieve)
            self._exec_audited = True
            if self._kill_reason is not None:
                raise _Cancelled()
            if profile.has("cgroup"):
                try:
                    self._cgroup = self.runtime.cgroups.create(
                        self.id, p.limits.memory_bytes, p.limits.pids
                    )
                except CgroupError as error:
                    # Recorded as tried: it ends SPAWN_FAILED at step "cgroup",
                    # and its exit record closes the exec record.
                    raise SetupFailed("cgroup", 0, str(error)) from None
            # Pipes: the child's ends go to the spawner and are closed here at once.
            out_r, out_w = os.pipe2(os.O_CLOEXEC | os.O_NONBLOCK)
            err_r, err_w = os.pipe2(os.O_CLOEXEC | os.O_NONBLOCK)
            with contextlib.suppress(OSError):
                # Fewer, larger reads for a fast writer (the child's cgroup pays).
                fcntl.fcntl(out_r, fcntl.F_SETPIPE_SZ, PIPE_SIZE)
            read_ends += [out_r, err_r]
            os.set_blocking(out_w, True)
            os.set_blocking(err_w, True)
            fds_to_close += [out_w, err_w]
            stdin_w = -1
            if self.request.stdin is not None:
                in_r, stdin_w = os.pipe2(os.O_CLOEXEC)
                fds_to_close.append(in_r)
                os.set_blocking(stdin_w, False)
            else:
                in_r = os.open("/dev/null", os.O_RDONLY | os.O_CLOEXEC)
                fds_to_close.append(in_r)
            self._cancel_fd = os.eventfd(0, os.EFD_CLOEXEC | os.EFD_NONBLOCK)
            cgroup_fds = self._cgroup.procs_fds() if self._cgroup else []
            fds_to_close += cgroup_fds
            if self._cgroup:  # the tenant's cpu share (hostcapd.sandbox.cpu)
                cpu_fds = profile.cpu_procs_fds()
                cgroup_fds += cpu_fds
                fds_to_close += cpu_fds
            ruleset_fd = profile.new_ruleset()
            if ruleset_fd >= 0:
                fds_to_close.append(ruleset_fd)

            self._go_fd = os.eventfd(0, os.EFD_CLOEXEC | os.EFD_NONBLOCK)

            ident = identity.plan(tenant.uid, tenant.gid, set(profile.applied))
            order = {
                "op": "spawn",
                "id": self.id,
                "profile": self.runtime.profile_key,
                "by_fd": p.by_fd,
                "exe_path": p.exe.path.encode(),
                "argv": [a.encode() for a in p.argv],
                "envp": environment.encode(p.env),
                "cwd_root": p.cwd.root.encode(),
                "cwd": p.cwd.relative.encode(),
                "rlimits": rlimits.plan(p.limits, profile.has("cgroup"), profile.has("cgroup"))
                if profile.has("rlimits")
                else [],
                "ids": ident.ids,
                "loginuid": ident.loginuid,
                "landlock": ruleset_fd >= 0,
                "go": True,
            }
            # Step 3: the spawner clones; the C set-up runs and execs.
            fds = [
                p.exe.fd,
                in_r,
                out_w,
                err_w,
                self._cancel_fd,
                self._go_fd,
                *([ruleset_fd] if ruleset_fd >= 0 else []),
                *cgroup_fds,
            ]
            for attempt in (1, 2):
                await self.runtime.spawner.ready()
                try:
                    started, exited = self.runtime.spawner.spawn(order, fds)
                    break
                except SpawnerLost:
                    # Found dead on sending: nothing was sent, so nothing ran.
                    if attempt == 2:
                        raise
            self._exit = exited
            for fd in fds_to_close:
                os.close(fd)
            fds_to_close.clear()
            try:
                await synced
            except AuditUnavailable as error:
                # Not durable: the child must not run. Cancel it and refuse.
                self._exec_audited = False
                self._audit_failure = error
                with contextlib.suppress(OSError):
                    os.eventfd_write(self._cancel_fd, 1)
            else:
                os.eventfd_write(self._go_fd, 1)
            self.pid = await started
            self._exec_time = time.monotonic()
            self.started.set_result(self.pid)
            self.events.put_nowait(("started", self.pid))

            # Step 4: stream output, feed stdin, run the wall clock.
            for fd, buf in ((out_r, self.stdout), (err_r, self.stderr)):
                self._readers[fd] = (buf, 1 if buf is self.stdout else 2)
                loop.add_reader(fd, self._on_readable, fd)
            read_ends.clear()
            stdin_task = None
            if stdin_w >= 0:
                stdin_task = asyncio.ensure_future(
                    self._feed_stdin(stdin_w, self.request.stdin or b"")
                )
            if p.limits.wall_seconds is not None:
                self._timer = loop.call_later(
                    p.limits.wall_seconds,
                    self._terminate,
                    Outcome.TIMEOUT,
                    f"wall-clock limit of {p.limits.wall_seconds:g} s exceeded",
                )
            if self._kill_reason is not None:  # cancelled while the exec was in flight
                self._terminate(self._kill_reason, self._kill_message, force=True)

            # Step 5: done only when the child is reaped and both pipes are at EOF.
            try:
                status = await self._exit
            except SpawnerLost:
                status = None
            # Whatever the main process left behind dies with it. In a pid
            # namespace the kernel has done that already: init was reaped.
            if not profile.has("pid_namespace"):
                self._kill_tree(signal.SIGKILL)
            if not self._eof.is_set():  # (wait_for costs a task and a timer)
                with contextlib.suppress(TimeoutError):
                    # After the grace an escaped holder of the pipe is ignored.
                    await asyncio.wait_for(self._eof.wait(), EOF_GRACE)
            if stdin_task:
                stdin_task.cancel()
            return self._finish(status)
        except _Refused as refused:
            self._refuse(refused.refusal)
            return None
        except _Cancelled:
            return self._finish_unstarted(Outcome.CANCELLED, "", 0, self._kill_message)
        except SetupFailed as error:
            if self._audit_failure is not None:
                self._refuse(_audit_refusal(self._audit_failure))
                return None
            if self._kill_reason is not None:  # cancel wins over a simultaneous error
                return self._finish_unstarted(self._kill_reason, "", 0, self._kill_message)
            return self._finish_unstarted(
                Outcome.SPAWN_FAILED,
                error.step,
                error.errno,
                f"set-up step {error.step} failed: {os.strerror(error.errno) if error.errno else error.detail}",
            )
        except SpawnerLost:
            return self._finish_unstarted(
                Outcome.SPAWN_FAILED, "spawner", 0, "the spawner died during set-up"
            )
        except Exception as error:
            # A daemon bug must still end the call and leave nothing behind.
            log.exception("spawn %s failed inside the daemon", self.id)
            if not self._exec_audited:
                refusal = Refusal(
                    "INVALID_ARGUMENT",
                    f"the daemon could not start the spawn: {type(error).__name__}",
                )
                self._refuse(refusal)
                return None
            self._kill_tree(signal.SIGKILL)
            return self._finish_unstarted(
                Outcome.SPAWN_FAILED, "daemon", 0, f"internal error: {type(error).__name__}"
            )
        finally:
            for fd in fds_to_close + read_ends:
                with contextlib.suppress(OSError):
                    os.close(fd)
            self._close_readers()
            if self._cancel_fd >= 0:
                os.close(self._cancel_fd)
                self._cancel_fd = -1
            if self._go_fd >= 0:
                os.close(self._go_fd)
                self._go_fd = -1
            if self._timer:
                self._timer.cancel()
            if self._kill_task and not self._kill_task.done():
                self._kill_task.cancel()
            self.prepared.close()
            if self._cgroup is not None:
                try:
                    self._cgroup.remove()
                except CgroupError:
                    self._cgroup.kill()  # something outlived the tree kill
                    self._cgroup.remove()
            if not self.started.done():
                self.started.set_result(0)

    # --- output -----------------------------------------------------------

    def _on_readable(self, fd: int) -> None:
        buf, stream = self._readers[fd]
        try:
            data = os.read(fd, READ_CHUNK)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:
            asyncio.get_running_loop().remove_reader(fd)
            self._paused.discard(fd)
            os.close(fd)
            del self._readers[fd]
            if not self._readers:
                self._eof.set()
            return
        head = buf.feed(data)
        if head and self.streaming:
            self.pending_bytes += len(head)
            self.events.put_nowait(("output", (stream, head)))
            if self.pending_bytes > HIGH_WATER:
                asyncio.get_running_loop().remove_reader(fd)
                self._paused.add(fd)
        total = self.stdout.total + self.stderr.total
        ceiling = self.prepared.limits.total_output_bytes
        if ceiling is not None and total > ceiling and self._kill_reason is None:
            self._terminate(
                Outcome.OUTPUT_LIMIT, f"total output passed the limit of {ceiling} bytes"
            )

    def _close_readers(self) -> None:
        loop = asyncio.get_running_loop()
        for fd in list(self._readers):
            loop.remove_reader(fd)
            with contextlib.suppress(OSError):
                os.close(fd)
        self._readers.clear()
        self._paused.clear()

    async def _feed_stdin(self, fd: int, data: bytes) -> None:
        loop = asyncio.get_running_loop()
        view = memoryview(data)
        try:
            while view:
                try:
                    n = os.write(fd, view[:READ_CHUNK])
                    view = view[n:]
                except BlockingIOError:
                    writable = loop.create_future()
                    loop.add_writer(fd, writable.set_result, None)
                    try:
                        await writable
                    finally:
                        loop.remove_writer(fd)
        except (BrokenPipeError, OSError):
            pass
        finally:
            os.close(fd)

    # --- killing ----------------------------------------------------------

    def _terminate(self, reason: Outcome, message: str, force: bool = False) -> None:
        if self._kill_reason is not None and not force:
            return
        if self._kill_reason is None:
            self._kill_reason, self._kill_message = reason, message
        if self._cancel_fd >= 0:
            # A child still in set-up sees this right before exec and does not run.
            with contextlib.suppress(OSError):
                os.eventfd_write(self._cancel_fd, 1)
        if self.pid and (self._kill_task is None or force):
            self._kill_task = asyncio.ensure_future(self._kill_sequence())

    async def _kill_sequence(self) -> None:
        """SIGTERM the tree, give it the grace period, then SIGKILL it."""
        grace = self.runtime.kill_grace
        if grace > 0:
            self._kill_tree(signal.SIGTERM)
            assert self._exit is not None
            with contextlib.suppress(TimeoutError, SpawnerLost, asyncio.CancelledError):
                await asyncio.wait_for(asyncio.shield(self._exit), grace)
        self._kill_tree(signal.SIGKILL)

    def _kill_tree(self, sig: int) -> None:
        # pid namespace (kill its init) and process group, through the spawner
        # that owns the children; then the cgroup, which a setsid cannot leave.
        if self.pid:
            self.runtime.spawner.kill(self.id, self.pid, sig)
        if sig == signal.SIGKILL and self._cgroup is not None:
            self._cgroup.kill()

    # --- reports ----------------------------------------------------------

    def _finish(self, status: ExitStatus | None) -> Report:
        stats = self._cgroup_stats()
        duration = time.monotonic() - (self._exec_time or self.started_at)
        limits = self.prepared.limits
        if status is None:
            report = Report(
                Outcome.SPAWN_FAILED,
                message="the spawner died while the spawn ran",
                failed_step="spawner",
                duration=duration,
            )
        else:
            code = os.waitstatus_to_exitcode(status.status)
            sig = -code if code < 0 else 0
            exit_code = code if code >= 0 else 0
            cpu = status.rusage[0] + status.rusage[1]
            if self._kill_reason is not None:
                outcome, message = self._kill_reason, self._kill_message
            elif stats.oom_kills > 0:
                outcome = Outcome.MEMORY_LIMIT
                message = f"memory limit of {limits.memory_bytes} bytes exceeded (OOM kill)"
            elif sig == signal.SIGXCPU or (
                sig == signal.SIGKILL
                and limits.cpu_seconds is not None
                and cpu >= limits.cpu_seconds - 0.05
            ):
                outcome, message = (
                    Outcome.CPU_LIMIT,
                    f"CPU limit of {limits.cpu_seconds:g} s exceeded",
                )
            elif stats.pids_refused > 0 and (sig or exit_code):
                outcome, message = Outcome.PIDS_LIMIT, f"pids limit of {limits.pids} refused a fork"
            elif sig:
                outcome, message = Outcome.SIGNALED, f"killed by {signal_name(sig)}"
            else:
                outcome, message = Outcome.EXITED, f"exited with status {exit_code}"
            report = Report(
                outcome,
                exit_code=exit_code,
                signal=sig,
                message=message,
                rusage=status.rusage,
                peak_memory_bytes=stats.peak_memory_bytes,
                oom_kills=stats.oom_kills,
                duration=duration,
            )
        return self._complete(report)

    def _refuse(self, refusal: Refusal) -> None:
        """Nothing ran: the caller gets the refusal (None is run()'s answer)."""
        self.events.put_nowait(("refused", refusal))
        self.done.set_exception(refusal)
        self.done.add_done_callback(_retrieve)

    def _finish_unstarted(self, outcome: Outcome, step: str, err: int, message: str) -> Report:
        return self._complete(Report(outcome, failed_step=step, errno=err, message=message))

    def _cgroup_stats(self) -> CgroupStats:
        if self._cgroup is None:
            return CgroupStats(None, 0, 0)
        try:
            return self._cgroup.stats()
        except OSError:
            return CgroupStats(None, 0, 0)

    def _complete(self, report: Report) -> Report:
        self.report = report
        if self._exec_audited:
            self.runtime.audit_exit(self, report)
        self.events.put_nowait(("exited", report))
        if not self.done.done():
            self.done.set_result(report)
        return report

    def _exec_record(self) -> dict[str, Any]:
        p = self.prepared
        return {
            "tenant": self.runtime.tenant.name,
            "spawn_id": self.id,
            "request_id": self.request.request_id,
            "labels": dict(self.request.labels),
            "argv": list(p.argv),
            "env_names": sorted(p.env),
            "executable": {
                "path": p.exe.path,
                "sha256": p.exe.sha256,
                "device": p.exe.device,
                "inode": p.exe.inode,
            },
            "cwd": p.cwd.path,
            "uid": self.runtime.tenant.uid,
            "gid": self.runtime.tenant.gid,
            "limits": p.limits.model_dump(exclude_none=True),
            "protections": [
                {"name": s.name, "applied": s.applied, "reason": s.reason} for s in p.protections
            ],
        }

    def age(self) -> float:
        return time.monotonic() - self.started_at


class _Cancelled(Exception):
    pass


def _audit_refusal(error: AuditUnavailable) -> Refusal:
    return Refusal(
        "AUDIT_UNAVAILABLE", f"the audit log cannot be written, nothing was run: {error}"
    )


def _retrieve(future: asyncio.Future[Any]) -> None:
    """Mark a future's exception as seen (its owner reports it otherwise)."""
    if not future.cancelled():
        future.exception()


class _Refused(Exception):
    def __init__(self, refusal: Refusal) -> None:
        super().__init__(refusal.message)
        self.refusal = refusal
