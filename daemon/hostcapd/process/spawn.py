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
import fcntl
import functools
import logging
import os
import signal
import socket
import time
from collections.abc import Callable, Sequence
from typing import Any

from hostcapd import metrics
from hostcapd.audit import AuditUnavailable
from hostcapd.childsetup import RLimit
from hostcapd.errors import Refusal
from hostcapd.logsetup import fields
from hostcapd.process import changes, deadlines, killing, records, terminal
from hostcapd.process.deps import SpawnDeps
from hostcapd.process.input import SpawnInput, feed_stdin
from hostcapd.process.launch import FreshLaunch, Launch, launch_for, null_stdin
from hostcapd.process.order import plan_rlimits, spawn_order
from hostcapd.process.output import OutputLog, StreamCount, StreamTally, ended_pipes
from hostcapd.process.report import (
    Cancelled,
    Outcome,
    Refused,
    Report,
    audit_refusal,
    classify,
    retrieve,
)
from hostcapd.process.request import Prepared, SpawnRequest
from hostcapd.sandbox.cgroups import CgroupError, CgroupStats, SpawnCgroup
from hostcapd.spawner.client import ExitStatus, SetupFailed, SpawnerLost

log = logging.getLogger("hostcapd.spawn")

#: Largest read of an output pipe: a whole pipe, and the largest piece of
#: output passed to the front-end.
READ_CHUNK = 1024 * 1024
PIPE_SIZE = 1024 * 1024
#: A pipe's size until its first full read (only a fast writer's is enlarged).
_PIPE_DEFAULT = 64 * 1024
#: Passed-but-unacknowledged bytes above which we stop reading the pipe. At
#: 0 a pipe is read again once the front-end took what it gave (decision
#: 0032): the pipe is the buffer, so a fast writer is passed in few large
#: pieces (bench/README.md, "Stream tuning"), and a slow one without delay.
HIGH_WATER = 0
EOF_GRACE = 2.0


