"""seccomp's socket family allowlist: a child under each policy's filter
creates sockets of every kind; the filter, not the kernel, refuses them."""

from __future__ import annotations

import json

import pytest
from hostcapd.sandbox import seccomp, sockets
from sandbox_attempts import run_seccomp_child

SUPPORT = seccomp.probe()
pytestmark = pytest.mark.skipif(not SUPPORT.available, reason=f"no seccomp: {SUPPORT.reason}")
SOCKET, SOCKETPAIR = seccomp.X86_64_SYSCALLS["socket"], seccomp.X86_64_SYSCALLS["socketpair"]
SOCK_STREAM, SOCK_DGRAM = 1, 2
#: (label, syscall, args): socketpair's fourth argument is a NULL sv, so an
#: allowed call fails EFAULT in the kernel, and a refused one never gets there.
CALLS: list[tuple[str, int, list[int]]] = [
    ("unix", SOCKET, [sockets.AF_UNIX, SOCK_STREAM, 0]),
    ("unix_pair", SOCKETPAIR, [sockets.AF_UNIX, SOCK_STREAM, 0, 0]),
    ("inet", SOCKET, [sockets.AF_INET, SOCK_DGRAM, 0]),
    ("inet6", SOCKET, [sockets.AF_INET6, SOCK_DGRAM, 0]),
    ("netlink_route", SOCKET, [sockets.AF_NETLINK, SOCK_DGRAM, sockets.NETLINK_ROUTE]),
    ("netlink_audit", SOCKET, [sockets.AF_NETLINK, SOCK_DGRAM, 9]),
    ("vsock", SOCKET, [40, SOCK_STREAM, 0]),
    ("vsock_pair", SOCKETPAIR, [40, SOCK_STREAM, 0, 0]),
    ("packet", SOCKET, [17, 3, 0]),
    # the high word of the domain is not the kernel's: only the low int counts
    ("vsock_high_word", SOCKET, [(1 << 32) | 40, SOCK_STREAM, 0]),
]


def outcomes(policy: sockets.SocketPolicy | None) -> dict[str, str]:
    spec = {
        "filter": seccomp.build_filter(sockets=policy).hex() if policy else "",
        "calls": [[nr, args] for _, nr, args in CALLS],
    }
    done = run_seccomp_child(spec)
    assert done.returncode == 0, done.stderr
    return dict(zip([label for label, _, _ in CALLS], json.loads(done.stdout), strict=True))


def test_with_a_network_unix_inet_and_netlink_routes_only() -> None:
    found = outcomes(sockets.socket_policy(inet=True))
    assert found == {
        "unix": "ok",
        "unix_pair": "EFAULT",
        "inet": "ok",
        "inet6": "ok",
        "netlink_route": "ok",
        "netlink_audit": "EPROTONOSUPPORT",
        "vsock": "EAFNOSUPPORT",
        "vsock_pair": "EAFNOSUPPORT",
        "packet": "EAFNOSUPPORT",
        "vsock_high_word": "EAFNOSUPPORT",
    }


def test_without_a_network_unix_only() -> None:
    found = outcomes(sockets.socket_policy(inet=False))
    assert found.pop("unix") == "ok" and found.pop("unix_pair") == "EFAULT"
    assert found == dict.fromkeys(found, "EAFNOSUPPORT")


def test_the_default_filter_is_the_networked_policys() -> None:
    assert seccomp.build_filter() == seccomp.build_filter(sockets=sockets.DEFAULT_POLICY)
    assert seccomp.build_filter() != seccomp.build_filter(sockets=sockets.socket_policy(False))
    assert sockets.DEFAULT_POLICY.names() == [
        "AF_UNIX",
        "AF_INET",
        "AF_INET6",
        "AF_NETLINK/NETLINK_ROUTE",
    ]
