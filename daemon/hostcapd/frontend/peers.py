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

The bytes are relayed by splice(2), each way through a pipe of its own
(`_Direction`): they are never copied through this process, and a side that
does not drain stops the reads of the other (the pipe holds what waits). An
EOF is passed on as a half-close; a socket closed on one side closes the
other (so gRPC sees a client that went away, and cancels its calls).

The relay's connect() is the only one a front-end makes: its seccomp filter
allows connect() with an address of exactly `INNER_ADDRLEN` bytes and no
other (decision 0033).
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import fcntl
import itertools
import os
import select
import socket
import struct
from collections.abc import Callable
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
#: The pipe of a connection's requests (the pipe's default: requests are small).
REQUEST_PIPE = 64 * 1024
F_SETPIPE_SZ = getattr(fcntl, "F_SETPIPE_SZ", 1031)
_SPLICE = os.SPLICE_F_MOVE | os.SPLICE_F_NONBLOCK
#: How long accepting pauses when no fd (or memory) is left for a connection.
ACCEPT_PAUSE_S = 1.0


def peer_credentials(sock: socket.socket) -> Caller:
    """SO_PEERCRED of a connected unix socket: (pid, uid, gid) as Caller."""
    pid, uid, gid = _PEERCRED.unpack(
        sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _PEERCRED.size)
    )
    return Caller(uid=uid, gid=gid, pid=pid)


def _large_buffers(sock: socket.socket) -> None:
    for option in (socket.SO_SNDBUF, socket.SO_RCVBUF):
        sock.setsockopt(socket.SOL_SOCKET, option, RELAY_BUFFER)


def _hung_up(sock: socket.socket) -> bool:
    """Whether the peer closed its socket (not only its sending side): a
    unix socket polls POLLHUP once both directions are shut."""
    poller = select.poll()
    poller.register(sock, 0)
    return any(events & select.POLLHUP for _, events in poller.poll(0))


class _Direction:
    """The bytes of one way of a relayed connection: `src` -> a pipe ->
    `dst`, moved by splice(2), never copied through this process. It reads
    `src` only while the pipe is empty, so a `dst` that does not drain
    stops the reads (the back-pressure)."""

    def __init__(self, relay: _Relay, src: socket.socket, dst: socket.socket, size: int) -> None:
        self.relay, self.src, self.dst = relay, src, dst
        self.loop = relay.loop
        self.r, self.w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        with contextlib.suppress(OSError):  # past the user's pipe pages: the default size
            fcntl.fcntl(self.w, F_SETPIPE_SZ, size)
        self.size = size
        self.pending = 0
        self.reading = self.writing = False
        self.done = False

    def start(self) -> None:
        self._read(True)

    def _read(self, on: bool) -> None:
        if on != self.reading:
            self.reading = on
            if on:
                self.loop.add_reader(self.src.fileno(), self._readable)
            else:
                self.loop.remove_reader(self.src.fileno())

    def _write(self, on: bool) -> None:
        if on != self.writing:
            self.writing = on
            if on:
                self.loop.add_writer(self.dst.fileno(), self._flush)
            else:
                self.loop.remove_writer(self.dst.fileno())

    def _readable(self) -> None:
        try:
            n = os.splice(self.src.fileno(), self.w, self.size, flags=_SPLICE)
        except BlockingIOError:
            return
        except OSError:
            self.relay.close()
            return
        if n == 0:  # EOF: what is in the pipe goes first
            self._read(False)
            self.done = True
        self.pending += n
        self._flush()

    def _flush(self) -> None:
        while self.pending:
            try:
                self.pending -= os.splice(self.r, self.dst.fileno(), self.pending, flags=_SPLICE)
            except BlockingIOError:
                self._read(False)
                self._write(True)
                return
            except OSError:
                self.relay.close()
                return
        self._write(False)
        if not self.done:
            self._read(True)
        else:
            self.relay.ended(self)

    def stop(self) -> None:
        self._read(False)
        self._write(False)
        os.close(self.r)
        os.close(self.w)


