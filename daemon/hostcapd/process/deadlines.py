"""Spawns' wall-clock limits, fired at their time rather than up to 1 ms late.

asyncio's `call_later` waits in epoll, whose timeout is whole milliseconds
rounded up: a timer fires up to 1 ms after its time (0.5 ms on average), and
a timeout's kill latency counts all of it. Here one CLOCK_MONOTONIC timerfd
per event loop, armed with an absolute time for the earliest deadline, wakes
the loop at the deadline itself (the kernel's high-resolution timer). The
deadlines wait in a heap; a cancelled one is dropped when it comes first, or
all at once when they are most of the heap.

    handle = deadlines.call_later(0.4, callback, *args)   # in the running loop
    handle.cancel()
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import heapq
import itertools
import os
import time
import weakref
from collections.abc import Callable
from typing import Any

CLOCK_MONOTONIC = 1  # time.monotonic's clock on Linux
TFD_TIMER_ABSTIME = 1
TFD_NONBLOCK, TFD_CLOEXEC = os.O_NONBLOCK, os.O_CLOEXEC


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


class _Itimerspec(ctypes.Structure):
    _fields_ = [("it_interval", _Timespec), ("it_value", _Timespec)]


_libc = ctypes.CDLL(None, use_errno=True)


class Deadline:
    """One pending call; `cancel` makes it a no-op."""

    __slots__ = ("_args", "_callback", "cancelled")

    def __init__(self, callback: Callable[..., object], args: tuple[Any, ...]) -> None:
        self._callback, self._args = callback, args
        self.cancelled = False

    def cancel(self) -> None:
        if not self.cancelled:
            self.cancelled = True
            self._callback, self._args = _nothing, ()

    def _run(self) -> None:
        self.cancelled = True  # once
        self._callback(*self._args)


def _nothing() -> None:
    pass


class Deadlines:
    """The deadlines of one event loop, on one timerfd."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        fd = _libc.timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC)
        if fd < 0:
            err = ctypes.get_errno()
            raise OSError(err, f"timerfd_create: {os.strerror(err)}")
        self._fd = fd  # (no reference to the loop: it keys `_per_loop`)
        self._heap: list[tuple[float, int, Deadline]] = []
        self._order = itertools.count()
        self._armed = float("inf")
        loop.add_reader(fd, self._expired)
        weakref.finalize(self, os.close, fd)

    def call_at(self, when: float, callback: Callable[..., object], *args: Any) -> Deadline:
        """Call `callback(*args)` at time.monotonic() == `when`."""
        deadline = Deadline(callback, args)
        heapq.heappush(self._heap, (when, next(self._order), deadline))
        if when < self._armed:
            self._arm(when)
        elif len(self._heap) > 64:
            self._prune()
        return deadline

    def _arm(self, when: float) -> None:
        spec = _Itimerspec()
        if when != float("inf"):
            # 0 would disarm it: a time already past is 1 ns.
            ns = max(int(when * 1e9), 1)
            spec.it_value.tv_sec, spec.it_value.tv_nsec = divmod(ns, 1_000_000_000)
        if _libc.timerfd_settime(self._fd, TFD_TIMER_ABSTIME, ctypes.byref(spec), None) < 0:
            err = ctypes.get_errno()
            raise OSError(err, f"timerfd_settime: {os.strerror(err)}")
        self._armed = when

    def _expired(self) -> None:
        with contextlib.suppress(BlockingIOError):  # re-armed meanwhile
            os.read(self._fd, 8)
        now = time.monotonic()
        heap = self._heap
        due: list[Deadline] = []
        while heap and (heap[0][0] <= now or heap[0][2].cancelled):
            deadline = heapq.heappop(heap)[2]
            if not deadline.cancelled:
                due.append(deadline)
        self._armed = float("inf")
        if heap:
            self._arm(heap[0][0])
        for deadline in due:  # in this turn: that is the point
            try:
                deadline._run()
            except Exception as error:
                asyncio.get_running_loop().call_exception_handler(
                    {"message": "a deadline's callback failed", "exception": error}
                )

    def _prune(self) -> None:
        """Drop cancelled deadlines once they are more than half of the heap."""
        live = [entry for entry in self._heap if not entry[2].cancelled]
        if len(live) * 2 < len(self._heap):
            heapq.heapify(live)
            self._heap = live


_per_loop: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Deadlines] = (
    weakref.WeakKeyDictionary()
)


def call_later(
    delay: float,
    callback: Callable[..., object],
    *args: Any,
    loop: asyncio.AbstractEventLoop | None = None,
) -> Deadline:
    """`callback(*args)` in `delay` seconds, in the running loop (`loop`,
    if the caller has it: asking asyncio is a getpid on Python 3.11)."""
    loop = loop or asyncio.get_running_loop()
    deadlines = _per_loop.get(loop)
    if deadlines is None:
        deadlines = _per_loop[loop] = Deadlines(loop)
    return deadlines.call_at(time.monotonic() + delay, callback, *args)
