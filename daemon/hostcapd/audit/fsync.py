"""Group-commit fsync: durable writes share one fdatasync, run on a dedicated
thread, never the event loop's; batched writes are synced within the window."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import os
import time
from pathlib import Path

from hostcapd import metrics
from hostcapd.audit.errors import AuditUnavailable
from hostcapd.config import AuditSettings


def sync_files(retired: list[int], directory: Path | None, fd: int) -> None:
    """Runs on the fsync thread: make retired files, the directory entry and the
    current file durable. Retired fds are closed here, after their last fsync."""
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
    metrics.fsync_done(time.monotonic() - began)
    if error is not None:
        raise error


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
    #: The fsync in flight (resolved on the loop when it ends), if any.
    _sync_future: asyncio.Future[None] | None
    #: (generation, future) of each durable write waiting for its fsync.
    _waiters: list[tuple[int, asyncio.Future[None]]]
    _flush_handle: asyncio.TimerHandle | None
    _failure: str | None
    _closed: bool
    _executor: concurrent.futures.ThreadPoolExecutor
    #: fsyncs done so far (group commit makes this far fewer than durable writes).
    sync_count: int

    def _start_sync(self) -> None:
        """Start an fsync covering everything appended so far, unless one is in
        flight (`_sync_future`, which `close` waits for). It runs on the fsync
        thread, which hands the result back to the loop with one
        call_soon_threadsafe: no task, no wrapped future, one loop turn (a
        durable record cost 7 turns and ~0.35 ms of loop CPU)."""
        if self._sync_future is not None:
            return
        loop = asyncio.get_running_loop()
        target, retired, directory = self._sync_batch()
        done: asyncio.Future[None] = loop.create_future()
        self._sync_future = done

        def finished(job: concurrent.futures.Future[None]) -> None:  # on the fsync thread
            with contextlib.suppress(RuntimeError):  # the loop is gone: nobody waits
                loop.call_soon_threadsafe(self._sync_finished, job, target, done)

        self._executor.submit(sync_files, retired, directory, self._fd).add_done_callback(finished)

    def _sync_finished(
        self, job: concurrent.futures.Future[None], target: int, done: asyncio.Future[None]
    ) -> None:
        self._sync_future = None
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
        if self._closed:
            return
        if self._waiters:
            self._start_sync()  # durable records appended meanwhile: at once
        elif self._synced < self._appended and self._flush_handle is None:
            # Records appended while that fsync ran have waited long enough.
            self._start_sync()

    def _release_waiters(self) -> None:
        """Complete each waiter whose record is now durable (all of them, with
        the error, once the log has failed)."""
        still: list[tuple[int, asyncio.Future[None]]] = []
        for generation, waiter in self._waiters:
            if waiter.done():
                continue  # its caller went away
            if self._failure is not None:
                waiter.set_exception(AuditUnavailable(self._failure))
            elif generation <= self._synced:
                waiter.set_result(None)
            else:
                still.append((generation, waiter))
        self._waiters = still

    def _schedule_batch_sync(self) -> None:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            self._sync_inline()  # no event loop (start-up, tools): sync now
            return
        if self._flush_handle is not None or self._sync_future is not None:
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
