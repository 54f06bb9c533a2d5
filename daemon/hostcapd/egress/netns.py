"""A proxy-mode spawn's network namespace, made by the daemon before the
spawn's command exists, on a thread of its own (unshare is per thread):

    way_in = make_namespace()      # WayIn: the namespace's fd, the fds for the proxy

- its loopback up, with the proxy's listeners on 127.0.0.1:PROXY_PORT and,
  where the namespace has IPv6 loopback, [::1]:PROXY_PORT (a socket keeps
  the namespace it was made in: the proxy accepts on them from outside);
- a tun device, `hostcap0`, with an address of its own and the default
  routes (IPv4 and IPv6) through it: whatever the program sends past its
  proxy (a direct connect(), a UDP datagram, a ping) lands on the tun's fd,
  which the egress proxy reads to audit it and answer it with an ICMP error
  (egress/packets.py). The fd is the only end of the device: no packet is
  forwarded anywhere, and with the fd closed the device and its routes go.

No veth, no DNS server. The tun, its address and routes are set with the
classic ioctls (SIOCSIFADDR, SIOCADDRT): no netlink library needed.
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import os
import socket
import struct
import threading
from dataclasses import dataclass, field

from hostcapd import linux
from hostcapd.egress.rules import PROXY_PORT

CLONE_NEWNET = 0x40000000
TUN_NAME = b"hostcap0"
#: The tun's own addresses (source of the program's direct attempts): from
#: the benchmarking range and the ULA space, never a real peer's.
TUN_V4 = "198.18.0.1"
TUN_V6 = "fd68:6f73:7463:6170::1"
_TUNSETIFF = 0x400454CA
_IFF_TUN, _IFF_NO_PI = 0x0001, 0x1000
_SIOCGIFFLAGS, _SIOCSIFFLAGS = 0x8913, 0x8914
_SIOCSIFADDR, _SIOCSIFNETMASK, _SIOCGIFINDEX = 0x8916, 0x891C, 0x8933
_SIOCADDRT = 0x890B
_IFF_UP_RUNNING = 0x1 | 0x40
_RTF_UP = 0x1


@dataclass
class WayIn:
    """What `make_namespace` made: the namespace's fd (for the spawner) and
    the proxy's ends, ("tcp" | "tun", fd) each; the caller closes them all."""

    netns: int
    ends: list[tuple[str, int]] = field(default_factory=list)

    def close(self) -> None:
        for fd in [self.netns] + [fd for _kind, fd in self.ends]:
            if fd >= 0:
                os.close(fd)
        self.netns, self.ends = -1, []


def _up(s: socket.socket, name: bytes) -> None:
    ifreq = struct.pack("16sH14x", name, 0)
    flags = struct.unpack("16sH14x", fcntl.ioctl(s, _SIOCGIFFLAGS, ifreq))[1]
    fcntl.ioctl(s, _SIOCSIFFLAGS, struct.pack("16sH14x", name, flags | _IFF_UP_RUNNING))


class _RtEntry(ctypes.Structure):
    """struct rtentry (linux/route.h), for SIOCADDRT over IPv4."""

    _fields_ = [
        ("rt_pad1", ctypes.c_ulong),
        ("rt_dst", ctypes.c_ubyte * 16),
        ("rt_gateway", ctypes.c_ubyte * 16),
        ("rt_genmask", ctypes.c_ubyte * 16),
        ("rt_flags", ctypes.c_ushort),
        ("rt_pad2", ctypes.c_short),
        ("rt_pad3", ctypes.c_ulong),
        ("rt_pad4", ctypes.c_void_p),
        ("rt_metric", ctypes.c_short),
        ("rt_dev", ctypes.c_char_p),
        ("rt_mtu", ctypes.c_ulong),
        ("rt_window", ctypes.c_ulong),
        ("rt_irtt", ctypes.c_ushort),
    ]


def _sockaddr_in(address: str) -> bytes:
    return struct.pack("HH4s8x", socket.AF_INET, 0, socket.inet_aton(address))