class _Relay:
    """One relayed connection: the client's socket and the one to the gRPC
    server, a direction each way. An EOF is passed on as a half-close, a
    socket closed on one side closes the other (gRPC sees a client that
    went away, and cancels its calls)."""

    def __init__(
        self, outer: socket.socket, inner: socket.socket, on_closed: Callable[[], None]
    ) -> None:
        self.loop = asyncio.get_running_loop()
        self.outer, self.inner = outer, inner
        self.on_closed: Callable[[], None] | None = on_closed
        # The client's requests are small; the server's answers may be a stream.
        requests = _Direction(self, outer, inner, REQUEST_PIPE)  # OSError: no fd left
        try:
            answers = _Direction(self, inner, outer, RELAY_BUFFER)
        except OSError:
            requests.stop()
            raise
        self.ways = [requests, answers]
        for way in self.ways:
            way.start()

    def ended(self, way: _Direction) -> None:
        """`way`'s source sent its EOF and all it sent before is through."""
        if _hung_up(way.src) or all(w.done and not w.pending for w in self.ways):
            self.close()
            return
        with contextlib.suppress(OSError):
            way.dst.shutdown(socket.SHUT_WR)

    def close(self) -> None:
        if self.on_closed is None:
            return
        on_closed, self.on_closed = self.on_closed, None
        for way in self.ways:
            way.stop()
        self.outer.close()
        self.inner.close()
        on_closed()


class Peers:
    """The front-end's accept: its callers by the peer name gRPC reports."""

    def __init__(self, inner: str = INNER_ADDRESS) -> None:
        #: The gRPC server's address (a test's own abstract name).
        self.inner = inner
        self.callers: dict[str, Caller] = {}
        self._tags = itertools.count(1)
        self._listening: socket.socket | None = None
        #: The relayed connections, by their peer name.
        self.relays: dict[str, _Relay] = {}

    def caller_of(self, context: Any) -> Caller | None:
        """The caller of a call, by its connection's peer (None: not relayed)."""
        return self.callers.get(context.peer())

    async def listen(self, path: str, mode: int) -> None:
        """Bind `path` (its mode from the umask: chmod is denied to a
        front-end) and accept on it."""
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_NONBLOCK)
        try:
            previous = os.umask(0o777 & ~mode)
            try:
                sock.bind(path)
            finally:
                os.umask(previous)
            sock.listen(socket.SOMAXCONN)
            asyncio.get_running_loop().add_reader(sock.fileno(), self._accept)
        except BaseException:
            sock.close()
            raise
        self._listening = sock

    def _accept(self) -> None:
        assert self._listening is not None
        for _ in range(16):  # then let the loop run others
            try:
                outer, _ = self._listening.accept()
            except BlockingIOError:
                return
            except OSError as error:
                if error.errno in (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM):
                    self._pause_accepting()  # its clients wait in the backlog meanwhile
                    return
                continue  # the client gave up (ECONNABORTED)
            self._relay(outer)

    def _pause_accepting(self) -> None:
        sock = self._listening
        if sock is None:
            return
        loop = asyncio.get_running_loop()
        loop.remove_reader(sock.fileno())

        def resume() -> None:
            if self._listening is sock:
                loop.add_reader(sock.fileno(), self._accept)

        loop.call_later(ACCEPT_PAUSE_S, resume)

    def _relay(self, outer: socket.socket) -> None:
        tag = f"c{next(self._tags):x}"
        peer = PEER_PREFIX + tag
        inner: socket.socket | None = None
        try:
            # Its caller now: the kernel's, taken when it connected.
            self.callers[peer] = peer_credentials(outer)
            inner = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            _large_buffers(outer)
            _large_buffers(inner)
            inner.bind("\0" + tag)
            # A unix connect completes at once while the listener's backlog
            # has room; past it, it waits for gRPC's threads to accept.
            inner.connect(self.inner)
            outer.setblocking(False)
            inner.setblocking(False)
            self.relays[peer] = _Relay(outer, inner, lambda: self._closed(peer))
        except OSError:  # the client went, or no fd is left: its connection is closed
            self.callers.pop(peer, None)
            if inner is not None:
                inner.close()
            outer.close()

    def _closed(self, peer: str) -> None:
        self.callers.pop(peer, None)
        self.relays.pop(peer, None)

    async def close(self) -> None:
        """No new connection; those open stay until either side ends them."""
        sock, self._listening = self._listening, None
        if sock is not None:
            asyncio.get_running_loop().remove_reader(sock.fileno())
            sock.close()
