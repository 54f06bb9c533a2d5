"""What a proxy-mode spawn sends past its proxy, and the proxy's death.

Everything that is not the spawn's loopback is routed into a tun device
that only the egress proxy reads: a sandboxed program that sends UDP, pings
or connects straight to an address fails at once (an ICMP error from the
proxy) and each attempt is a denied network.connect record. A proxy killed
under running spawns is replaced, and the running spawns are served by the
new one (the daemon kept their listeners and tun), never an open network.
An environment's spawns get the same way out, in the environment's
namespace; and the listener answers on [::1] too."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import time
from pathlib import Path
from typing import Any

import pytest
from egress_support import CURL, connects, proxies, sh
from hostcap_proto.v1 import process_pb2
from support.daemon import Daemon, children_of, spawner_pid
from support.origin import BODY, Origin
from support.process import Client, outcome, request

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the proxy mode needs root")
IPV6 = os.path.exists("/proc/sys/net/ipv6")

PROBE = """
import socket, sys
def attempt(what, make):
    try:
        make()
        print(what, "went out")
    except OSError as error:
        print(what, "refused:", error)
def udp():
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.settimeout(10)
    s.connect(("192.0.2.1", 53))
    s.send(b"exfiltrate")
    s.recv(100)
attempt("udp", udp)
# Unconnected: the kernel cannot tell the program; the datagram is still dropped and audited.
socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b"x", ("192.0.2.2", 5353))
attempt("direct", lambda: socket.create_connection(("192.0.2.3", 80), timeout=10))
attempt("metadata", lambda: socket.create_connection(("169.254.169.254", 80), timeout=10))
if "v6" in sys.argv:
    attempt("direct6", lambda: socket.create_connection(("2001:db8::1", 443), timeout=10))
attempt("loopback", lambda: socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=10))
if len(sys.argv) > 3:  # a live listener on an address of the host
    attempt("host", lambda: socket.create_connection((sys.argv[3], int(sys.argv[4])), timeout=10))
attempt("resolve", lambda: socket.getaddrinfo("allowed.test", 80))
"""


def _a_host_address() -> str | None:
    """One of the host's own non-loopback IPv4 addresses, if it has one."""
    import psutil

    for addrs in psutil.net_if_addrs().values():
        for addr in addrs:
            if addr.family == socket.AF_INET and not addr.address.startswith("127."):
                return str(addr.address)
    return None


def denied_direct(daemon: Daemon, at_least: int) -> list[dict[str, Any]]:
    return [
        r
        for r in connects(daemon, at_least=at_least)
        if r["protocol"] in ("tcp", "udp", "icmp", "ip") and not r["allowed"]
    ]


async def test_packets_past_the_proxy_fail_at_once_and_are_audited(
    proxy_daemon: tuple[Daemon, Origin, Origin, Path],
) -> None:
    daemon, plain, _secure, _cert = proxy_daemon
    v6 = "v6" if IPV6 else "-"
    # A listener on every address of the host: the spawn must not reach it.
    live = socket.create_server(("0.0.0.0", 0))
    live.setblocking(False)
    host_ip, live_port = _a_host_address(), live.getsockname()[1]
    target = f" {host_ip} {live_port}" if host_ip else ""
    started = time.monotonic()
    try:
        how, out, err = await sh(daemon, f"python3 -c '{PROBE}' {plain.port} {v6}{target}")
        took = time.monotonic() - started
        with pytest.raises(BlockingIOError):
            live.accept()  # nothing arrived
    finally:
        live.close()
    assert how == "EXITED", err
    lines = dict(line.split(" ", 1) for line in out.decode().splitlines())
    assert "udp" in lines, (out, err)
    assert all(v.startswith("refused:") for v in lines.values()), lines
    # Refused by the proxy's ICMP error, at once: not a timeout.
    assert "No route to host" in lines["udp"]
    assert "No route to host" in lines["direct"]
    assert "No route to host" in lines["metadata"]
    if IPV6:
        assert "Permission denied" in lines["direct6"]  # ICMPv6 "administratively prohibited"
    assert "Connection refused" in lines["loopback"]  # its own loopback: nothing there
    if host_ip:
        assert "No route to host" in lines["host"]
    assert took < 10, f"an attempt waited for a timeout ({took:.1f} s)"
    expected = {("udp", "192.0.2.1", 53), ("udp", "192.0.2.2", 5353), ("tcp", "192.0.2.3", 80)}
    expected.add(("tcp", "169.254.169.254", 80))
    if IPV6:
        expected.add(("tcp", "2001:db8::1", 443))
    if host_ip:
        expected.add(("tcp", host_ip, live_port))
    records = denied_direct(daemon, at_least=len(expected))
    seen = {(r["protocol"], r["host"], r["port"]): r for r in records}
    assert expected <= set(seen), seen
    udp = seen[("udp", "192.0.2.1", 53)]
    assert "skips the proxy" in udp["reason"] and udp["rule"] == ""
    assert udp["tenant"] == "dev" and udp["spawn_id"]
    assert udp["labels"] == {"session": "egress-test"}
    assert udp["address"] == "192.0.2.1" and udp["bytes_up"] == 0


