"""The split daemon as its users see it: each tenant's socket is served by
a front-end process of its own, unprivileged and confined; the root
process holds no tenant socket; a front-end that dies takes its tenant's
running spawns with it (DAEMON_SHUTDOWN, trees gone) and is restarted,
serving the same path again."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import socket
import struct
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import grpc
import pytest
from hostcap_proto.v1 import host_pb2, host_pb2_grpc
from support.daemon import (
    NOBODY,
    Daemon,
    audit_records,
    children_of,
    cmdline,
    processes_with,
    wait_gone,
)
from support.process import Client, request

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0, reason="the split runs front-ends as another user"
)


CTL = (sys.executable, "-m", "hostcap.ctl.main")


def frontends(daemon: Daemon) -> list[int]:
    return [p for p in children_of(daemon.pid) if b"hostcapd.frontend" in cmdline(p)]


def status(pid: int) -> dict[str, str]:
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        fields[key] = value.strip()
    return fields


def listener_of(path: Path) -> tuple[int, int]:
    """(pid, uid) of the process that listens at `path`: SO_PEERCRED of a
    connection is the listener's credentials from its listen()."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as client:
        client.connect(str(path))
        creds = client.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    pid, uid, _ = struct.unpack("3i", creds)
    return pid, uid


def wait_for(check: Callable[[], bool], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.02)
    return check()


async def test_each_tenant_socket_is_served_by_its_own_confined_frontend(
    start_daemon: Callable[..., Daemon],
) -> None:
    daemon = start_daemon(tenants={"one": {}, "two": {}})
    pids = frontends(daemon)
    assert len(pids) == 3  # the tenants' and the admin socket's
    for pid in pids:
        s = status(pid)
        uid = int(s["Uid"].split()[0])
        assert uid not in (0, NOBODY)  # the dedicated user (the tenants' children are nobody)
        assert s["Uid"].split() == [str(uid)] * 4
        assert s["Groups"] == ""
        assert s["NoNewPrivs"] == "1" and s["Seccomp"] == "2"
        assert s["CapEff"] == s["CapPrm"] == s["CapInh"] == s["CapAmb"] == "0" * 16
    # The listening sockets are the front-ends', none the root process's.
    # The listening sockets are the front-ends', one each, none the root's.
    sockets = [daemon.socket_of("one"), daemon.socket_of("two"), daemon.admin_socket]
    owners = {listener_of(path)[0] for path in sockets}
    assert owners == set(pids)
    for tenant in ("one", "two"):
        client = Client(daemon.socket_of(tenant))
        try:
            result = await client.run("/usr/bin/id", "-u")
            assert result.stdout == f"{NOBODY}\n".encode()
            async with grpc.aio.insecure_channel(f"unix:{daemon.socket_of(tenant)}") as channel:
                stub = host_pb2_grpc.HostServiceStub(channel)  # type: ignore[no-untyped-call]
                caps = await stub.Capabilities(host_pb2.CapabilitiesRequest())
            assert caps.tenant == tenant
            applied = {p.name: p.applied for p in caps.frontend_protections}
            assert applied == dict.fromkeys(
                (
                    "uid_drop",
                    "no_new_privs",
                    "not_dumpable",
                    "no_capabilities",
                    "landlock",
                    "seccomp",
                ),
                True,
            )
            assert caps.frontend_uid not in (0, NOBODY)
        finally:
            await client.close()


async def test_a_frontend_has_an_empty_capability_bounding_set(
    start_daemon: Callable[..., Daemon],
) -> None:
    # Read from /proc of the live front-ends: every bit of CapBnd is gone, as
    # for a spawn, while the root process keeps its own (the contrast shows
    # the read is of the right thing).
    daemon = start_daemon(tenants={"one": {}})
    pids = frontends(daemon)
    assert len(pids) == 2  # the tenant's and the admin socket's
    for pid in pids:
        assert status(pid)["CapBnd"] == "0" * 16, pid
    assert int(status(daemon.pid)["CapBnd"], 16) != 0
    # And it says so where `hostcapctl capabilities` shows it.
    async with grpc.aio.insecure_channel(f"unix:{daemon.socket_of('one')}") as channel:
        stub = host_pb2_grpc.HostServiceStub(channel)  # type: ignore[no-untyped-call]
        caps = await stub.Capabilities(host_pb2.CapabilitiesRequest())
    (reported,) = [p for p in caps.frontend_protections if p.name == "no_capabilities"]
    assert reported.applied and "the bounding set is empty" in reported.reason


async def test_a_frontend_that_dies_ends_its_spawns_and_serves_again(
    start_daemon: Callable[..., Daemon], marker: str
) -> None:
    daemon = start_daemon(tenants={"one": {}, "two": {}})
    victim, _ = listener_of(daemon.socket_of("one"))
    client = Client(daemon.socket_of("one"))
    other = Client(daemon.socket_of("two"))
    try:
        call = client.stub.Spawn(request(["/bin/sleep", "300"], env={"TEST_MARKER": marker}))
        first = await call.read()
        assert first.WhichOneof("event") == "started"
        assert wait_for(lambda: bool(processes_with(marker)), 5)
        os.kill(victim, signal.SIGKILL)
        with pytest.raises(grpc.aio.AioRpcError) as failed:
            while await call.read() is not grpc.aio.EOF:
                pass
        assert failed.value.code() == grpc.StatusCode.UNAVAILABLE
        assert wait_gone(marker, 5) == []  # its tree is gone
        # The other tenant never noticed.
        assert (await other.run("/bin/echo", "fine")).stdout == b"fine\n"
        # A new front-end took the same path.
        assert wait_for(lambda: len(frontends(daemon)) == 3 and victim not in frontends(daemon), 10)
        for _ in range(100):
            try:
                result = await client.run("/bin/echo", "again")
                break
            except grpc.aio.AioRpcError:
                await asyncio.sleep(0.1)
        assert result.stdout == b"again\n"
        exits = [
            r
            for r in audit_records(daemon.audit_path)
            if r["event"] == "process.exit" and r.get("spawn_id") == first.started.spawn_id
        ]
        assert [r["outcome"] for r in exits] == ["DAEMON_SHUTDOWN"]
        assert re.search("front-end", exits[0]["message"])
    finally:
        await client.close()
        await other.close()


def test_hostcapctl_capabilities_reports_the_split(start_daemon: Callable[..., Daemon]) -> None:
    daemon = start_daemon()
    done = subprocess.run(
        [*CTL, "--socket", str(daemon.socket), "capabilities", "--json"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert {p["name"]: p["applied"] for p in data["frontend_protections"]} == dict.fromkeys(
        ("uid_drop", "no_new_privs", "not_dumpable", "no_capabilities", "landlock", "seccomp"),
        True,
    )
    assert data["frontend_uid"] == listener_of(daemon.socket)[1] not in (0, NOBODY)


def test_without_frontend_processes_the_root_process_serves(
    start_daemon: Callable[..., Daemon],
) -> None:
    daemon = start_daemon(daemon={"frontend_processes": False})
    assert frontends(daemon) == []
    assert listener_of(daemon.socket) == (daemon.pid, 0)
