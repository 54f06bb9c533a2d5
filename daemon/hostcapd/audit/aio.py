"""The exec record's fdatasync started from the loop, with no Python thread:
Linux AIO's `IOCB_CMD_FDSYNC` (io_submit), which the kernel runs on a
workqueue, its completion signalled on an eventfd the loop watches.

A durable write's fsync was a job for a writer thread (`fsync.SyncThreads`):
the loop's `SimpleQueue.put` woke it, it took the GIL to start the
fdatasync and again to hand the end back with `call_soon_threadsafe`, and
each hand-over of the GIL was a futex wake and a context switch of the root
(bench/README.md, "the exec record's fsync without a Python thread"). Here
the loop submits the request (one syscall), the kernel's worker runs
`vfs_fsync` on the description it was given, and the completion's eventfd
wakes the loop, which reads the result (`io_getevents`): the writer then
settles its waiters and writes their gos on the loop (`GroupCommit`).

Each request names an open file description of its own (the kernel holds
a reference to it from the submit until the completion: no dup is needed,
and a rotation may close the writer's fd meanwhile), so a writeback error
is reported to each fsync in flight as before. A request's result is the
fdatasync's: a negative errno fails the log closed as a failed fsync did.

Refused (a kernel without AIO, a seccomp filter that lacks it, no room in
fs.aio-max-nr): `AioSync.open` returns None, logged once, and the writer
keeps its threads. No protection depends on this path: it is a speed path.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import errno
import logging
import os
from collections.abc import Callable

from hostcapd import linux

_log = logging.getLogger("hostcapd.audit")

#: Whether the refusal was logged already (once a process).
_refusal_logged = False


class AioSync:
    """An AIO context for `slots` fdatasyncs in flight at once, each slot one
    request at a time (the writer's description index). `ended(slot, res)` is
    called on the loop for each completion (`res` 0 or a negative errno)."""

    def __init__(self, ctx: int, efd: int, slots: int, ended: Callable[[int, int], None]) -> None:
        self._ctx = ctx
        self._efd = efd
        self._ended = ended
        self._iocbs = [linux.Iocb() for _ in range(slots)]
        self._pointers = [(ctypes.c_void_p * 1)(ctypes.addressof(iocb)) for iocb in self._iocbs]
        for slot, iocb in enumerate(self._iocbs):
            iocb.aio_data = slot
            iocb.aio_lio_opcode = linux.IOCB_CMD_FDSYNC
            iocb.aio_flags = linux.IOCB_FLAG_RESFD
            iocb.aio_resfd = efd
        self._events = (linux.IoEvent * slots)()
        self._slots = slots
        self._in_flight = 0
        #: False once the kernel refused a submit for good (not EAGAIN).
        self.usable = True
        #: The loop watching the eventfd (None until the first submit).
        self._loop: asyncio.AbstractEventLoop | None = None

    @classmethod
    def open(cls, slots: int, ended: Callable[[int, int], None]) -> AioSync | None:
        """A context, or None when this kernel or this process's filter
        refuses Linux AIO (logged once: the writer uses its threads)."""
        try:
            ctx = linux.io_setup(slots)
        except OSError as error:
            _refused(f"io_setup: {error.strerror}")
            return None
        try:
            efd = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
        except OSError:
            linux.io_destroy(ctx)
            raise
        return cls(ctx, efd, slots, ended)

    @property
    def in_flight(self) -> int:
        return self._in_flight

    def submit(self, slot: int, fd: int, loop: asyncio.AbstractEventLoop) -> bool:
        """Start an fdatasync of `fd` in `slot` (free), its end reported on
        `loop`. False when the kernel refused the request (the caller runs
        this fsync another way): EINVAL for a file without fsync, EAGAIN
        when the context is full, or an error of the submit itself."""
        if self._loop is not loop:
            if self._loop is not None and not self._loop.is_closed():
                self._loop.remove_reader(self._efd)
            loop.add_reader(self._efd, self._ready)
            self._loop = loop
        iocb = self._iocbs[slot]
        iocb.aio_fildes = fd
        try:
            taken = linux.io_submit(self._ctx, self._pointers[slot], 1)
        except OSError as error:
            if error.errno not in (errno.EAGAIN, errno.EINTR):
                self.usable = False
                _refused(f"io_submit: {error.strerror}")
            return False
        if taken != 1:
            return False
        self._in_flight += 1
        # The kernel queues the fdatasync on this CPU's worker: let it start
        # the writeback now rather than after the loop's next burst.
        os.sched_yield()
        return True

    def _ready(self) -> None:
        """The eventfd is readable: some request completed."""
        try:
            os.eventfd_read(self._efd)
        except BlockingIOError:
            return
        got = linux.io_getevents(self._ctx, self._events, self._slots)
        ended = [(int(ev.data), int(ev.res)) for ev in self._events[:got]]
        self._in_flight -= got
        for slot, res in ended:
            self._ended(slot, res)

    def close(self) -> None:
        """Stop watching and free the context (io_destroy waits for what is
        still in flight: the writer's close awaited every fsync before)."""
        if self._loop is not None and not self._loop.is_closed():
            self._loop.remove_reader(self._efd)
        self._loop = None
        with contextlib.suppress(OSError):
            linux.io_destroy(self._ctx)
        with contextlib.suppress(OSError):
            os.close(self._efd)


def _refused(why: str) -> None:
    global _refusal_logged
    if not _refusal_logged:
        _refusal_logged = True
        _log.warning("audit fsync: Linux AIO refused (%s); fsyncs run on threads", why)
