"""Framing of the front-end <-> root channel, and the asyncio link on it.

One message is one SOCK_SEQPACKET datagram:

    u32 header length | u64 memfd payload size | header | inline payload

The header is the MessagePack of one `hostcapd.bridge.messages` struct,
validated by msgspec on receipt (strict types, no field too many); the payload is
opaque bytes (a request's stdin or file content, a reply's serialized
message) that nobody parses on the way. A payload above `INLINE_PAYLOAD`
travels in a sealed memfd passed with SCM_RIGHTS instead (`hostcapd.framing`),
so a 64 MiB write is never one datagram. Nothing else may carry an fd: a
datagram with any fd but its payload's is refused. This channel has a
front-end at one end that may be hostile; msgspec's MessagePack decoder is
safe on any input, and a memfd is checked before it is read: a sealed memfd
of exactly the announced size, within the receiver's limit (for the root
side, the tenant's max_receive), or the message is refused unread. The
receiver may also refuse to read a payload it has no budget for (`admit`):
the message is then given without its payload.

    link = Link(sock, on_message, on_closed)   # reads on the running loop
    link.send(model, payload)                  # queued if the socket is full
    link.close()
"""

from __future__ import annotations

import asyncio
import contextlib
import mmap
import os
import socket
import struct
from collections import deque
from collections.abc import Callable
from typing import Any

import msgspec

from hostcapd import framing

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
#: A read's room for fds (`decode` refuses any but a message's one memfd),
#: computed once, not per read.
_ANCILLARY = framing.ancillary_space(4)
#: Datagrams a link reads per wake-up by default (`Link`'s `reads`).
BURST_READS = 64
#: Bytes queued for a peer that does not read, above which the link is broken.
MAX_QUEUED = 512 * 1024 * 1024


class ChannelError(framing.FramingError):
    """A datagram that is not one of ours (truncated, unknown, ill-typed, an
    fd it should not carry, a memfd that is not a sealed memfd of its size).
    The message says which."""


#: Whether the receiver reads a payload of this many bytes for this message
#: (it reserves them if so); a message it does not admit arrives without one.
Admit = Callable[[Any, int], bool]


class InFlight:
    """Bytes of payloads a receiver holds for calls not yet answered,
    against a budget (the root side: one per tenant, for its channel)."""

    def __init__(self, budget: int) -> None:
        self.budget = budget
        self.used = 0

    def reserve(self, size: int) -> bool:
        if self.used + size > self.budget:
            return False
        self.used += size
        return True

    def release(self, size: int) -> None:
        self.used -= size


def socketpair() -> tuple[socket.socket, socket.socket]:
    """The pair, with buffers large enough for a whole inline datagram (root
    forces them; an unprivileged end could not)."""
    return framing.socketpair(socket.SOCK_SEQPACKET, BUFFER)


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
    fd = framing.sealed_memfd((header, *pieces), "hostcap-message")
    return [_PREFIX.pack(len(header), size)], [fd]


def _message(decoder: msgspec.msgpack.Decoder[Any], header: memoryview | bytes) -> Any:
    try:
        return decoder.decode(header)
    except (msgspec.ValidationError, msgspec.DecodeError) as error:
        raise ChannelError(f"not a valid message: {error}") from None


