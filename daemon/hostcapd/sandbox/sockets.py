"""The socket address families a sandboxed child may create.

    policy = socket_policy(inet=True)
    policy.names()   # ["AF_UNIX", "AF_INET", "AF_INET6", "AF_NETLINK/NETLINK_ROUTE"]

An allowlist, enforced by the seccomp filter on socket(2) and socketpair(2)
(`seccomp.build_filter(sockets=policy)`): every family not on it fails
EAFNOSUPPORT, as if the kernel lacked it, and an AF_NETLINK socket of a
protocol not on it fails EPROTONOSUPPORT. The network namespace isolates
AF_INET/AF_INET6 and netlink, but not every family: AF_VSOCK reaches the
hypervisor and other guests whatever the namespace, and the rarer families
(AF_RDS, AF_TIPC, AF_CAN, AF_ALG, ...) are kernel attack surface a tool never
needs (creating one may load a kernel module). Decision 0024 records why the
list is what it is.
"""

from __future__ import annotations

from dataclasses import dataclass

# include/linux/socket.h
AF_UNIX = 1
AF_INET = 2
AF_INET6 = 10
AF_NETLINK = 16

# include/uapi/linux/netlink.h
NETLINK_ROUTE = 0

FAMILY_NAMES: dict[int, str] = {AF_UNIX: "AF_UNIX", AF_INET: "AF_INET", AF_INET6: "AF_INET6"}
NETLINK_NAMES: dict[int, str] = {NETLINK_ROUTE: "NETLINK_ROUTE"}

#: Families a tool has no use for and the filter refuses, with their numbers
#: (include/linux/socket.h), named for the tests and the docs. The filter is
#: an allowlist: a family not named here is refused all the same.
DENIED_EXAMPLES: dict[str, int] = {
    "AF_AX25": 3,
    "AF_IPX": 4,
    "AF_APPLETALK": 5,
    "AF_X25": 9,
    "AF_KEY": 15,
    "AF_PACKET": 17,
    "AF_RDS": 21,
    "AF_PPPOX": 24,
    "AF_LLC": 26,
    "AF_CAN": 29,
    "AF_TIPC": 30,
    "AF_BLUETOOTH": 31,
    "AF_RXRPC": 33,
    "AF_ALG": 38,
    "AF_NFC": 39,
    "AF_VSOCK": 40,
    "AF_KCM": 41,
    "AF_QIPCRTR": 42,
    "AF_SMC": 43,
    "AF_XDP": 44,
    "AF_MCTP": 45,
}

#: Netlink protocols refused (examples; every protocol but the allowed ones is).
DENIED_NETLINK_EXAMPLES: dict[str, int] = {
    "NETLINK_SOCK_DIAG": 4,
    "NETLINK_XFRM": 6,
    "NETLINK_AUDIT": 9,
    "NETLINK_CONNECTOR": 11,
    "NETLINK_NETFILTER": 12,
    "NETLINK_KOBJECT_UEVENT": 15,
    "NETLINK_GENERIC": 16,
}


@dataclass(frozen=True)
class SocketPolicy:
    """The families a child may create, and the netlink protocols among them."""

    #: Families allowed with any protocol.
    families: tuple[int, ...]
    #: AF_NETLINK protocols allowed (none: AF_NETLINK refused altogether).
    netlink_protocols: tuple[int, ...]

    def names(self) -> list[str]:
        """The allowlist as capabilities report it."""
        shown = [FAMILY_NAMES[f] for f in self.families]
        shown += [f"AF_NETLINK/{NETLINK_NAMES[p]}" for p in self.netlink_protocols]
        return shown


def socket_policy(inet: bool) -> SocketPolicy:
    """AF_UNIX always; AF_INET and AF_INET6 when the tenant has a network (its
    namespace's loopback, or the host's network); AF_NETLINK only for
    NETLINK_ROUTE, and only with AF_INET: glibc's getaddrinfo and
    if_nameindex, `ip addr` and `ip route` read it (changing anything needs
    CAP_NET_ADMIN, which children do not have)."""
    if not inet:
        return SocketPolicy(families=(AF_UNIX,), netlink_protocols=())
    return SocketPolicy(families=(AF_UNIX, AF_INET, AF_INET6), netlink_protocols=(NETLINK_ROUTE,))


#: What the filter enforces when no tenant-specific policy is given.
DEFAULT_POLICY = socket_policy(inet=True)