def _tun_v4(name: bytes) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as s:
        fcntl.ioctl(s, _SIOCSIFADDR, struct.pack("16s16s8x", name, _sockaddr_in(TUN_V4)))
        mask = _sockaddr_in("255.255.255.255")
        fcntl.ioctl(s, _SIOCSIFNETMASK, struct.pack("16s16s8x", name, mask))
        _up(s, name)
        route = _RtEntry()
        any_v4 = _sockaddr_in("0.0.0.0")
        ctypes.memmove(route.rt_dst, any_v4, 16)
        ctypes.memmove(route.rt_genmask, any_v4, 16)
        route.rt_flags = _RTF_UP
        route.rt_metric = 1  # the kernel stores it less one
        route.rt_dev = name
        fcntl.ioctl(s, _SIOCADDRT, bytes(route))


def _tun_v6(name: bytes) -> None:
    with socket.socket(socket.AF_INET6, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as s:
        index = struct.unpack(
            "16si20x", fcntl.ioctl(s, _SIOCGIFINDEX, struct.pack("16s24x", name))
        )[1]
        address = socket.inet_pton(socket.AF_INET6, TUN_V6)
        # struct in6_ifreq: the address, its prefix length, the interface.
        fcntl.ioctl(s, _SIOCSIFADDR, struct.pack("16sIi", address, 128, index))
        # struct in6_rtmsg: dst, src, gateway, type, dst_len, src_len,
        # metric, info, flags, ifindex: ::/0 on the tun.
        zero = bytes(16)
        rtmsg = struct.pack("16s16s16sIHHIxxxxLIi", zero, zero, zero, 0, 0, 0, 1, 0, _RTF_UP, index)
        fcntl.ioctl(s, _SIOCADDRT, rtmsg)


TUN_DEVICE = "/dev/net/tun"


def tun_problem() -> str:
    """Why no tun device can be made here ("" when one can): proxy mode
    needs one in each spawn's namespace, so its packets past the proxy are
    refused and audited."""
    try:
        os.close(os.open(TUN_DEVICE, os.O_RDWR | os.O_CLOEXEC))
    except OSError as error:
        return (
            f"proxy mode needs {TUN_DEVICE} (each spawn's namespace routes what it sends "
            f"past the proxy into a tun device, to refuse and audit it): {error.strerror}; "
            "under the systemd unit see docs/install.md"
        )
    return ""


def _tun() -> int:
    fd = os.open(TUN_DEVICE, os.O_RDWR | os.O_CLOEXEC | os.O_NONBLOCK)
    try:
        fcntl.ioctl(fd, _TUNSETIFF, struct.pack("16sH22x", TUN_NAME, _IFF_TUN | _IFF_NO_PI))
        _tun_v4(TUN_NAME)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _listener(family: socket.AddressFamily, host: str) -> int:
    s = socket.socket(family, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
    try:
        if family == socket.AF_INET6:
            s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
        s.bind((host, PROXY_PORT))
        s.listen(128)
    except BaseException:
        s.close()
        raise
    return s.detach()


def has_ipv6() -> bool:
    return os.path.exists("/proc/sys/net/ipv6")


def _build(way: WayIn, ipv6: bool) -> None:
    linux.unshare(CLONE_NEWNET)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as s:
        _up(s, b"lo")
    way.ends.append(("tcp", _listener(socket.AF_INET, "127.0.0.1")))
    if ipv6:
        try:  # no ::1 where IPv6 is disabled (disable_ipv6): IPv4 only then
            way.ends.append(("tcp", _listener(socket.AF_INET6, "::1")))
        except OSError:
            ipv6 = False
    tun = _tun()
    way.ends.append(("tun", tun))
    if ipv6:
        # Without it an IPv6 packet past the proxy has no route at all
        # (refused by the kernel, not recorded): still nothing leaves.
        with contextlib.suppress(OSError):
            _tun_v6(TUN_NAME)
    way.netns = os.open("/proc/thread-self/ns/net", os.O_RDONLY | os.O_CLOEXEC)


def make_namespace() -> WayIn:
    """A new network namespace set up as the module docstring says; OSError
    if any of it cannot be (nothing is left open then)."""
    way = WayIn(-1)
    failed: list[OSError] = []
    ipv6 = has_ipv6()

    def work() -> None:
        try:
            _build(way, ipv6)
        except OSError as error:
            failed.append(error)
            way.close()

    # The thread ends in the new namespace: nothing else runs on it.
    thread = threading.Thread(target=work, name="egress-netns")
    thread.start()
    thread.join()
    if failed:
        raise failed[0]
    return way