def decode(
    data: memoryview,
    fds: list[int],
    decoder: msgspec.msgpack.Decoder[Any],
    limit: int = MAX_PAYLOAD,
    admit: Admit | None = None,
) -> tuple[Any, bytes | None]:
    """One datagram to its validated message and payload; raises ChannelError
    (any failure to read it, an OSError too). A memfd message is checked
    against `limit` before a byte of it is read; its payload is None when
    `admit` refuses it (then it is never read). Closes every fd it was given."""
    try:
        if len(data) < _PREFIX.size:
            raise ChannelError("a datagram shorter than its prefix")
        header_len, memfd_size = _PREFIX.unpack_from(data)
        if not memfd_size:
            if fds:
                raise ChannelError("a datagram carried an fd it has no use for")
            end = _PREFIX.size + header_len
            if end > len(data):
                raise ChannelError("a header longer than its message")
            message = _message(decoder, data[_PREFIX.size : end])
            payload = data[end:]
            if admit is not None and payload and not admit(message, len(payload)):
                return message, None
            return message, bytes(payload)
        if len(fds) != 1 or len(data) != _PREFIX.size:
            raise ChannelError("a memfd message without exactly its one fd")
        framing.check_memfd(fds[0], memfd_size, min(limit, MAX_PAYLOAD))
        if header_len > memfd_size:
            raise ChannelError("a header longer than its message")
        message = _message(decoder, framing.read_exact(fds[0], header_len, 0))
        size = memfd_size - header_len
        if admit is not None and size and not admit(message, size):
            return message, None
        return message, framing.read_exact(fds[0], size, header_len)
    except framing.FramingError as error:
        raise ChannelError(str(error)) from None
    except OSError as error:  # whatever the fd is, failing to read it is the sender's doing
        raise ChannelError(f"a message that cannot be read: {error}") from None
    finally:
        framing.close_all(fds)


class Link:
    """Both ends' view of the channel, on the running event loop: each
    datagram read is decoded and given to `on_message(message, payload)`;
    a malformed one to `on_error(ChannelError)` (the link stays open: the
    owner decides); EOF or a broken socket once to `on_closed()`. A message
    is at most `limit` bytes; `admit` (see `decode`) decides whether its
    payload is read, and a payload it refused arrives as None.

    `reads` is the most datagrams read per wake-up of the loop (then it
    lets the loop run others; the reader is level-triggered, so what is
    left is read on its next pass). Past one, the last read of each
    wake-up is the one that finds nothing: a side whose messages come one
    at a time (a front-end's: each answers its own call, or is acknowledged
    before the next) reads one and saves that system call.

    The datagram's room (a whole inline datagram, 1.1 MiB) is anonymous
    memory, resident only where a datagram was written, not a zeroed
    bytearray resident from the start: an idle front-end's RSS is its
    tenant's cost, and the root holds one link a front-end. A page once
    written stays resident for the next datagram."""

    def __init__(
        self,
        sock: socket.socket,
        decoder: msgspec.msgpack.Decoder[Any],
        on_message: Callable[[Any, bytes | None], None],
        on_error: Callable[[ChannelError], None],
        on_closed: Callable[[], None],
        limit: int = MAX_PAYLOAD,
        admit: Admit | None = None,
        reads: int = BURST_READS,
    ) -> None:
        sock.setblocking(False)
        self._reads = reads
        self.sock = sock
        self._decoder = decoder
        self._limit = limit
        self._admit = admit
        self._on_message = on_message
        self._on_error = on_error
        self._on_closed = on_closed
        self._loop = asyncio.get_running_loop()
        self._buffer = mmap.mmap(-1, _DATAGRAM)
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
        try:
            framing.sendmsg(self.sock, buffers, fds)
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
        for _ in range(self._reads):  # then let the loop run others
            if self.closed:
                return
            try:
                size, ancdata, flags, _ = self.sock.recvmsg_into(
                    [self._buffer], _ANCILLARY, socket.MSG_CMSG_CLOEXEC
                )
            except BlockingIOError:
                return
            except OSError:
                self._broken()
                return
            fds = framing.received_fds(ancdata)
            if size == 0 and not fds:
                self._broken()
                return
            try:
                if framing.truncated(flags):
                    framing.close_all(fds)
                    raise ChannelError("a truncated datagram")
                message, payload = decode(
                    memoryview(self._buffer)[:size], fds, self._decoder, self._limit, self._admit
                )
            except ChannelError as error:
                self._on_error(error)
                continue
            self._on_message(message, payload)
            del message, payload  # nothing of a call outlives its handling here

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
            framing.close_all(fds)
        self._queue.clear()
        self.sock.close()
