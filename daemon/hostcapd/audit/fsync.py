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
exec). A failed fsync writes nothing into it."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import os
import time
from dataclasses import dataclass
from pathlib import Path

from hostcapd import metrics
from hostcapd.audit.errors import AuditUnavailable
from hostcapd.config import AuditSettings

#: fsyncs in flight at once: a batched or earlier one, and one more for the
#: durable writes appended after it started.
MAX_SYNCS_IN_FLIGHT = 2


def sync_files(
    retired: list[int],
    directory: Path | None,
    fd: int,
    release: tuple[int, ...] = (),
    *,
    own_fd: bool = False,
) -> None:
    """Runs on an fsync thread: make retired files, the directory entry and the
    current file durable. Retired fds are closed here, after their last fsync.
    Then, only if all of that succeeded, write 1 into each `release` eventfd;
    they are this call's to close, whatever happens (`fd` too, when called
    with `own_fd`)."""
    try:
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
    finally:
        for go in [*release, fd] if own_fd else release:
            with contextlib.suppress(OSError):
                os.close(go)


@dataclass(eq=False, slots=True)
class Waiter:
    """A durable write waiting for its fsync."""

    #: `_appended` once its line was: durable once `_synced` reaches it.
    generation: int
    future: asyncio.Future[None]
    #: Its eventfd (a dup, ours) until an fsync covering it takes it; -1 then.
    release_fd: int = -1

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
    #: `close` waits for: the generation each covers and its description's index.
    _syncs: dict[asyncio.Future[None], tuple[int, int]]
    #: Each durable write waiting for its fsync.
    _waiters: list[Waiter]
    _flush_handle: asyncio.TimerHandle | None
    _failure: str | None
    _closed: bool
    _executor: concurrent.futures.ThreadPoolExecutor
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
            if max(target for target, _ in self._syncs.values()) >= self._appended:
                return  # one in flight covers it
        loop = asyncio.get_running_loop()
        slot = min({0, 1} - {used for _, used in self._syncs.values()})
        target, retired, directory = self._sync_batch()
        release: list[int] = []
        for waiter in self._waiters:
            if waiter.generation <= target and waiter.release_fd >= 0:
                release.append(waiter.release_fd)
                waiter.release_fd = -1  # the fsync thread closes it
        done: asyncio.Future[None] = loop.create_future()
        self._syncs[done] = (target, slot)

        def finished(job: concurrent.futures.Future[None]) -> None:  # on the fsync thread
            with contextlib.suppress(RuntimeError):  # the loop is gone: nobody waits
                loop.call_soon_threadsafe(self._sync_finished, job, target, done)

        # The thread's own fd of its description: a rotation may close ours.
        fd = os.dup(self._descriptions[slot])
        try:
            job = self._executor.submit(
                sync_files, retired, directory, fd, tuple(release), own_fd=True
            )
        except RuntimeError:  # the executor is shut down (closing)
            for unused in [fd, *release]:
                os.close(unused)
            del self._syncs[done]
            raise AuditUnavailable("the audit log is closed") from None
        job.add_done_callback(finished)

    def _sync_finished(
        self, job: concurrent.futures.Future[None], target: int, done: asyncio.Future[None]
    ) -> None:
        self._syncs.pop(done, None)
        error = job.exception()
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
            if self._failure is not None:
                waiter.close_fd()
                waiter.future.set_exception(AuditUnavailable(self._failure))
            elif waiter.generation <= self._synced:
                waiter.close_fd()
                waiter.future.set_result(None)
            else:
                still.append(waiter)
        self._waiters = still

    def _schedule_batch_sync(self) -> None:
        try:
            loop = asyncio.get_running_loop()
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
