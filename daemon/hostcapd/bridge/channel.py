"""Framing of the front-end <-> root channel, and the asyncio link on it.

One message is one SOCK_SEQPACKET datagram:

    u32 header length | u64 memfd payload size | header | inline payload

The header is the MessagePack of one `hostcapd.bridge.messages` struct,
validated by msgspec on receipt (strict types, no field too many); the payload is
opaque bytes (a request's stdin or file content, a reply's serialized
message) that nobody parses on the way. A payload above `INLINE_PAYLOAD`
travels in a memfd passed with SCM_RIGHTS instead, so a 64 MiB write is
never one datagram. Nothing else may carry an fd: a datagram with any fd but
its payload's is refused. Unlike the spawner's channel (marshal, both ends
trusted), this one has a front-end at one end that may be hostile; msgspec's
MessagePack decoder is safe on any input.

    link = Link(sock, on_message, on_closed)   # reads on the running loop
    link.send(model, payload)                  # queued if the socket is full
    link.close()
"""

from __future__ import annotations

import array
import asyncio
import contextlib
import os
import socket
import struct
from collections import deque
from collections.abc import Callable
from typing import Any

import msgspec

#: Messages (header and payload) up to this size travel in the datagram: a
#: whole output event (a 1 MiB read of a spawn's pipe, with its framing)
#: among them, so a stream never pays a memfd per event.
INLINE_PAYLOAD = 1024 * 1024 + 64 * 1024
#: Largest message in a memfd: above a request's gRPC ceiling (80 MiB) and a
#: Run result with both streams at their largest.
MAX_PAYLOAD = 1024 * 1024 * 1024
#: The socket buffers, forced by the root side when it makes the pair.
BUFFER = 8 * 1024 * 1024
_PREFIX = struct.Struct("=IQ")
_DATAGRAM = _PREFIX.size + INLINE_PAYLOAD
_FD_SIZE = array.array("i").itemsize
#: Bytes queued for a peer that does not read, above which the link is broken.
MAX_QUEUED = 512 * 1024 * 1024


class ChannelError(Exception):
    """A datagram that is not one of ours (truncated, unknown, ill-typed, an
    fd it should not carry). The message says which."""


def socketpair() -> tuple[socket.socket, socket.socket]:
    """The pair, with buffers large enough for a whole inline datagram (root
    forces them; an unprivileged end could not)."""
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET | socket.SOCK_CLOEXEC)
    for s in (a, b):
        for opt, force in ((socket.SO_SNDBUF, 32), (socket.SO_RCVBUF, 33)):  # *BUFFORCE
            try:
                s.setsockopt(socket.SOL_SOCKET, force, BUFFER)
            except OSError:
                s.setsockopt(socket.SOL_SOCKET, opt, BUFFER)
    return a, b


_ENCODER = msgspec.msgpack.Encoder()
#: A payload: its bytes, or its pieces in order (gathered, never joined).
Payload = bytes | bytearray | memoryview | list[bytes | bytearray | memoryview]


def encode(message: msgspec.Struct, payload: Payload = b"") -> tuple[list[Any], list[int]]:
    """The datagram's buffers and fds (a memfd the caller closes once sent):
    a message above INLINE_PAYLOAD travels whole, header and payload, in a
    memfd, and the datagram is its prefix alone. A payload in pieces is
    gathered by sendmsg or written piece by piece: never joined."""
    header = _ENCODER.encode(message)
    pieces = payload if isinstance(payload, list) else [payload]
    size = len(header) + sum(len(p) for p in pieces)
    if size <= INLINE_PAYLOAD:
        return [_PREFIX.pack(len(header), 0), header, *pieces], []
    if size > MAX_PAYLOAD:
        raise ChannelError(f"a {type(message).__name__} of {size} bytes is too large")
    fd = os.memfd_create("hostcap-message", os.MFD_CLOEXEC)
    try:
        for part in (header, *pieces):
            view = memoryview(part)
            while view:
                view = view[os.write(fd, view) :]
    except BaseException:
        os.close(fd)
        raise
    return [_PREFIX.pack(len(header), size)], [fd]


