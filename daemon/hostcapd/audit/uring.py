"""The exec record's fdatasync started from the loop, with no Python thread:
an io_uring `IORING_OP_FSYNC` (datasync), which the kernel runs on one of
the ring's io-wq workers (threads of this process, not pinned to the
loop's CPU, holding no GIL), its completion signalled on an eventfd the
loop watches.

A durable write's fsync was a job for a writer thread (`fsync.SyncThreads`):
the loop's `SimpleQueue.put` woke it, it took the GIL to start the
fdatasync and again to hand the end back with `call_soon_threadsafe`, and
each hand-over of the GIL was a futex wake and a context switch of the
root (bench/README.md, "the exec record's fsync without a Python thread").
Here the loop writes one request into the ring and enters it (one
syscall); the completion's eventfd wakes the loop, which reads the result
from the completion ring (no syscall) and then settles its waiters and
writes their gos (`GroupCommit`). Linux AIO's fdatasync was tried first
and not kept: the kernel queues it on the submitting CPU's worker, so it
waited for the loop's CPU. The go cannot be a request linked to the
fsync: on 6.18 a failed fsync does not break the link (the go was
written after an ENOSPC), so the loop writes it.

Each request names an open file description of its own (the kernel holds
a reference to the file from the submit to the completion: no dup is
needed, and a rotation may close the writer's fd meanwhile), so a
writeback error is reported to each fsync in flight as before. A
request's result is the fdatasync's: a negative errno fails the log closed
as a failed fsync did.

Refused (no io_uring in this kernel, `kernel.io_uring_disabled`, a seccomp
filter without it): `UringSync.open` returns None, logged once, and the
writer keeps its threads. No protection depends on this path: it is a
speed path. x86_64 only (its stores are not reordered with each other, so
the request is in the ring before the tail that publishes it).
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import errno
import logging
import mmap
import os
import struct
from collections.abc import Callable

from hostcapd import linux

_log = logging.getLogger("hostcapd.audit")

#: Whether the refusal was logged already (once a process).
_refusal_logged = False

#: The ring's size: the writer has two fsyncs in flight at most.
_ENTRIES = 4
#: struct io_uring_sqe (64 bytes): opcode, flags, ioprio, fd, off, addr,
#: len, fsync_flags, user_data; the rest zero.
_SQE = struct.Struct("<BBHiQQIIQ24x")
#: struct io_uring_cqe (16 bytes): user_data, res, flags.
_CQE = struct.Struct("<QiI")


class UringSync:
    """A ring for `slots` fdatasyncs in flight at once, each slot one request
    at a time (the writer's description index). `ended(slot, res)` is called
    on the loop for each completion (`res` 0 or a negative errno)."""

    def __init__(self, ring_fd: int, params: linux.UringParams, efd: int) -> None:
        self._fd = ring_fd
        self._efd = efd
        sq, cq = params.sq_off, params.cq_off
        size = max(sq.array + params.sq_entries * 4, cq.cqes + params.cq_entries * _CQE.size)
        if not params.features & linux.IORING_FEAT_SINGLE_MMAP:
            raise OSError(errno.ENOSYS, "io_uring without a single mmap")
        self._ring = mmap.mmap(ring_fd, size, offset=linux.IORING_OFF_SQ_RING)
        self._sqes = mmap.mmap(ring_fd, params.sq_entries * _SQE.size, offset=linux.IORING_OFF_SQES)
        self._sq_head = ctypes.c_uint32.from_buffer(self._ring, sq.head)
        self._sq_tail = ctypes.c_uint32.from_buffer(self._ring, sq.tail)
        self._sq_mask = ctypes.c_uint32.from_buffer(self._ring, sq.ring_mask).value
        self._sq_array = (ctypes.c_uint32 * params.sq_entries).from_buffer(self._ring, sq.array)
        self._cq_head = ctypes.c_uint32.from_buffer(self._ring, cq.head)
        self._cq_tail = ctypes.c_uint32.from_buffer(self._ring, cq.tail)
        self._cq_mask = ctypes.c_uint32.from_buffer(self._ring, cq.ring_mask).value
        self._cqes = cq.cqes
        self._ended: Callable[[int, int], None] | None = None
        #: False once the kernel refused a request for good.
        self.usable = True
        #: The loop watching the eventfd (None until the first submit).
        self._loop: asyncio.AbstractEventLoop | None = None

    @classmethod
    def open(cls, ended: Callable[[int, int], None]) -> UringSync | None:
        """A ring, or None when this kernel or this process's filter refuses
        io_uring (logged once: the writer uses its threads)."""
        params = linux.UringParams()
        try:
            ring_fd = linux.io_uring_setup(_ENTRIES, params)
        except OSError as error:
            _refused(f"io_uring_setup: {error.strerror}")
            return None
        efd = -1
        try:
            efd = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
            linux.io_uring_register_eventfd(ring_fd, efd)
            ring = cls(ring_fd, params, efd)
        except OSError as error:
            for fd in (ring_fd, efd):
                if fd >= 0:
                    os.close(fd)
            _refused(f"io_uring set-up: {error.strerror}")
            return None
        ring._ended = ended
        return ring

    def submit(self, slot: int, fd: int, loop: asyncio.AbstractEventLoop) -> bool:
        """Start an fdatasync of `fd` in `slot` (free), its end reported on
        `loop`. False when the kernel took no request (the caller runs this
        fsync another way)."""
        if self._loop is not loop:
            if self._loop is not None and not self._loop.is_closed():
                self._loop.remove_reader(self._efd)
            loop.add_reader(self._efd, self._ready)
            self._loop = loop
        tail = self._sq_tail.value
        index = tail & self._sq_mask
        _SQE.pack_into(
            self._sqes,
            index * _SQE.size,
            linux.IORING_OP_FSYNC,
            0,
            0,
            fd,
            0,
            0,
            0,
            linux.IORING_FSYNC_DATASYNC,
            slot,
        )
        self._sq_array[index] = index
        self._sq_tail.value = (tail + 1) & 0xFFFFFFFF
        try:
            taken = linux.io_uring_enter(self._fd, 1)
        except OSError as error:
            taken = 0
            if error.errno not in (errno.EAGAIN, errno.EBUSY, errno.EINTR):
                self.usable = False
                _refused(f"io_uring_enter: {error.strerror}")
        if taken == 1:
            return True
        if self._sq_head.value == tail:
            self._sq_tail.value = tail  # not taken: withdrawn
            return False
        return True  # taken after all (the kernel's head moved past it)

    def _ready(self) -> None:
        """The eventfd is readable: some request completed."""
        with contextlib.suppress(BlockingIOError):
            os.eventfd_read(self._efd)
        head, tail = self._cq_head.value, self._cq_tail.value
        ended: list[tuple[int, int]] = []
        while head != tail:
            slot, result, _ = _CQE.unpack_from(self._ring, self._cqes + (head & self._cq_mask) * 16)
            ended.append((slot, result))
            head = (head + 1) & 0xFFFFFFFF
        self._cq_head.value = head
        if self._ended is not None:
            for slot, result in ended:
                self._ended(slot, result)

    def close(self) -> None:
        """Stop watching and release the ring (the writer's close awaited every
        fsync before)."""
        if self._loop is not None and not self._loop.is_closed():
            self._loop.remove_reader(self._efd)
        self._loop = None
        # The views into the ring go first: a mapping with exports cannot close.
        del self._sq_head, self._sq_tail, self._sq_array, self._cq_head, self._cq_tail
        self._ring.close()
        self._sqes.close()
        for fd in (self._fd, self._efd):
            with contextlib.suppress(OSError):
                os.close(fd)


def _refused(why: str) -> None:
    global _refusal_logged
    if not _refusal_logged:
        _refusal_logged = True
        _log.warning("audit fsync: io_uring refused (%s); fsyncs run on threads", why)
