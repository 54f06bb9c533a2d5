"""Who asked: a front-end's own accept, and each call's caller.

grpcio neither adopts a listening or accepted fd nor tells a servicer
anything of its connection but `context.peer()`, which for a unix socket
names the peer's bound address (and an unbound client has none). So a
front-end that records its callers (`Hello.record_callers`) serves its
socket itself:

- it binds and listens on the tenant's socket, and accepts each
  connection on its event loop, reading the client's SO_PEERCRED (pid, uid,
  gid: the kernel's, taken when the client connected);
- its gRPC server listens on the abstract unix socket `INNER_ADDRESS`, in
  the front-end's own network namespace (made for it while it is still root,
  `confine.Confinement.own_netns`): no other process of the host can reach
  it, and landlock's scope refuses it to any process outside the front-end's
  domain;
- for each accepted connection it connects to that inner socket from a
  socket bound to a fresh abstract name (`c1`, `c2`, ...), which the gRPC
  server sees as that connection's peer, and relays the bytes both ways;
- a call finds its caller by its peer (`Peers.caller_of`).

The bytes are relayed by two asyncio protocols, each side's writes pausing
the other side's reads past the transport's high-water mark; an EOF is passed
on as a half-close, and a connection closed on one side is closed on the other
(so gRPC sees a client that went away, and cancels its calls).

The relay's connect() is the only one a front-end makes: its seccomp filter
allows connect() with an address of exactly `INNER_ADDRLEN` bytes and no
other (decision 0033).
"""

from __future__ import annotations

import asyncio
import itertools
import os
import socket
import struct
import typing
from typing import Any

from hostcapd.bridge.values import Caller
from hostcapd.sandbox.seccomp_tables import FRONTEND_CONNECT_ADDRLEN

#: The gRPC server's abstract name, in the front-end's own network namespace.
INNER_NAME = "h"
INNER_ADDRESS = "\0" + INNER_NAME
#: connect()'s address length for it: sa_family_t, the NUL, the name. The
#: front-end's seccomp filter allows connect() with this length only.
INNER_ADDRLEN = 2 + len(INNER_ADDRESS)
assert INNER_ADDRLEN == FRONTEND_CONNECT_ADDRLEN
#: What grpc's server is bound to (its own URI form).
INNER_URI = f"unix-abstract:{INNER_NAME}"
#: How grpc names a relayed connection's peer: this and its tag.
PEER_PREFIX = "unix-abstract:"
_PEERCRED = struct.Struct("3i")
#: Socket buffers of both sides of a relayed connection, and the most the
#: relay reads at once: a stream's bytes cross the relay in fewer, larger
#: reads and writes (the kernel caps the buffers at net.core.[rw]mem_max).
RELAY_BUFFER = 1024 * 1024


def peer_credentials(sock: socket.socket) -> Caller:
    """SO_PEERCRED of a connected unix socket: (pid, uid, gid) as Caller."""
    pid, uid, gid = _PEERCRED.unpack(
        sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _PEERCRED.size)
    )
    return Caller(uid=uid, gid=gid, pid=pid)


def _large_buffers(sock: socket.socket) -> None:
    for option in (socket.SO_SNDBUF, socket.SO_RCVBUF):
        sock.setsockopt(socket.SOL_SOCKET, option, RELAY_BUFFER)


