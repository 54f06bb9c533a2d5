"""The frames between the daemon and its fs worker, over a socketpair.

A frame is `>II` (header length, data length), a header (the MessagePack of
one `hostcapd.fs.messages` struct), raw bytes; a reply may also carry one
file descriptor (SCM_RIGHTS, on its first byte, `hostcapd.framing`):

    write_frame(sock, messages.Opened(...), fd=file_fd)        # worker side
    header, data, fd = await link.receive(max_data=0)          # daemon side
    answer = messages.decode_answer(header)

The header carries the small structured part and the raw bytes carry write
content, so content is never encoded. A read's content does not travel here
at all: the worker sends the file it opened and checked, as the tenant, and
the daemon preads it (one copy, straight into the reply); a read the
front-end asks the worker directly (decision 0034, `hostcapd.fs.direct`)
does not cross this link at all. Both ends bound
what they accept; a frame over the bound, or a header that is not one of the
messages, is a protocol error, and the reader drops the link rather than
buffering it.
"""

from __future__ import annotations

import asyncio
import os
import socket
import struct

import msgspec

from hostcapd import framing
from hostcapd.fs.messages import ProtocolError, encode

_HEAD = struct.Struct(">II")
#: Bound on the header (a listing of 10 000 deep entries fits easily).
MAX_HEADER = 64 << 20
#: Socket buffers of the link: fewer wake-ups for a 64 MiB write.
BUFFER_BYTES = 4 << 20
#: What the daemon's end reads at once for a frame's head: a small answer
#: (a read's open, a stat) comes whole in this one recvmsg.
HEAD_READ = 64 << 10

__all__ = ["BUFFER_BYTES", "MAX_HEADER", "FrameLink", "ProtocolError", "make_link"]


def make_link() -> tuple[socket.socket, socket.socket]:
    """A connected pair: (daemon end, worker end)."""
    return framing.socketpair(socket.SOCK_STREAM, BUFFER_BYTES)


def _encode(message: msgspec.Struct, data_len: int) -> tuple[bytes, bytes]:
    body = encode(message)
    return _HEAD.pack(len(body), data_len), body


def _check(header_len: int, data_len: int, max_data: int) -> None:
    if header_len > MAX_HEADER or data_len > max_data:
        raise ProtocolError(f"frame too large ({header_len} + {data_len} bytes)")


# --- blocking side (the worker) ---


def _recv_exactly(sock: socket.socket, size: int) -> bytearray:
    buffer = bytearray(size)
    with memoryview(buffer) as view:
        got = 0
        while got < size:
            n = sock.recv_into(view[got:], size - got)
            if n == 0:
                raise EOFError
            got += n
    return buffer


def read_frame(sock: socket.socket, max_data: int) -> tuple[bytearray, bytearray]:
    """One frame's header and data; EOFError when the link closed cleanly
    before it. The data is a bytearray: a 64 MiB write is not copied once
    more to make it bytes."""
    head = _recv_exactly(sock, _HEAD.size)
    header_len, data_len = _HEAD.unpack(head)
    _check(header_len, data_len, max_data)
    try:
        body = _recv_exactly(sock, header_len)
        data = _recv_exactly(sock, data_len)
    except EOFError:
        raise ProtocolError("link closed mid-frame") from None
    return body, data


def write_frame(
    sock: socket.socket,
    message: msgspec.Struct,
    data: bytes | bytearray = b"",
    fd: int | None = None,
) -> None:
    head, body = _encode(message, len(data))
    if fd is None:
        sock.sendall(head + body)
    else:
        # Head and header in the one sendmsg that carries the fd: the
        # daemon's first recvmsg takes the whole answer (a read's open),
        # instead of waking for the head and again for the rest.
        frame = head + body
        sent = framing.sendmsg(sock, [frame], [fd])
        if sent < len(frame):
            sock.sendall(frame[sent:])
    if data:
        sock.sendall(data)


# --- asyncio side (the front-end) ---


class FrameLink:
    """The front-end's end of the link, on the running loop, without asyncio
    streams (which would buffer, and copy, every byte of a 64 MiB write)."""

    def __init__(self, sock: socket.socket) -> None:
        sock.setblocking(False)
        self.sock = sock
        self._loop = asyncio.get_running_loop()

    def close(self) -> None:
        self.sock.close()

    async def send(self, message: msgspec.Struct, data: bytes = b"") -> None:
        head, body = _encode(message, len(data))
        await self._loop.sock_sendall(self.sock, head + body)
        if data:
            await self._loop.sock_sendall(self.sock, data)

    async def receive(self, max_data: int) -> tuple[bytearray, bytes, int | None]:
        """One frame's header and data, and the fd it carried (the caller
        owns it). Raises EOFError when the link closed, ProtocolError for a
        bad frame."""
        head, fd = await self._receive_head()
        try:
            header_len, data_len = _HEAD.unpack_from(head)
            _check(header_len, data_len, max_data)
            # A small frame came whole with its head (one recvmsg); the rest
            # of a larger one is read into its own buffers.
            rest = head[_HEAD.size :]
            if len(rest) > header_len + data_len:
                raise ProtocolError("bytes past a frame before its answer was read")
            body = await self._complete(rest[:header_len], header_len)
            data = bytes(await self._complete(rest[header_len:], data_len)) if data_len else b""
        except BaseException:
            if fd is not None:
                os.close(fd)
            raise
        return body, data, fd

    async def _receive_head(self) -> tuple[bytearray, int | None]:
        # recvmsg for the head: an fd rides on a frame's first byte, and a
        # plain recv of that byte would silently drop (close) it. One
        # recvmsg of up to HEAD_READ bytes takes a small frame whole (the
        # other end sends one frame, then waits for the answer).
        got = bytearray()
        fds: list[int] = []
        space = framing.ancillary_space(1)
        while len(got) < _HEAD.size:
            try:
                chunk, ancillary, flags, _ = self.sock.recvmsg(HEAD_READ, space)
            except BlockingIOError:
                await self._readable()
                continue
            fds.extend(framing.received_fds(ancillary))
            if not chunk:
                framing.close_all(fds)
                raise EOFError if not got else ProtocolError("link closed mid-frame")
            if flags & framing.MSG_CTRUNC or len(fds) > 1:
                framing.close_all(fds)
                raise ProtocolError("a frame carried more than one fd")
            got += chunk
        return got, (fds[0] if fds else None)

    async def _complete(self, start: bytearray, size: int) -> bytearray:
        """`start` (what came with the head) and the rest of `size` bytes."""
        if len(start) == size:
            return start
        buffer = bytearray(size)
        buffer[: len(start)] = start
        with memoryview(buffer) as view:
            got = len(start)
            while got < size:
                n = await self._loop.sock_recv_into(self.sock, view[got:])
                if n == 0:
                    raise ProtocolError("link closed mid-frame")
                got += n
        return buffer

    async def _readable(self) -> None:
        ready: asyncio.Future[None] = self._loop.create_future()
        fileno = self.sock.fileno()

        def wake() -> None:
            if not ready.done():
                ready.set_result(None)

        self._loop.add_reader(fileno, wake)
        try:
            await ready
        finally:
            self._loop.remove_reader(fileno)