async def test_a_flood_past_the_proxy_cannot_fill_the_audit_log(
    proxy_daemon: tuple[Daemon, Origin, Origin, Path],
) -> None:
    daemon = proxy_daemon[0]
    flood = (
        "import socket\n"
        "s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n"
        "for port in range(1000, 3000):\n"
        "    s.sendto(b'x', ('192.0.2.9', port))\n"
        "print('sent')\n"
    )
    how, out, err = await sh(daemon, f'python3 -c "{flood}"')
    assert (how, out) == ("EXITED", b"sent\n"), err
    # The proxy reads on after the spawn ended: wait (a correctness
    # deadline, 10 s) for the burst and a count of what it left out.
    records = denied_direct(daemon, at_least=1)
    deadline = time.monotonic() + 10
    while len(records) < 20 or not any("not recorded" in r["reason"] for r in records):
        if time.monotonic() > deadline:
            break
        await asyncio.sleep(0.1)
        records = denied_direct(daemon, at_least=1)
    # 2000 datagrams: a burst of 20, then 2 a second, and the rest counted.
    assert 20 <= len(records) < 80, len(records)
    assert any("not recorded" in r["reason"] for r in records), records[-3:]
    # The last, when the spawn ended: what was left out, counted.
    deadline = time.monotonic() + 10
    while not any("refused but not recorded" in r["reason"] for r in records):
        assert time.monotonic() < deadline, records[-3:]
        await asyncio.sleep(0.1)
        records = denied_direct(daemon, at_least=1)
    # The proxy closed the spawn's tun (on a thread) without a word of error.
    assert "Traceback" not in daemon.output() and "Exception" not in daemon.output()


@pytest.mark.skipif(CURL is None or not IPV6, reason="curl and IPv6 needed")
async def test_the_listener_answers_on_ipv6_loopback_too(
    proxy_daemon: tuple[Daemon, Origin, Origin, Path],
) -> None:
    daemon, plain, _secure, _cert = proxy_daemon
    how, out, err = await sh(
        daemon, f"curl -sS -m 20 -x 'http://[::1]:3128' http://allowed.test:{plain.port}/"
    )
    assert (how, out) == ("EXITED", BODY), err


