"""Group-commit fsync: durable writes share one fdatasync, run on a dedicated
thread, never the event loop's; batched writes are synced within the window.

A durable write never queues behind an fsync already in flight (a batched
one, or another durable write's, started before its line was appended):
it starts its own at once on a second thread. An fdatasync that begins
after a `write(2)` returned covers that write whatever else is in flight,
so two at a time are as sound as one; each uses its own open file
description of the log (`_descriptions`), so a writeback error is reported
to each fsync that waited on it (an error is reported once per open file
description: two fsyncs through one could see it only once). A durable write may hand an eventfd
(`write_pending(release_fd=...)`): the fsync thread writes 1 into it as soon
as the fdatasync covering the line returned successfully, without waiting
for the event loop (the spawn's go: its child waits on that fd right before
exec). A failed fsync writes nothing into it.

The fsyncs run on two threads of the writer's own (`SyncThreads`), each
taking jobs from one queue: a job's start is a `SimpleQueue.put` on the
loop's side, its end one callback on the thread's, with none of a thread
pool's futures, conditions and semaphores in between."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from hostcapd import metrics
from hostcapd.audit.errors import AuditUnavailable
from hostcapd.config import AuditSettings
from hostcapd.kept_loop import KeptLoop

#: fsyncs in flight at once: a batched or earlier one, and one more for the
#: durable writes appended after it started.
MAX_SYNCS_IN_FLIGHT = 2


def sync_files(
    retired: list[int], directory: Path | None, fd: int, release: tuple[int, ...] = ()
) -> None:
    """Runs on an fsync thread: make retired files, the directory entry and the
    current file durable. Retired fds are closed here, after their last fsync.
    Then, only if all of that succeeded, write 1 into each `release` eventfd.
    `fd` and the `release` fds stay the caller's to close (the writer closes
    them on the loop, `GroupCommit._sync_finished`: each syscall here is a
    release and a take of the GIL while the loop runs)."""
    began = time.monotonic()
    error: OSError | None = None
    for old in retired:
        try:
            os.fdatasync(old)
        except OSError as e:
            error = error or e
        finally:
            os.close(old)
    if directory is not None:
        dir_fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
    os.fdatasync(fd)
    if error is not None:
        raise error
    for go in release:
        with contextlib.suppress(OSError):  # its reader may be gone
            os.eventfd_write(go, 1)
    metrics.fsync_done(time.monotonic() - began)


_log = logging.getLogger("hostcapd.audit")

#: A job for an fsync thread, and what it calls on that thread when the job
#: ended (with its exception, or None).
_Job = tuple[Callable[[], None], Callable[[BaseException | None], None]]


class SyncThreads:
    """The writer's fsync threads: `count` of them, started on first use,
    taking jobs from one queue (never more than `count` are given at once:
    see `GroupCommit._start_sync`). Daemon threads: `AuditLog.close` waits for
    every fsync in flight before it stops them; a process that leaves without
    it leaves its records as a crash would (the ledger closes their spawns at
    the next start, and a go not yet written is never written: no exec)."""

    def __init__(self, count: int, name: str) -> None:
        self._count = count
        self._name = name
        self._jobs: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self._threads: list[threading.Thread] = []
        self._stopped = False

    def submit(self, job: Callable[[], None], done: Callable[[BaseException | None], None]) -> None:
        """Run `job` on an fsync thread, then `done` there with its exception
        (or None). Raises RuntimeError once stopped."""
        if self._stopped:
            raise RuntimeError("the fsync threads are stopped")
        if not self._threads:
            for index in range(self._count):
                thread = threading.Thread(
                    target=self._work, name=f"{self._name}_{index}", daemon=True
                )
                thread.start()
                self._threads.append(thread)
        self._jobs.put((job, done))

    async def call(self, job: Callable[[], None]) -> None:
        """Run `job` on an fsync thread and wait for it; raises what it raised."""
        loop = asyncio.get_running_loop()
        ended: asyncio.Future[None] = loop.create_future()

        def resolve(error: BaseException | None) -> None:  # on the loop
            if ended.done():
                return
            if error is None:
                ended.set_result(None)
            else:
                ended.set_exception(error)

        def done(error: BaseException | None) -> None:  # on the fsync thread
            with contextlib.suppress(RuntimeError):  # the loop is gone: nobody waits
                loop.call_soon_threadsafe(resolve, error)

        self.submit(job, done)
        await ended

    def stop(self) -> None:
        """No more jobs; each thread ends once the jobs queued before are done."""
        if self._stopped:
            return
        self._stopped = True
        for _ in self._threads:
            self._jobs.put(None)

    def _work(self) -> None:
        while (item := self._jobs.get()) is not None:
            job, done = item
            error: BaseException | None = None
            try:
                job()
            except BaseException as raised:  # handed to `done`, which decides
                error = raised
            try:
                done(error)
            except BaseException:  # never lose the thread: later fsyncs need it
                _log.exception("the audit fsync thread's hand-back failed")


@dataclass(eq=False, slots=True)
class Waiter:
    """A durable write waiting for its fsync."""

    #: `_appended` once its line was: durable once `_synced` reaches it.
    generation: int
    future: asyncio.Future[None]
    #: Its eventfd (a dup, ours) until an fsync covering it takes it; -1 then.
    release_fd: int = -1
    #: Called in the turn its future is settled, with its error or None
    #: (`write_pending(settled=...)`): no done callback's turn of the loop.
    settled: Callable[[BaseException | None], None] | None = None

    def close_fd(self) -> None:
        if self.release_fd >= 0:
            with contextlib.suppress(OSError):
                os.close(self.release_fd)
            self.release_fd = -1


class GroupCommit:
    """The fsync half of `AuditLog`: what is appended (`_appended`) becomes
    durable (`_synced`), one fsync covering every append made before it starts.
    `AuditLog.__init__` sets these."""

    _settings: AuditSettings
    _fd: int
    _appended: int
    _synced: int
    _retired: list[int]
    _dir_dirty: bool
    #: Two open file descriptions of the current file (`_fd` and one more,
    #: read-only): each fsync in flight has one of its own.
    _descriptions: tuple[int, int]
    #: The fsyncs in flight (each resolved on the loop when it ends), which
    #: `close` waits for: the generation each covers, its description's index,
    #: and whether it carries a rotation (retired files or the directory).
    _syncs: dict[asyncio.Future[None], tuple[int, int, bool]]
    #: Each durable write waiting for its fsync.
    _waiters: list[Waiter]
    _flush_handle: asyncio.TimerHandle | None
    #: The running loop, kept once asked (hostcapd.kept_loop).
    _running_loop: KeptLoop
    _failure: str | None
    _closed: bool
    _threads: SyncThreads
    #: fsyncs done so far (group commit makes this far fewer than durable writes).
    sync_count: int

    def _start_sync(self, *, durable: bool = False) -> None:
        """Start an fsync covering everything appended so far, unless one in
        flight covers it already, or (a batch) one is in flight at all, or two
        are. It runs on an fsync thread, which hands the result back to the
        loop with one call_soon_threadsafe: no task, no wrapped future, one
        loop turn (a durable record cost 7 turns and ~0.35 ms of loop CPU)."""
        if self._syncs:
            if not durable or len(self._syncs) >= MAX_SYNCS_IN_FLIGHT:
                return  # the one in flight starts the next when it ends
            if any(rotation for _, _, rotation in self._syncs.values()):
                # It alone makes the old file and the new entry durable: one
                # started beside it could end first and release records that
                # are not yet (a rotation is rare; wait for it).
                return
            if max(target for target, _, _ in self._syncs.values()) >= self._appended:
                return  # one in flight covers it
        loop = self._running_loop()
        slot = min({0, 1} - {used for _, used, _ in self._syncs.values()})
        target, retired, directory = self._sync_batch()
        release: list[int] = []
        for waiter in self._waiters:
            if waiter.generation <= target and waiter.release_fd >= 0:
                release.append(waiter.release_fd)
                waiter.release_fd = -1  # the loop closes it when the fsync ends
        done: asyncio.Future[None] = loop.create_future()
        self._syncs[done] = (target, slot, bool(retired) or directory is not None)

        # The thread's own fd of its description: a rotation may close ours.
        fd = os.dup(self._descriptions[slot])
        released = tuple(release)

        def finished(error: BaseException | None) -> None:  # on the fsync thread
            with contextlib.suppress(RuntimeError):  # the loop is gone: nobody waits
                loop.call_soon_threadsafe(self._sync_finished, error, target, done, fd, released)

        try:
            # Its fd and the gos are closed on the loop (`_sync_finished`): two
            # syscalls fewer on the thread, each a release and a take of the
            # GIL while the loop runs a spawn's set-up.
            self._threads.submit(lambda: sync_files(retired, directory, fd, released), finished)
        except RuntimeError:  # the threads are stopped (closing)
            for unused in [fd, *release]:
                os.close(unused)
            del self._syncs[done]
            raise AuditUnavailable("the audit log is closed") from None

    def _sync_finished(
        self,
        error: BaseException | None,
        target: int,
        done: asyncio.Future[None],
        fd: int = -1,
        released: tuple[int, ...] = (),
    ) -> None:
        for used in (fd, *released):  # the thread's fd and the gos it wrote
            if used >= 0:
                with contextlib.suppress(OSError):
                    os.close(used)
        self._syncs.pop(done, None)
        if error is not None:
            metrics.audit_error("fsync")
            # After a failed fsync the kernel may have dropped the dirty pages:
            # nothing since the last good fsync can be trusted, so fail closed.
            reason = error.strerror if isinstance(error, OSError) else str(error)
            self._failure = f"audit log fsync failed: {reason}; the audit log must be reopened (restart hostcapd)"
            done.set_exception(AuditUnavailable(self._failure))
            done.exception()  # retrieved: the waiters below carry it
            self._release_waiters()
            return
        self._synced = max(self._synced, target)
        self.sync_count += 1
        done.set_result(None)
        self._release_waiters()
        if self._closed or self._failure is not None:
            return
        if self._waiters:
            self._start_sync(durable=True)  # durable records appended meanwhile: at once
        elif self._synced < self._appended and self._flush_handle is None:
            # Records appended while that fsync ran have waited long enough.
            self._start_sync()

    def _release_waiters(self) -> None:
        """Complete each waiter whose record is now durable (all of them, with
        the error, once the log has failed)."""
        still: list[Waiter] = []
        for waiter in self._waiters:
            if waiter.future.done():
                waiter.close_fd()
                continue  # its caller went away
            error: AuditUnavailable | None = None
            if self._failure is not None:
                waiter.close_fd()
                error = AuditUnavailable(self._failure)
                waiter.future.set_exception(error)
            elif waiter.generation <= self._synced:
                if waiter.release_fd >= 0:
                    # Made durable by an fsync that did not carry its go (one
                    # started before it was appended, or the close's): written
                    # here. One that carries it writes it when it ends.
                    with contextlib.suppress(OSError):
                        os.eventfd_write(waiter.release_fd, 1)
                waiter.close_fd()
                waiter.future.set_result(None)
            else:
                still.append(waiter)
                continue
            if waiter.settled is not None:
                try:
                    waiter.settled(error)
                except Exception:  # its caller's: never the writer's
                    _log.exception("a durable write's settled hook failed")
        self._waiters = still

    def _schedule_batch_sync(self) -> None:
        try:
            loop = self._running_loop()
        except RuntimeError:
            self._sync_inline()  # no event loop (start-up, tools): sync now
            return
        if self._flush_handle is not None or self._syncs:
            return  # a timer or an fsync in flight will cover it (see _sync_finished)
        delay = self._settings.fsync_interval_ms / 1000
        self._flush_handle = loop.call_later(delay, self._on_flush_timer)

    def _on_flush_timer(self) -> None:
        self._flush_handle = None
        if not self._closed and self._failure is None and self._synced < self._appended:
            self._start_sync()

    def _sync_batch(self) -> tuple[int, list[int], Path | None]:
        """What the next fsync covers, taken now: appends made while it runs
        wait for the one after. (generation, retired fds, directory to sync)."""
        retired, self._retired = self._retired, []
        directory = self._settings.path.parent if self._dir_dirty else None
        self._dir_dirty = False
        return self._appended, retired, directory

    def _sync_inline(self) -> None:
        target, retired, directory = self._sync_batch()
        try:
            sync_files(retired, directory, self._fd)
        except OSError as error:
            self._failure = f"audit log fsync failed: {error.strerror}"
            raise AuditUnavailable(self._failure) from None
        self._synced = max(self._synced, target)
        self.sync_count += 1
