"""Framing of the daemon <-> spawner channel.

One message is one SOCK_SEQPACKET datagram: its encoding (`messages`: a
msgspec struct's to_wire(), read back with to_spawner / from_spawner), with
any fds attached as SCM_RIGHTS (`hostcapd.framing`, the framing every
channel of the daemon shares). Both ends are this daemon's own code; a
message is still checked on receipt, and one that is not one of ours is
refused (messages.MalformedMessage).
"""

from __future__ import annotations

import mmap
import socket
import threading
from collections.abc import Sequence

from hostcapd import framing

#: Largest message: a spawn order with argv + env near the kernel's ARG_MAX.
MAX_MESSAGE = 4 * 1024 * 1024
MAX_FDS = 16


def socketpair() -> tuple[socket.socket, socket.socket]:
    return framing.socketpair(socket.SOCK_SEQPACKET, MAX_MESSAGE * 2)


def send(sock: socket.socket, message: bytes, fds: Sequence[int] = ()) -> None:
    if len(message) > MAX_MESSAGE:
        raise ValueError("message too large for the spawner channel")
    framing.sendmsg(sock, [message], fds)


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


def receive(sock: socket.socket) -> tuple[bytes, list[int]] | None:
    """One message's bytes and its fds (the caller owns them), or None at EOF."""
    buffer = _buffer()
    size, ancdata, flags, _ = sock.recvmsg_into(
        [buffer], framing.ancillary_space(MAX_FDS), socket.MSG_CMSG_CLOEXEC
    )
    fds = framing.received_fds(ancdata)
    if not size:
        framing.close_all(fds)
        return None
    if framing.truncated(flags):
        framing.close_all(fds)
        raise ValueError("truncated message on the spawner channel")
    message = buffer[:size]
    if size > _KEEP_BACKED:
        buffer.madvise(mmap.MADV_DONTNEED)  # a large order's pages, not kept resident
    return message, fds