class _Pipe(asyncio.Protocol):
    """One side of a relayed connection: what it reads is written to the
    other side; its writes backing up pause the other side's reads."""

    def __init__(self, on_made: Any = None, on_closed: Any = None) -> None:
        self.transport: asyncio.Transport | None = None
        self.other: _Pipe | None = None
        self.eof = False
        self.closed = False
        #: What it read before the other side was connected: pausing its
        #: reads in connection_made does not hold on every Python (3.11
        #: adds the reader after connection_made), so the bytes wait here.
        self.early: list[bytes] = []
        self._on_made = on_made
        self._on_closed = on_closed

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports are not asyncio.Transport subclasses: same methods.
        self.transport = typing.cast(asyncio.Transport, transport)
        if self._on_made is not None:
            self._on_made(self)

    def data_received(self, data: bytes) -> None:
        other = self.other
        if other is not None and other.transport is not None:
            other.transport.write(data)
        else:
            self.early.append(data)
            if self.transport is not None:
                self.transport.pause_reading()

    def joined(self) -> None:
        """The other side is connected: what waited goes to it."""
        other = self.other
        assert other is not None and other.transport is not None
        for data in self.early:
            other.transport.write(data)
        self.early.clear()
        if self.eof and other.transport.can_write_eof():
            other.transport.write_eof()

    def eof_received(self) -> bool:
        self.eof = True
        other = self.other
        if other is not None and other.transport is None and not other.closed:
            return True  # written on once the other side is connected
        if other is None or other.transport is None or other.eof:
            self.close_both()
            return False
        if other.transport.can_write_eof():
            other.transport.write_eof()
        return True  # the other way may still carry bytes

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.close_both()

    def pause_writing(self) -> None:
        if self.other is not None and self.other.transport is not None:
            self.other.transport.pause_reading()

    def resume_writing(self) -> None:
        if self.other is not None and self.other.transport is not None:
            self.other.transport.resume_reading()

    def close_both(self) -> None:
        for pipe in (self, self.other):
            if pipe is not None and pipe.transport is not None and not pipe.transport.is_closing():
                pipe.transport.close()
        if self._on_closed is not None and self.closed:
            self._on_closed()
            self._on_closed = None


class Peers:
    """The front-end's accept: its callers by the peer name gRPC reports."""

    def __init__(self, inner: str = INNER_ADDRESS) -> None:
        #: The gRPC server's address (a test's own abstract name).
        self.inner = inner
        self.callers: dict[str, Caller] = {}
        self._tags = itertools.count(1)
        self._server: asyncio.AbstractServer | None = None
        self._pending: set[asyncio.Future[None]] = set()

    def caller_of(self, context: Any) -> Caller | None:
        """The caller of a call, by its connection's peer (None: not relayed)."""
        return self.callers.get(context.peer())

    async def listen(self, path: str, mode: int) -> None:
        """Bind `path` (its mode from the umask: chmod is denied to a
        front-end) and accept on it."""
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            previous = os.umask(0o777 & ~mode)
            try:
                sock.bind(path)
            finally:
                os.umask(previous)
            sock.listen(socket.SOMAXCONN)
            sock.setblocking(False)
            self._server = await asyncio.get_running_loop().create_unix_server(
                self._accepted, sock=sock
            )
        except BaseException:
            sock.close()
            raise

    def _accepted(self) -> _Pipe:
        tag = f"c{next(self._tags):x}"
        peer = PEER_PREFIX + tag
        inner = _Pipe()

        def made(outer: _Pipe) -> None:
            # Its reads wait for the inner side; its caller is read now.
            assert outer.transport is not None
            outer.transport.pause_reading()
            try:
                sock = outer.transport.get_extra_info("socket")
                self.callers[peer] = peer_credentials(sock)
                _large_buffers(sock)
            except OSError:
                outer.transport.close()
                return
            task = asyncio.ensure_future(self._open_inner(outer, inner, tag, peer))
            self._pending.add(task)
            task.add_done_callback(self._pending.discard)

        outer = _Pipe(made, lambda: self.callers.pop(peer, None))
        outer.other, inner.other = inner, outer
        return outer

    async def _open_inner(self, outer: _Pipe, inner: _Pipe, tag: str, peer: str) -> None:
        transport = outer.transport
        assert transport is not None
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            _large_buffers(sock)
            sock.bind("\0" + tag)
            # A unix connect completes at once while the listener's backlog
            # has room; past it, it waits for gRPC's threads to accept.
            sock.connect(self.inner)
            sock.setblocking(False)
            await asyncio.get_running_loop().create_unix_connection(lambda: inner, sock=sock)
        except OSError:
            sock.close()
            self.callers.pop(peer, None)
            transport.close()
            return
        if outer.closed or transport.is_closing():
            inner.close_both()
            return
        outer.joined()
        if not outer.eof:
            transport.resume_reading()

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            self._server = None
