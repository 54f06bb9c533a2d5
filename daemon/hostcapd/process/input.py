"""A spawn's open input (issue 31): the write end of its stdin pipe, or a
copy of its terminal's master, written by `WriteStdin`.

    spawn.input = SpawnInput(fd, tty=False)
    written = await spawn.input.write(data, close=False)   # Refusal if it cannot

A write returns once its bytes are in the pipe (or the terminal): it waits
for room, so a command that does not read slows its writer, never grows the
daemon's memory. One write at a time; a few more may wait their turn (each
holds its payload in the tenant's in-flight budget), more are refused. On a
terminal, `close` types its end-of-file character instead of closing the
master, which would hang the terminal up.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import termios

from hostcapd.errors import Refusal

#: The largest write to a pipe at once.
WRITE_CHUNK = 1024 * 1024
#: Writes that may wait behind the one in progress (each at most 64 KiB).
MAX_WAITING = 4
_VEOF_DEFAULT = b"\x04"


class SpawnInput:
    """The input of one spawn, owned by it; closed when it ends."""

    def __init__(self, fd: int, *, tty: bool) -> None:
        self._fd = fd
        self.tty = tty
        #: Writes that wrote (all of their bytes or some), and their bytes.
        self.writes = 0
        self.bytes = 0
        #: Closed by the client (EOF given): further writes are refused.
        self.closed = False
        #: process.input records written for it (each write's index).
        self.audited = 0
        self._lock = asyncio.Lock()
        self._waiting = 0
        self._room: asyncio.Future[None] | None = None
        self._first: asyncio.Task[None] | None = None
        self._ended = False

    @property
    def open(self) -> bool:
        return not self.closed and not self._ended

    def check(self) -> None:
        """Refuse a write now if none can be made."""
        if self._ended:
            raise Refusal("SPAWN_ENDED", "the spawn has ended")
        if self.closed:
            raise Refusal("STDIN_NOT_OPEN", "the spawn's input was closed")
        if self._waiting > MAX_WAITING:
            raise Refusal(
                "QUOTA_EXCEEDED",
                f"{self._waiting} writes already wait for this spawn's input: retry once they are in",
            )

    async def write(self, data: bytes, close: bool) -> int:
        """Write all of `data` (waiting for room), then EOF if `close`."""
        self.check()
        self._waiting += 1
        try:
            if self._first is not None and not self._first.done():
                # The request's stdin goes first, whoever gets the lock first.
                await asyncio.wait([self._first])
            async with self._lock:
                self.check()
                written = await self._write_all(data)
                if close:
                    await self._close_input()
                return written
        finally:
            self._waiting -= 1

    def feed(self, data: bytes) -> asyncio.Task[None]:
        """The request's own `stdin`, before any WriteStdin (not counted)."""
        self._first = asyncio.ensure_future(self._feed(data))
        return self._first

    async def _feed(self, data: bytes) -> None:
        async with self._lock:
            with contextlib.suppress(Refusal):
                await self._write_all(data, count=False)

    async def _write_all(self, data: bytes, count: bool = True) -> int:
        view, written = memoryview(data), 0
        counted = not count
        try:
            while view:
                try:
                    n = os.write(self._fd, view)
                except BlockingIOError:
                    await self._wait_room()
                    continue
                except OSError:
                    # EPIPE: nobody reads it any more; EIO: the terminal's
                    # other side is closed. Either way the command is ending.
                    raise Refusal(
                        "SPAWN_ENDED" if self._ended or self.tty else "STDIN_NOT_OPEN",
                        "the command no longer reads its input",
                    ) from None
                view, written = view[n:], written + n
                if not counted:
                    self.writes, counted = self.writes + 1, True
                if count:
                    self.bytes += n
        finally:
            view.release()
        return written

    async def _wait_room(self) -> None:
        if self._ended:
            raise Refusal("SPAWN_ENDED", "the spawn has ended")
        loop = asyncio.get_running_loop()
        room = self._room = loop.create_future()
        loop.add_writer(self._fd, _wake, room)
        try:
            await room
        finally:
            self._room = None
            with contextlib.suppress(ValueError, OSError):
                loop.remove_writer(self._fd)

    async def _close_input(self) -> None:
        self.closed = True
        if self.tty:
            try:
                eof = bytes([termios.tcgetattr(self._fd)[6][termios.VEOF]])
            except (termios.error, OSError, IndexError, TypeError):
                eof = _VEOF_DEFAULT
            with contextlib.suppress(Refusal):
                await self._write_all(eof, count=False)  # the close, not data
            return
        fd, self._fd = self._fd, -1
        os.close(fd)

    @property
    def fd(self) -> int:
        """The master's copy (a terminal's size is set on it); -1 once closed."""
        return self._fd

    def end(self) -> None:
        """The spawn ended: close what is open, wake a waiting write."""
        self._ended = True
        if self._room is not None and not self._room.done():
            self._room.set_exception(Refusal("SPAWN_ENDED", "the spawn has ended"))
        if self._fd >= 0:
            fd, self._fd = self._fd, -1
            with contextlib.suppress(ValueError, OSError):
                asyncio.get_running_loop().remove_writer(fd)
            with contextlib.suppress(OSError):
                os.close(fd)


def _wake(room: asyncio.Future[None]) -> None:
    if not room.done():
        room.set_result(None)


async def feed_stdin(fd: int, data: bytes) -> None:
    """Write all of `data` to a spawn's stdin pipe (a Run's whole input),
    then close it; a reader gone early ends it quietly."""
    loop = asyncio.get_running_loop()
    view = memoryview(data)
    try:
        while view:
            try:
                n = os.write(fd, view[:WRITE_CHUNK])
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
