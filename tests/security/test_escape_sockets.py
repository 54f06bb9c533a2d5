"""Sandboxed programs create sockets of the address families the network
namespace does not isolate: AF_VSOCK (the hypervisor and other guests, on a
virtual machine), AF_PACKET, AF_ALG, AF_KEY, AF_BLUETOOTH and the rest, and
netlink protocols beyond NETLINK_ROUTE. The seccomp filter's allowlist
refuses each at socket() (EAFNOSUPPORT, EPROTONOSUPPORT for netlink), so no
test ever connects anywhere: that the socket cannot be created is the check.
A control shows that AF_VSOCK sockets can be created on this host unsandboxed,
as the same uid."""

from __future__ import annotations

import json

import pytest
from escape_attempts import SecurityHost, as_nobody, attack
from hostcapd.sandbox import sockets
from support.process import Client
from test_protection_reporting import capabilities_json

SOCK_STREAM, SOCK_DGRAM, SOCK_RAW, SOCK_SEQPACKET = 1, 2, 3, 5


def _program(families: dict[str, int], netlink: dict[str, int]) -> str:
    return f"""
found = {{}}
for label, family in {families!r}.items():
    for kind in ({SOCK_STREAM}, {SOCK_DGRAM}, {SOCK_SEQPACKET}, {SOCK_RAW}):
        found[f"{{label}}/{{kind}}"] = attempt(lambda: socket.socket(family, kind, 0).close())
    # socketpair takes a family too
    found[f"{{label}}/pair"] = attempt(lambda: [s.close() for s in socket.socketpair(family, 1, 0)])
for label, protocol in {netlink!r}.items():
    found[label] = attempt(lambda: socket.socket(16, {SOCK_DGRAM}, protocol).close())
unix = socket.socketpair()
found["unix_pair"] = "ok" if unix[0].send(b"x") == 1 and unix[1].recv(1) == b"x" else "broken"
found["unix"] = attempt(lambda: socket.socket(socket.AF_UNIX, socket.SOCK_STREAM).close())
found["inet"] = attempt(lambda: socket.socket(socket.AF_INET, socket.SOCK_STREAM).close())
found["inet6"] = attempt(lambda: socket.socket(socket.AF_INET6, socket.SOCK_DGRAM).close())
found["netlink_route"] = attempt(lambda: socket.socket(16, {SOCK_DGRAM}, 0).close())
found["if_nameindex"] = "ok" if [n for _, n in socket.if_nameindex()] else "empty"
report(**found)
"""


def test_host_control_vsock_sockets_can_be_created_unsandboxed() -> None:
    code = "import socket; socket.socket(40, socket.SOCK_STREAM).close(); print('made')"
    made = as_nobody("/usr/bin/python3", "-I", "-c", code)
    if made.returncode != 0:
        pytest.skip(f"this host has no AF_VSOCK: {made.stderr.strip()[-200:]}")
    assert made.stdout.strip() == "made"


@pytest.mark.parametrize("tenant", ["alpha", "layers"])
async def test_families_beyond_the_allowlist_cannot_be_created(
    tenant: str, alpha: Client, layers: Client
) -> None:
    client = {"alpha": alpha, "layers": layers}[tenant]
    found = await attack(client, _program(sockets.DENIED_EXAMPLES, sockets.DENIED_NETLINK_EXAMPLES))
    # What a tool needs still works: AF_UNIX, the tenant's network, netlink
    # routes (getaddrinfo, if_nameindex, `ip addr`).
    for kept in ("unix_pair", "unix", "inet", "inet6", "netlink_route", "if_nameindex"):
        assert found.pop(kept) == "ok", kept
    for label in sockets.DENIED_NETLINK_EXAMPLES:
        assert found.pop(label) == "EPROTONOSUPPORT", label
    assert found == dict.fromkeys(found, "EAFNOSUPPORT"), json.dumps(found)
    assert "AF_VSOCK/1" in found and "AF_PACKET/3" in found


async def test_a_tenant_without_network_sockets_gets_af_unix_only(host: SecurityHost) -> None:
    client = Client(host.socket("nonet"))
    try:
        found = await attack(
            client,
            """
report(unix=attempt(lambda: socket.socket(socket.AF_UNIX).close()),
       inet=attempt(lambda: socket.socket(socket.AF_INET).close()),
       inet6=attempt(lambda: socket.socket(socket.AF_INET6).close()),
       netlink_route=attempt(lambda: socket.socket(16, 2, 0).close()),
       vsock=attempt(lambda: socket.socket(40, 1).close()))
""",
        )
    finally:
        await client.close()
    assert found == {
        "unix": "ok",
        "inet": "EAFNOSUPPORT",
        "inet6": "EAFNOSUPPORT",
        "netlink_route": "EAFNOSUPPORT",
        "vsock": "EAFNOSUPPORT",
    }


def test_capabilities_json_lists_the_allowed_families(host: SecurityHost) -> None:
    assert capabilities_json(host.socket("alpha"))["socket_families"] == [
        "AF_UNIX",
        "AF_INET",
        "AF_INET6",
        "AF_NETLINK/NETLINK_ROUTE",
    ]
    assert capabilities_json(host.socket("nonet"))["socket_families"] == ["AF_UNIX"]
