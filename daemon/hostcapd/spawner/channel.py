"""Framing of the front-end <-> spawner channel.

One message is one SOCK_SEQPACKET datagram: a marshal-encoded dict (a
`messages` class's to_wire(), read back with its from_wire()), with any fds
attached as SCM_RIGHTS. marshal is used because both ends are this
daemon's own code (trusted), it round-trips bytes/int/str/list/dict exactly,
and it is several times faster than JSON or pickle on the spawn path.
"""

from __future__ import annotations

import array
import marshal
import mmap
import os
import socket
import threading
from typing import Any

#: Largest message: a spawn order with argv + env near the kernel's ARG_MAX.
MAX_MESSAGE = 4 * 1024 * 1024
MAX_FDS = 16
_FD_SIZE = array.array("i").itemsize

Message = dict[str, Any]


def socketpair() -> tuple[socket.socket, socket.socket]:
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    for s in (a, b):
        for opt, force in ((socket.SO_SNDBUF, 32), (socket.SO_RCVBUF, 33)):  # *BUFFORCE
            try:
                s.setsockopt(socket.SOL_SOCKET, force, MAX_MESSAGE * 2)
            except OSError:
                s.setsockopt(socket.SOL_SOCKET, opt, MAX_MESSAGE * 2)
    return a, b


def send(sock: socket.socket, message: Message, fds: list[int] | tuple[int, ...] = ()) -> None:
    payload = marshal.dumps(message)
    if len(payload) > MAX_MESSAGE:
        raise ValueError("message too large for the spawner channel")
    ancillary = (
        [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds).tobytes())] if fds else []
    )
    sock.sendmsg([payload], ancillary)


_local = threading.local()
#: A message larger than this gives its pages back once read.
_KEEP_BACKED = 256 * 1024


def _buffer() -> mmap.mmap:
    """This thread's receive buffer: recvmsg(MAX_MESSAGE) would allocate (and
    map and unmap) 4 MiB per message, which cost 4x the whole round trip
    of a small report. An anonymous mapping, so only the pages the kernel
    writes are backed (a bytearray would zero, and so back, all 4 MiB)."""
    buffer: mmap.mmap | None = getattr(_local, "buffer", None)
    if buffer is None:
        buffer = _local.buffer = mmap.mmap(-1, MAX_MESSAGE)
    return buffer


def receive(sock: socket.socket) -> tuple[Message, list[int]] | None:
    """One message and its fds (the caller owns them), or None at EOF."""
    buffer = _buffer()
    size, ancdata, flags, _ = sock.recvmsg_into(
        [buffer], socket.CMSG_SPACE(MAX_FDS * _FD_SIZE), socket.MSG_CMSG_CLOEXEC
    )
    data = memoryview(buffer)[:size]
    fds: list[int] = []
    for level, kind, payload in ancdata:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            usable = len(payload) - len(payload) % _FD_SIZE
            fds.extend(array.array("i", payload[:usable]))
    if not data:
        for fd in fds:
            os.close(fd)
        return None
    if flags & (socket.MSG_TRUNC | socket.MSG_CTRUNC):
        for fd in fds:
            os.close(fd)
        raise ValueError("truncated message on the spawner channel")
    message = marshal.loads(data)
    data.release()
    if size > _KEEP_BACKED:
        buffer.madvise(mmap.MADV_DONTNEED)  # a large order's pages, not kept resident
    if not isinstance(message, dict):
        raise ValueError("malformed message on the spawner channel")
    return message, fds
