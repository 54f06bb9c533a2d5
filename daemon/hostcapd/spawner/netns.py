"""A pool of fresh network namespaces, made ahead of need: by the spawner's
pool maker (spawner/maker.py), or by the spawner while it is idle.

Creating a network namespace is the dearest step of a sandboxed spawn (about
1.2 ms here, against 1 ms for the whole rest of a bare spawn). The spawner
makes them ahead of need, each with its loopback up, and a child joins one
with setns(2) instead of creating its own: the cost leaves the request path.
Each namespace is used by one spawn only (its fd is closed once given away),
so spawns never share a network.
"""

from __future__ import annotations

import fcntl
import os
import socket
import struct
from collections.abc import Callable

from hostcapd import linux

CLONE_NEWNET = 0x40000000
_SIOCGIFFLAGS = 0x8913
_SIOCSIFFLAGS = 0x8914
#: The network namespace of a socket, as a new O_RDONLY | O_CLOEXEC fd.
_SIOCGSKNS = 0x894C
_IFF_UP = 0x1
_IFF_RUNNING = 0x40


def _loopback_up(namespace: bool = False) -> int:
    """Bring the current network namespace's loopback up; with `namespace`,
    an fd of that namespace (from the socket that did it: no lookup of
    /proc/thread-self/ns/net, 2 % of a namespace's making), else or if the
    kernel cannot, -1."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        ifreq = struct.pack("16sH14x", b"lo", 0)
        flags = struct.unpack("16sH14x", fcntl.ioctl(s, _SIOCGIFFLAGS, ifreq))[1]
        fcntl.ioctl(s, _SIOCSIFFLAGS, struct.pack("16sH14x", b"lo", flags | _IFF_UP | _IFF_RUNNING))
        if not namespace:
            return -1
        try:
            fd: int = fcntl.ioctl(s, _SIOCGSKNS)
        except OSError:
            return -1
        return fd


def _named(call: Callable[..., None], *args: int, what: str) -> None:
    """`call`, its OSError saying which step failed (kept in `failed`)."""
    try:
        call(*args)
    except OSError as error:
        raise OSError(error.errno, f"{what}: {error.strerror}") from None


class NetnsPool:
    """Up to `size` network namespaces, each an O_RDONLY fd of its nsfs file."""

    def __init__(self, size: int = 4) -> None:
        self.size = size
        self._fds: list[int] = []
        #: Asked of the pool maker (spawner/maker.py), not come yet.
        self.pending = 0
        self._home = os.open("/proc/thread-self/ns/net", os.O_RDONLY | os.O_CLOEXEC)
        self.failed = ""

    def take(self) -> int:
        """A namespace for one spawn (the caller closes it), or -1 if none is ready."""
        return self._fds.pop() if self._fds else -1

    @property
    def wants_more(self) -> bool:
        return not self.failed and len(self._fds) + self.pending < self.size

    def wanted(self, empty_only: bool = False) -> int:
        """How many to ask for now: up to the pool's size (one if it is
        empty, nothing asked for either, and none else if `empty_only`)."""
        if self.failed:
            return 0
        if empty_only:
            return 1 if self.empty else 0
        return max(0, self.size - len(self._fds) - self.pending)

    @property
    def empty(self) -> bool:
        """Nothing ready, nothing asked for, and it could be made."""
        return not self.failed and not self._fds and not self.pending

    def made(self, fd: int, error: str = "") -> None:
        """One the pool maker was asked for came: its fd, or why not."""
        self.pending = max(0, self.pending - 1)
        if fd >= 0:
            self._fds.append(fd)
        elif error:
            self.failed = error  # the children create their own instead

    def fill_one(self) -> None:
        """Make one namespace: unshare, loopback up, keep its fd, come back."""
        try:
            _named(linux.unshare, CLONE_NEWNET, what="unshare(CLONE_NEWNET)")
            try:
                fd = _loopback_up(namespace=True)
                if fd < 0:
                    fd = os.open("/proc/thread-self/ns/net", os.O_RDONLY | os.O_CLOEXEC)
            finally:
                _named(linux.setns, self._home, CLONE_NEWNET, what="setns back")
        except OSError as error:
            self.failed = str(error)  # the children create their own instead
            return
        self._fds.append(fd)

    def close(self) -> None:
        for fd in self._fds:
            os.close(fd)
        self._fds.clear()
        os.close(self._home)
