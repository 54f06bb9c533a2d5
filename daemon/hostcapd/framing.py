"""The framing every channel of the daemon shares: a connected AF_UNIX
socketpair, fds over SCM_RIGHTS, and a sealed memfd for a payload too large
for one datagram.

The channels are the front-end channel (`hostcapd.bridge.channel`: a
front-end at one end may be hostile), the spawner's (`hostcapd.spawner.channel`)
and the fs worker's (`hostcapd.fs.protocol`). Each keeps its own message set
and codec (msgspec structs); what travels, and how an fd or a memfd is
checked before anything is read from it, is here, once.

A memfd a sender makes is sealed (no write, grow or shrink, no more seals)
before it is sent, so what the receiver checked is what it reads. The
receiver takes a memfd only when `fstat` says it is a regular file of exactly
the announced size, within the receiver's limit, and `F_GET_SEALS` says it
can no longer change: a pipe, a socket, an unsealed or an oversized (sparse
or not) fd is refused before a byte of it is read.
"""

from __future__ import annotations

import array
import contextlib
import fcntl
import os
import socket
import stat
from collections.abc import Iterable, Sequence
from typing import Any

_FD_SIZE = array.array("i").itemsize
#: The seals a memfd carries once its sender wrote it.
SEALS = fcntl.F_SEAL_SEAL | fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_WRITE
_SO_SNDBUFFORCE = 32
_SO_RCVBUFFORCE = 33


class FramingError(Exception):
    """A frame or an fd that is not what its channel carries: a truncated
    datagram, a memfd that is not a sealed memfd of its size, fds where none
    belong. The message says which."""


def socketpair(kind: int, buffer: int) -> tuple[socket.socket, socket.socket]:
    """A close-on-exec AF_UNIX pair of `kind` with `buffer`-byte socket
    buffers (forced where the caller is privileged, as root is)."""
    a, b = socket.socketpair(socket.AF_UNIX, kind | socket.SOCK_CLOEXEC)
    for s in (a, b):
        for opt, force in (
            (socket.SO_SNDBUF, _SO_SNDBUFFORCE),
            (socket.SO_RCVBUF, _SO_RCVBUFFORCE),
        ):
            try:
                s.setsockopt(socket.SOL_SOCKET, force, buffer)
            except OSError:
                s.setsockopt(socket.SOL_SOCKET, opt, buffer)
    return a, b


def rights(fds: Sequence[int]) -> list[tuple[int, int, bytes]]:
    """The ancillary data of a sendmsg passing `fds`."""
    if not fds:
        return []
    return [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds).tobytes())]


def ancillary_space(max_fds: int) -> int:
    """The ancillary buffer size of a recvmsg taking up to `max_fds` fds."""
    return socket.CMSG_SPACE(max_fds * _FD_SIZE)


def received_fds(ancdata: Iterable[tuple[int, int, bytes]]) -> list[int]:
    """The fds a recvmsg received (the caller owns them: it closes each)."""
    fds: list[int] = []
    for level, kind, data in ancdata:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.extend(array.array("i", data[: len(data) - len(data) % _FD_SIZE]))
    return fds


def close_all(fds: Iterable[int]) -> None:
    for fd in fds:
        with contextlib.suppress(OSError):
            os.close(fd)


def truncated(flags: int) -> bool:
    """Whether a recvmsg lost part of a datagram or of its fds."""
    return bool(flags & _TRUNCATED)


#: recvmsg's flags as plain ints: the socket module's are an IntFlag, whose
#: `|` and `&` make an enum member through enum.py's Python (more than the
#: whole test costs). A side that checks one of the two tests it alone.
MSG_TRUNC = int(socket.MSG_TRUNC)
MSG_CTRUNC = int(socket.MSG_CTRUNC)
_TRUNCATED = MSG_TRUNC | MSG_CTRUNC


# --- memfds -------------------------------------------------------------------


def sealed_memfd(parts: Iterable[bytes | bytearray | memoryview], name: str) -> int:
    """A memfd holding `parts` one after the other, sealed: the caller sends
    it and closes it."""
    fd = os.memfd_create(name, os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    try:
        for part in parts:
            view = memoryview(part)
            while view:
                view = view[os.write(fd, view) :]
        fcntl.fcntl(fd, fcntl.F_ADD_SEALS, SEALS)
    except BaseException:
        os.close(fd)
        raise
    return fd


def check_memfd(fd: int, size: int, limit: int) -> None:
    """Raise FramingError unless `fd` is a sealed memfd of exactly `size`
    bytes, `size` at most `limit`. Reads nothing of it."""
    if size > limit:
        raise FramingError(f"a memfd message announces {size} bytes, above its limit of {limit}")
    try:
        st = os.fstat(fd)
        seals = fcntl.fcntl(fd, fcntl.F_GET_SEALS) if stat.S_ISREG(st.st_mode) else 0
    except OSError as error:
        raise FramingError(f"a memfd message whose fd is not a sealed memfd: {error}") from None
    if not stat.S_ISREG(st.st_mode) or seals & SEALS != SEALS:
        what = stat.filemode(st.st_mode)[0]
        raise FramingError(
            f"a memfd message whose fd is not a sealed memfd (type {what!r}, seals {seals:#x})"
        )
    if st.st_size != size:
        raise FramingError(
            f"a memfd message of {st.st_size} bytes announced as {size} (a sealed memfd of "
            "another size)"
        )


def read_exact(fd: int, size: int, offset: int) -> bytes:
    """`size` bytes of a checked memfd from `offset`; FramingError if fewer
    are there, or the read fails."""
    try:
        data = os.pread(fd, size, offset)
    except OSError as error:
        raise FramingError(f"a memfd message that cannot be read: {error}") from None
    if len(data) != size:
        raise FramingError("a memfd message shorter than it says")
    return data


def read_memfd(fd: int, size: int, limit: int) -> bytes:
    """The whole of a memfd message, checked (`check_memfd`) before it is read."""
    check_memfd(fd, size, limit)
    return read_exact(fd, size, 0)


def sendmsg(sock: socket.socket, buffers: Sequence[Any], fds: Sequence[int] = ()) -> int:
    """One datagram (or stream write) of `buffers`, passing `fds`."""
    return sock.sendmsg(buffers, rights(fds))