class Spawn:
    def __init__(
        self,
        deps: SpawnDeps,
        request: SpawnRequest,
        prepared: Prepared,
        streaming: bool,
        launch: Launch | None = None,
        rlimits: Sequence[RLimit] | None = None,
    ) -> None:
        self.deps = deps
        self.request = request
        self.prepared = prepared
        #: How its child comes to be (a fresh child unless given a warm one's).
        self.launch = launch if launch is not None else launch_for(deps, None)
        self.id = self.launch.id
        self.rlimits = rlimits if rlimits is not None else plan_rlimits(deps.profile, prepared)
        #: A caller takes its output as it comes, its front-end keeps head
        #: and tail (decision 0032); without one the output is only counted.
        self.streaming = streaming
        self.pid = 0
        self.started_at = time.monotonic()
        #: Each stream's output budget: the front-end keeps its head and tail.
        self.keep = prepared.limits.output_bytes or 0
        self.stdout, self.stderr = StreamTally(self.keep), StreamTally(self.keep)
        #: A detached spawn's output, read by offset (its streams' tallies
        #: above stay empty): both streams' budget, as a Run's.
        self.log: OutputLog | None = OutputLog(2 * self.keep) if request.detached else None
        #: For the caller: ("output", (stream, bytes)) as read, ("exited", report).
        self.events: asyncio.Queue[tuple[str, Any]] = asyncio.Queue()
        self.pending_bytes = 0
        self.report: Report | None = None
        #: The root's one loop (asyncio.get_running_loop is a getpid on 3.11).
        self._loop = loop = deps.loop()
        self.done, self.started = loop.create_future(), loop.create_future()
        self._started_waiters: list[asyncio.Future[int]] = []
        #: Called in the turn `started` is settled (its pools' refills: no
        #: done callback's turn each); the exec record's durability.
        self.on_started: list[Callable[[], None]] = []
        self._synced: asyncio.Future[Any] | None = None
        self._kill_reason: Outcome | None = None
        self._kill_message = ""
        self._kill_task: asyncio.Task[None] | None = None
        self._cancel_fd = -1
        self._readers: dict[int, int] = {}  # each open read end's stream (1, 2)
        self._eof = asyncio.Event()
        #: Read ends waiting for their output to be taken (back-pressure).
        self._paused: set[int] = set()
        self._cgroup: SpawnCgroup | None = None
        self._timer: deadlines.Deadline | None = None
        self._exec_time = 0.0
        self._exec_audited = False
        self._go_fd = -1
        self._audit_failure: AuditUnavailable | None = None
        # Set-up state: the read ends until their readers take them (the
        # child's ends are the launch's).
        self._read_ends: list[int] = []
        self._stdin_w = -1
        self._child_stdio = (-1, -1, -1)
        #: Its open input (stdin_open or a tty), once it runs (issue 31).
        self.input: SpawnInput | None = None
        #: Its terminal's size, when it has one (Resize changes it).
        self.tty_size = request.tty
        self._tty_channel: socket.socket | None = None
        #: The child's end of it: the launch's, like the child's stdio.
        self._tty_child = -1

    # --- control from outside -------------------------------------------

    def cancel(self, reason: Outcome = Outcome.CANCELLED, message: str = "") -> None:
        """Kill the tree (once) for `reason`; safe to call at any time."""
        self._terminate(
            reason, message or ("cancelled by the client" if reason is Outcome.CANCELLED else "")
        )

    def started_waiter(self) -> asyncio.Future[int]:
        """`started` for one caller: a future of its own, settled with it in
        the same turn, which the caller may cancel (it went away) without
        cancelling `started` (a shield's two callbacks and a turn less)."""
        if self.started.done():
            return self.started  # (a done future is not cancelled by its awaiter)
        waiter: asyncio.Future[int] = self._loop.create_future()
        self._started_waiters.append(waiter)
        return waiter

    def _settle_started(self, pid: int, refusal: Refusal | None = None) -> None:
        first = not self.started.done()
        waiters, self._started_waiters = self._started_waiters, []
        for future in [self.started, *waiters]:
            if future.done():
                continue
            if refusal is None:
                future.set_result(pid)
            else:
                future.set_exception(refusal)
                future.add_done_callback(retrieve)
        hooks, self.on_started = (self.on_started, []) if first else ((), self.on_started)
        for hook in hooks:
            try:
                hook()
            except Exception:  # a pool's refill: never the spawn's end
                log.exception("spawn %s: a hook on its start failed", self.id)

    @property
    def out_counts(self) -> StreamTally | StreamCount:
        """stdout's total, kept and dropped bytes."""
        return self.log.counts[1] if self.log is not None else self.stdout

    @property
    def err_counts(self) -> StreamTally | StreamCount:
        return self.log.counts[2] if self.log is not None else self.stderr

    def signal(self, sig: int) -> None:
        if self.pid:
            self.deps.spawner.kill(self.id, self.pid, sig)

    def consumed(self, nbytes: int) -> None:
        """The caller passed `nbytes` of output on: lift back-pressure."""
        self.pending_bytes -= nbytes
        if self._paused and self.pending_bytes <= HIGH_WATER // 2:
            self._resume_paused()

    def stop_streaming(self) -> None:
        """The caller is gone or done: reads are only counted from now on."""
        if not self.streaming:
            return
        self.streaming = False
        for event in [self.events.get_nowait() for _ in range(self.events.qsize())]:
            if event[0] != "output":
                self.events.put_nowait(event)
        self.pending_bytes = 0
        self._resume_paused()

    def _resume_paused(self) -> None:
        loop = self._loop
        for fd in list(self._paused):
            self._paused.discard(fd)
            loop.add_reader(fd, self._on_readable, fd)

    # --- the run ----------------------------------------------------------

    async def run(self) -> Report | None:
        """The spawn sequence; None when refused before anything ran."""
        try:
            # Its go (or cancel) is written in the turn the exec record's
            # fsync is known to have ended (`_on_durable`): the child execs
            # only once it is durable, and this waits for its start alone.
            if self.deps.order_first and isinstance(self.launch, FreshLaunch):
                await self._order_then_record()
            else:
                self._write_exec_record()
                self._make_cgroup()
                self._make_pipes()
                await self._send_order()
            self.pid = await self.launch.started()
            if self._tty_channel is not None:
                self._take_terminal(self._tty_channel)
            changes.watch(self.deps, self.pid, self._cgroup)
            self._exec_time = time.monotonic()
            self._settle_started(self.pid)
            stdin_task = self._stream()
            try:
                status = await self._wait_end()
            finally:
                if stdin_task:
                    stdin_task.cancel()
            await changes.record(self.deps, self.id, self.request, self.pid)
            return self._finish(status)
        except Refused as refused:
            self._refuse(refused.refusal)
            return None
        except Cancelled:
            return self._finish_unstarted(Outcome.CANCELLED, "", 0, self._kill_message)
        except (SetupFailed, SpawnerLost) as error:
            if self._synced is not None and not self._synced.done():
                await asyncio.wait((self._synced,))  # is it the record's failure?
            if self._audit_failure is not None:  # its child never had its go
                self._refuse(audit_refusal(self._audit_failure))
                return None
            if isinstance(error, SpawnerLost):
                return self._finish_unstarted(
                    Outcome.SPAWN_FAILED, "spawner", 0, "the spawner died during set-up"
                )
            if self._kill_reason is not None:  # cancel wins over a simultaneous error
                return self._finish_unstarted(self._kill_reason, "", 0, self._kill_message)
            return self._finish_unstarted(
                Outcome.SPAWN_FAILED,
                error.step,
                error.errno,
                f"set-up step {error.step} failed: {os.strerror(error.errno) if error.errno else error.detail}",
            )
        except Exception as error:
            # A daemon bug must still end the call and leave nothing behind.
            log.exception(
                "spawn %s failed inside the daemon",
                self.id,
                extra=fields(tenant=self.deps.tenant.name, spawn_id=self.id),
            )
            if not self._exec_audited:
                refusal = Refusal(
                    "INVALID_ARGUMENT",
                    f"the daemon could not start the spawn: {type(error).__name__}",
                )
                self._refuse(refusal)
                return None
            self._kill_tree(signal.SIGKILL, wait=True)
            return self._finish_unstarted(
                Outcome.SPAWN_FAILED, "daemon", 0, f"internal error: {type(error).__name__}"
            )
        finally:
            if self.report is not None:
                # Answered: its report woke the caller, whose task sends the
                # answer in the loop's next turn. The cgroup's removal and
                # the rest wait for that turn, off the answer's path.
                self._stop_timers()
                try:
                    await asyncio.sleep(0)
                finally:
                    self._release()
            else:
                self._release()

    # Step 2: the write-ahead exec record, fsynced while the child's set-up
    # runs; the child waits right before exec for its go. No record, no exec.

    def _write_exec_record(self) -> None:
        self._append_exec_record()
        if self._kill_reason is not None:
            raise Cancelled()

    def _append_exec_record(self) -> None:
        deps = self.deps  # the fsync thread writes its go once durable (audit/fsync.py)
        if self._go_fd < 0:
            self._go_fd = os.eventfd(0, os.EFD_CLOEXEC | os.EFD_NONBLOCK)
        try:
            _, self._synced = deps.audit.write_pending(
                "process.exec",
                release_fd=self._go_fd,
                built=records.exec_record(deps.tenant, self.id, self.request, self.prepared),
                settled=self._on_durable,
            )
        except AuditUnavailable as error:
            raise Refused(audit_refusal(error), error) from None
        self._exec_audited = True

    def _on_durable(self, error: BaseException | None) -> None:
        """The exec record's fsync ended (called in that turn): the go, or,
        not durable, a cancel (the child must not run; the spawn is refused)."""
        if error is None:
            return  # its go is written (by the fsync thread, or the writer)
        assert isinstance(error, AuditUnavailable)
        self._exec_audited = False
        self._audit_failure = error
        if self._synced is not None:
            retrieve(self._synced)
        if self._cancel_fd >= 0:
            with contextlib.suppress(OSError):
                os.eventfd_write(self._cancel_fd, 1)

    async def _order_then_record(self) -> None:
        """A fresh spawn's order leaves before its exec record is built and
        appended (the C set-up overlaps them); its child still waits for the
        go, written once the record is durable. A failure before the append
        is recorded as tried (or refused) as if the record had come first; an
        append that fails cancels the child, and the spawn is refused. (A
        warm child's last steps are too short to gain: bench/README.md.)"""
        if self._kill_reason is not None:  # cancelled before it began
            return self._write_exec_record()  # (raises Cancelled)
        self._go_fd = os.eventfd(0, os.EFD_CLOEXEC | os.EFD_NONBLOCK)
        try:
            self._make_cgroup()
            self._make_pipes()
            await self._send_order()
        except BaseException:
            self._append_exec_record()  # Refused replaces the error, as before
            raise
        try:
            self._append_exec_record()
        except Refused as refused:
            # The child waits in its set-up for a go it will never have:
            # cancelled, as for a failed fsync.
            assert refused.audit is not None
            self._on_durable(refused.audit)

    def _make_cgroup(self) -> None:
        if not self.deps.profile.has("cgroup"):
            return
        limits = self.prepared.limits
        try:
            self._cgroup = self.launch.make_cgroup(limits.memory_bytes, limits.pids)
        except CgroupError as error:
            # Recorded as tried: it ends SPAWN_FAILED at step "cgroup", and
            # its exit record closes the exec record.
            raise SetupFailed("cgroup", 0, str(error)) from None

    def _make_pipes(self) -> None:
        """Pipes and eventfds. The child's ends are the launch's, which sends
        them and closes them once the spawner has them."""
        if self.request.tty is not None:
            # Its 0, 1 and 2 are its terminal's (pty.c); until then /dev/null.
            self._tty_channel, self._tty_child = terminal.channel()
            null = [os.open("/dev/null", os.O_RDWR | os.O_CLOEXEC) for _ in range(3)]
            self._child_stdio = (null[0], null[1], null[2])
            self.launch.child_fds += [*self._child_stdio, self._tty_child]
            self._cancel_fd = os.eventfd(0, os.EFD_CLOEXEC | os.EFD_NONBLOCK)
            return
        out_r, out_w = os.pipe2(os.O_CLOEXEC | os.O_NONBLOCK)
        err_r, err_w = os.pipe2(os.O_CLOEXEC | os.O_NONBLOCK)
        self._read_ends += [out_r, err_r]
        os.set_blocking(out_w, True)
        os.set_blocking(err_w, True)
        if self.request.stdin is not None or self.request.stdin_open:
            in_r, self._stdin_w = os.pipe2(os.O_CLOEXEC)
            os.set_blocking(self._stdin_w, False)
            self.launch.child_fds.append(in_r)
        else:
            in_r = null_stdin(self.deps.tenant.name)  # lent: never the launch's to close
        self._child_stdio = (in_r, out_w, err_w)
        self.launch.child_fds += (out_w, err_w)
        self._cancel_fd = os.eventfd(0, os.EFD_CLOEXEC | os.EFD_NONBLOCK)

    # Step 3: the spawner clones; the C set-up runs and waits for the go.

    async def _send_order(self) -> None:
        in_r, out_w, err_w = self._child_stdio
        fds = [self.prepared.exe.fd, in_r, out_w, err_w, self._cancel_fd, self._go_fd]
        if self.request.tty is not None:
            fds.append(self._tty_child)  # the terminal's channel (see SpawnOrder)
        self.launch.labels = dict(self.request.labels)
        await self.launch.send(functools.partial(spawn_order, self), fds)

    # Step 4: stream output, feed stdin, run the wall clock.

    def _stream(self) -> asyncio.Future[None] | None:
        loop = self._loop
        # A terminal's one end (its output is stdout), or the two pipes.
        ended = ended_pipes(self._read_ends) if self.request.tty is None else ()
        for fd, stream in zip(self._read_ends, (1, 2), strict=False):
            if fd in ended:  # its writers are gone, nothing is in it: its end of file
                os.close(fd)
                continue
            self._readers[fd] = stream
            loop.add_reader(fd, self._on_readable, fd)
        self._read_ends.clear()
        if not self._readers:
            self._eof.set()
        stdin_task = None
        if self._stdin_w >= 0 and self.request.stdin_open:
            self.input = SpawnInput(self._stdin_w, tty=False)
            self._stdin_w = -1  # the input's now
        if self.input is not None:
            if self.request.stdin:
                stdin_task = self.input.feed(self.request.stdin)
        elif self._stdin_w >= 0:
            stdin_task = loop.create_task(feed_stdin(self._stdin_w, self.request.stdin or b""))
            self._stdin_w = -1  # feed_stdin closes it
        wall = self.prepared.limits.wall_seconds
        message = f"wall-clock limit of {wall:g} s exceeded" if wall is not None else ""
        background = self.deps.tenant.max_background_seconds
        if self.request.detached and (wall is None or wall > background):
            wall, message = background, f"background limit of {background:g} s exceeded"
        if wall is not None:
            self._timer = deadlines.call_later(
                wall, self._terminate, Outcome.TIMEOUT, message, loop=loop
            )
        if self._kill_reason is not None:  # cancelled while the exec was in flight
            self._terminate(self._kill_reason, self._kill_message, force=True)
        return stdin_task

    # Step 5: done only when the child is reaped and both pipes are at EOF.

    async def _wait_end(self) -> ExitStatus | None:
        assert self.launch.exit is not None
        try:
            status: ExitStatus | None = await self.launch.exit
        except SpawnerLost:
            status = None
        # Whatever it left behind dies with it: the kernel saw to it in a pid
        # namespace, else the spawner killed its group as it reaped it.
        if self._cgroup is not None and not self.deps.profile.has("pid_namespace"):
            self._cgroup.kill(wait=True)
        if not self._eof.is_set():  # (one timer: no task, nor a timeout scope's steps)
            # After the grace an escaped holder of the pipe is ignored.
            grace = self._loop.call_later(EOF_GRACE, self._eof.set)
            try:
                await self._eof.wait()
            finally:
                grace.cancel()
        return status

    def _take_terminal(self, channel: socket.socket) -> None:
        """The master the child sent: read as its output, written as its input."""
        self._tty_channel = None
        try:
            master = terminal.receive_master(channel)
        finally:
            channel.close()
        self._read_ends.append(master)
        self.input = SpawnInput(os.dup(master), tty=True)

    def _release(self) -> None:
        """Every way out: close what is open, stop the timers, remove the cgroup."""
        if self.input is not None:
            self.input.end()
        if self._tty_channel is not None:
            self._tty_channel.close()
            self._tty_channel = None
        for fd in [*self._read_ends, self._stdin_w]:
            if fd >= 0:
                with contextlib.suppress(OSError):
                    os.close(fd)
        self._read_ends.clear()
        self._stdin_w = -1
        self._close_readers()
        if self._cancel_fd >= 0:
            os.close(self._cancel_fd)
            self._cancel_fd = -1
        if self._go_fd >= 0:
            os.close(self._go_fd)
            self._go_fd = -1
        self._stop_timers()
        self.prepared.close()
        synced, self._synced = self._synced, None
        if synced is not None:  # not awaited: its error is `_on_durable`'s
            retrieve(synced) if synced.done() else synced.add_done_callback(retrieve)
        # Its cgroup (a warm child's it never ran too) goes, or is recycled (cgroup_pool.py).
        self._cgroup = self.launch.release(ran=bool(self.pid)) or self._cgroup
        if self._cgroup is not None and not self.deps.recycled.give(self._cgroup):
            try:
                self._cgroup.remove()
            except CgroupError:
                self._cgroup.kill()  # something outlived the tree kill
                self._cgroup.remove()
        self._settle_started(0)

    def _stop_timers(self) -> None:
        """Its wall clock and kill sequence: nothing fires once it has ended."""
        if self._timer:
            self._timer.cancel()
        if self._kill_task and not self._kill_task.done():
            self._kill_task.cancel()

    # --- output -----------------------------------------------------------

    def _on_readable(self, fd: int) -> None:
        stream = self._readers[fd]
        if not self.deps.turns.admit(self, fd, self._on_readable):
            return  # past its tenant's reads for this pass of the loop
        try:
            data = os.read(fd, READ_CHUNK)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if data and self.request.tty is not None:
            data = terminal.drain(fd, data, READ_CHUNK)
        if not data:
            self.deps.turns.refund(self, fd)  # an end of file is not a read that counts
            self._loop.remove_reader(fd)
            self._paused.discard(fd)
            os.close(fd)
            del self._readers[fd]
            if not self._readers:
                self._eof.set()
            return
        if len(data) == _PIPE_DEFAULT and stream == 1:  # a fast writer filled it:
            with contextlib.suppress(OSError):  # fewer, larger reads (its cgroup pays)
                fcntl.fcntl(fd, fcntl.F_SETPIPE_SZ, PIPE_SIZE)
        if self.log is not None:
            self.log.feed(stream, data)
            total = self.log.total
        else:
            (self.stdout if stream == 1 else self.stderr).feed(len(data))
            total = self.stdout.total + self.stderr.total
            self._pass_on(fd, stream, data)
        ceiling = self.prepared.limits.total_output_bytes
        if ceiling is not None and total > ceiling and self._kill_reason is None:
            self._terminate(
                Outcome.OUTPUT_LIMIT, f"total output passed the limit of {ceiling} bytes"
            )

    def _pass_on(self, fd: int, stream: int, data: bytes) -> None:
        """Queue a read for the caller to pass to its front-end, the pipe
        read again once it has; with a budget of 0 nothing is kept or passed."""
        if not self.streaming or not self.keep:
            return
        self.pending_bytes += len(data)
        self.events.put_nowait(("output", (stream, data)))
        if self.pending_bytes > HIGH_WATER:
            self._loop.remove_reader(fd)
            self._paused.add(fd)

    def _close_readers(self) -> None:
        loop = self._loop
        for fd in list(self._readers):
            loop.remove_reader(fd)
            with contextlib.suppress(OSError):
                os.close(fd)
        self._readers.clear()
        self._paused.clear()
        self.deps.turns.forget(self)

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
            self._kill_task = killing.begin(
                self._kill_sequence, self._kill_tree, self.deps.kill_grace
            )

    async def _kill_sequence(self) -> None:
        """SIGTERM the tree, the grace while it lives, then SIGKILL it."""
        assert self.launch.exit is not None
        await killing.kill_sequence(self._kill_tree, self.launch.exit, self.deps.kill_grace)

    def _kill_tree(self, sig: int, *, wait: bool = False) -> None:
        if sig == signal.SIGKILL and self._cgroup is not None:
            self._cgroup.kill(wait=wait)
        if self.pid:
            self.deps.spawner.kill(self.id, self.pid, sig)

    # --- reports ----------------------------------------------------------

    def _finish(self, status: ExitStatus | None) -> Report:
        killed = (self._kill_reason, self._kill_message) if self._kill_reason else None
        duration = time.monotonic() - (self._exec_time or self.started_at)
        # With a status nothing of the tree is left (`_wait_end`): final counters.
        stats = self._cgroup_stats(final=status is not None)
        return self._complete(classify(status, stats, self.prepared.limits, killed, duration))

    def _refuse(self, refusal: Refusal) -> None:
        """Nothing ran: the caller learns it from `started` (None is run()'s answer)."""
        self._settle_started(0, refusal)
        self.done.set_exception(refusal)
        self.done.add_done_callback(retrieve)

    def _finish_unstarted(self, outcome: Outcome, step: str, err: int, message: str) -> Report:
        return self._complete(Report(outcome, failed_step=step, errno=err, message=message))

    def _cgroup_stats(self, final: bool = False) -> CgroupStats:
        if self._cgroup is None:
            return CgroupStats(None, 0, 0)
        try:
            return self._cgroup.stats(final=final)
        except OSError:
            return CgroupStats(None, 0, 0)

    def _complete(self, report: Report) -> Report:
        self.report = report
        if self._exec_audited:
            record = records.exit_record(
                self.deps.tenant.name,
                self.id,
                self.request,
                self.pid,
                report,
                self.out_counts,
                self.err_counts,
                tty=self.tty_size,
                input_counts=(self.input.writes, self.input.bytes) if self.input else None,
            )
            records.write_exit(self.deps.audit, self.id, record)
            metrics.spawn_ended(
                self.deps.tenant.name,
                report.outcome.value,
                report.duration,
                self.started_at,
                self._exec_time or None,
            )
        self.events.put_nowait(("exited", report))
        if not self.done.done():
            self.done.set_result(report)
        if self.log is not None:
            self.log.wake()
        return report

    def age(self) -> float:
        return time.monotonic() - self.started_at