@pytest.mark.skipif(CURL is None, reason="curl is not installed")
async def test_the_proxys_death_is_survived_by_running_and_new_spawns(
    proxy_daemon: tuple[Daemon, Origin, Origin, Path],
) -> None:
    daemon, plain, _secure, _cert = proxy_daemon
    url = f"http://allowed.test:{plain.port}/"
    [first] = proxies(daemon)
    udp = "import socket; socket.socket(2, 2).sendto(b'x', ('192.0.2.7', 7))"
    running = asyncio.ensure_future(
        sh(daemon, f'curl -sS -m 20 {url} && sleep 4 && curl -sS -m 20 {url} && python3 -c "{udp}"')
    )
    # Its first connection went through the first proxy: kill that proxy.
    deadline = time.monotonic() + 30
    while not connects(daemon) and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    os.kill(first, signal.SIGKILL)
    how, out, err = await running
    # The running spawn's second connection: through the new proxy.
    assert (how, out) == ("EXITED", BODY * 2), err
    [second] = proxies(daemon)
    assert second != first
    records = connects(daemon, at_least=3)
    assert [r["allowed"] for r in records if r["protocol"] == "http"] == [True, True]
    assert any(r["protocol"] == "udp" and r["host"] == "192.0.2.7" for r in records)
    # And a new spawn.
    how, out, err = await sh(daemon, f"curl -sS -m 20 {url}")
    assert (how, out) == ("EXITED", BODY), err


@pytest.mark.skipif(CURL is None, reason="curl is not installed")
async def test_an_environments_spawns_get_the_proxy(
    proxy_daemon: tuple[Daemon, Origin, Origin, Path],
) -> None:
    daemon, plain, _secure, _cert = proxy_daemon
    url = f"http://allowed.test:{plain.port}/"
    client = Client(daemon.socket)
    try:
        info = await client.stub.OpenEnvironment(process_pb2.OpenEnvironmentRequest())
        env = str(info.environment_id)
        for _ in range(2):
            result = await client.stub.Run(
                request(["sh", "-c", f"curl -sS -m 20 {url}"], environment_id=env)
            )
            assert (outcome(result), result.stdout) == ("EXITED", BODY), result.stderr
        result = await client.stub.Run(
            request(
                ["python3", "-c", "import socket; socket.create_connection(('192.0.2.5', 80))"],
                environment_id=env,
            )
        )
        assert b"No route to host" in result.stderr
        await client.stub.CloseEnvironment(process_pb2.CloseEnvironmentRequest(environment_id=env))
    finally:
        await client.close()
    records = connects(daemon, at_least=3)
    assert [r.get("environment_id") for r in records] == [env] * 3, records
    assert [r["protocol"] for r in records] == ["http", "http", "tcp"]


def _waiting_warm(daemon: Daemon) -> set[int]:
    """The spawner's children set up to the tenant's identity: warm ones, while nothing runs."""
    import psutil

    found = set()
    for pid in children_of(spawner_pid(daemon)):
        with contextlib.suppress(psutil.NoSuchProcess):
            if 0 not in psutil.Process(pid).uids():
                found.add(pid)
    return found


@pytest.mark.skipif(CURL is None, reason="curl is not installed")
async def test_a_proxy_tenants_warm_child_has_the_way_out_and_the_audit(
    proxy_daemon: tuple[Daemon, Origin, Origin, Path],
) -> None:
    daemon, plain, _secure, _cert = proxy_daemon
    deadline = time.monotonic() + 20
    while len(waiting := _waiting_warm(daemon)) < 2 and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    assert len(waiting) >= 2, "no warm children were made for the proxy tenant"
    how, out, err = await sh(
        daemon,
        f"curl -sS -m 20 http://allowed.test:{plain.port}/ && "
        "python3 -c \"import socket; socket.socket(2, 2).sendto(b'x', ('192.0.2.11', 9))\"",
    )
    assert (how, out) == ("EXITED", BODY), err
    # It ran in one of the children that waited (gone now), in its namespace.
    assert len([pid for pid in waiting if not Path(f"/proc/{pid}").exists()]) == 1
    records = connects(daemon, at_least=2)
    assert {r["protocol"] for r in records} == {"http", "udp"}
    assert {r["spawn_id"] for r in records} != {""} and len({r["spawn_id"] for r in records}) == 1
    assert all(r["labels"] == {"session": "egress-test"} for r in records)