def decode(
    data: memoryview, fds: list[int], decoder: msgspec.msgpack.Decoder[Any]
) -> tuple[Any, bytes]:
    """One datagram to its validated message and payload; raises ChannelError.
    Closes every fd it was given."""
    try:
        if len(data) < _PREFIX.size:
            raise ChannelError("a datagram shorter than its prefix")
        header_len, memfd_size = _PREFIX.unpack_from(data)
        if memfd_size:
            if len(fds) != 1 or len(data) != _PREFIX.size or memfd_size > MAX_PAYLOAD:
                raise ChannelError("a memfd message without exactly its one fd")
            # The header (refused before the payload is read), then the
            # payload into its own bytes: read once, not read whole and
            # then sliced into a copy.
            if header_len > memfd_size:
                raise ChannelError("a header longer than its message")
            header = os.pread(fds[0], header_len, 0)
            if len(header) != header_len:
                raise ChannelError("a memfd message shorter than its prefix says")
            message = _header(header, decoder)
            payload = os.pread(fds[0], memfd_size - header_len, header_len)
            if len(payload) != memfd_size - header_len:
                raise ChannelError("a memfd message shorter than its prefix says")
            return message, payload
        if fds:
            raise ChannelError("a datagram carried an fd it has no use for")
        start = _PREFIX.size
        end = start + header_len
        if end > len(data):
            raise ChannelError("a header longer than its message")
        return _header(data[start:end], decoder), bytes(data[end:])
    finally:
        for fd in fds:
            os.close(fd)


def _header(data: bytes | memoryview, decoder: msgspec.msgpack.Decoder[Any]) -> Any:
    try:
        return decoder.decode(data)
    except (msgspec.ValidationError, msgspec.DecodeError) as error:
        raise ChannelError(f"not a valid message: {error}") from None


class Link:
    """Both ends' view of the channel, on the running event loop: each
    datagram read is decoded and given to `on_message(message, payload)`;
    a malformed one to `on_error(ChannelError)` (the link stays open: the
    owner decides); EOF or a broken socket once to `on_closed()`."""

    def __init__(
        self,
        sock: socket.socket,
        decoder: msgspec.msgpack.Decoder[Any],
        on_message: Callable[[Any, bytes], None],
        on_error: Callable[[ChannelError], None],
        on_closed: Callable[[], None],
    ) -> None:
        sock.setblocking(False)
        self.sock = sock
        self._decoder = decoder
        self._on_message = on_message
        self._on_error = on_error
        self._on_closed = on_closed
        self._loop = asyncio.get_running_loop()
        self._buffer = bytearray(_DATAGRAM)
        self._queue: deque[tuple[list[Any], list[int], int]] = deque()
        self._queued = 0
        self.closed = False
        self._loop.add_reader(sock.fileno(), self._readable)

    # --- sending ------------------------------------------------------------

    def send(self, message: msgspec.Struct, payload: Payload = b"") -> None:
        """Send now, or queue until the socket drains; never blocks. Raises
        ChannelError for a message that cannot be framed."""
        if self.closed:
            return
        buffers, fds = encode(message, payload)
        size = sum(len(b) for b in buffers)
        if not self._queue and self._try(buffers, fds):
            return
        self._queue.append((buffers, fds, size))
        self._queued += size
        if self._queued > MAX_QUEUED:
            self._broken()
            return
        if len(self._queue) == 1:
            self._loop.add_writer(self.sock.fileno(), self._writable)

    def _try(self, buffers: list[Any], fds: list[int]) -> bool:
        ancillary = (
            [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds).tobytes())] if fds else []
        )
        try:
            self.sock.sendmsg(buffers, ancillary)
        except BlockingIOError:
            return False
        except OSError:
            self._broken()
            return True
        for fd in fds:
            os.close(fd)
        return True

    def _writable(self) -> None:
        while self._queue:
            buffers, fds, size = self._queue[0]
            if not self._try(buffers, fds):
                return
            if self.closed:
                return
            self._queue.popleft()
            self._queued -= size
        self._loop.remove_writer(self.sock.fileno())

    # --- receiving -----------------------------------------------------------

    def _readable(self) -> None:
        for _ in range(64):  # then let the loop run others
            if self.closed:
                return
            try:
                size, ancdata, flags, _ = self.sock.recvmsg_into(
                    [self._buffer], socket.CMSG_SPACE(4 * _FD_SIZE), socket.MSG_CMSG_CLOEXEC
                )
            except BlockingIOError:
                return
            except OSError:
                self._broken()
                return
            fds: list[int] = []
            for level, kind, data in ancdata:
                if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                    fds.extend(array.array("i", data[: len(data) - len(data) % _FD_SIZE]))
            if size == 0 and not fds:
                self._broken()
                return
            try:
                if flags & (socket.MSG_TRUNC | socket.MSG_CTRUNC):
                    for fd in fds:
                        os.close(fd)
                    raise ChannelError("a truncated datagram")
                message, payload = decode(memoryview(self._buffer)[:size], fds, self._decoder)
            except ChannelError as error:
                self._on_error(error)
                continue
            self._on_message(message, payload)

    # --- closing -------------------------------------------------------------

    def _broken(self) -> None:
        if self.closed:
            return
        self.close()
        self._on_closed()

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        with contextlib.suppress(ValueError, OSError):
            self._loop.remove_reader(self.sock.fileno())
            self._loop.remove_writer(self.sock.fileno())
        for _, fds, _ in self._queue:
            for fd in fds:
                os.close(fd)
        self._queue.clear()
        self.sock.close()
