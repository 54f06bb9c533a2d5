"""Who asked (issue 33, item 3; decision 0033), against a real daemon: the
records a call causes name the process that made it (uid, gid, pid, as its
front-end read them with SO_PEERCRED), on a tenant's socket and on the
admin socket; `hostcapctl audit query` selects by them and shows them; and
the front-end's inner gRPC socket is out of reach of the host and of
another tenant's front-end."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import grpc
import pytest
from hostcap_proto.v1 import admin_pb2, admin_pb2_grpc, fs_pb2, fs_pb2_grpc, process_pb2
from ops_support import hostcapctl, wait_admin
from support.daemon import NOBODY, REPO, Daemon, audit_records, children_of, cmdline
from support.process import Client, request

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="front-ends run as another user")

#: A tenant whose socket nobody may reach (its spawns run as uid 1, as in
#: test_admin_socket: a socket group the run-as identity belongs to is refused).
NOBODY_CONNECTS = {"socket_group": NOBODY, "run_as_user": 1, "run_as_group": 1}
ME = {"uid": os.getuid(), "gid": os.getgid(), "pid": os.getpid()}


def records(daemon: Daemon, event: str, **match: Any) -> list[dict[str, Any]]:
    return [
        r
        for r in audit_records(daemon.audit_path)
        if r["event"] == event and all(r.get(k) == v for k, v in match.items())
    ]


async def test_a_spawn_a_refusal_and_a_write_name_the_calling_process(
    start_daemon: Callable[..., Daemon],
) -> None:
    daemon = start_daemon(tenants={"dev": NOBODY_CONNECTS})
    client = Client(daemon.socket)
    channel = grpc.aio.insecure_channel(f"unix:{daemon.socket}")
    try:
        result = await client.run("true", request_id="mine")
        (exec_record,) = records(daemon, "process.exec", spawn_id=result.started.spawn_id)
        assert exec_record["caller"] == ME
        assert await client.refusal("/nonexistent/program", request_id="refused") != ""
        (deny,) = records(daemon, "policy.deny", request_id="refused")
        assert deny["caller"] == ME
        fs = fs_pb2_grpc.FsServiceStub(channel)  # type: ignore[no-untyped-call]
        await fs.WriteFile(fs_pb2.WriteFileRequest(path="who.txt", data=b"x", request_id="w"))
        (write,) = records(daemon, "file.write", request_id="w")
        assert write["caller"] == ME
        env = await client.stub.OpenEnvironment(process_pb2.OpenEnvironmentRequest())
        await client.stub.CloseEnvironment(
            process_pb2.CloseEnvironmentRequest(environment_id=env.environment_id)
        )
        for event in ("environment.open", "environment.close"):
            (record,) = records(daemon, event, environment_id=env.environment_id)
            assert record["caller"] == ME, event
        # What a caller types into a spawn's input names it too.
        cat = client.stub.Spawn(request(["cat"], stdin_open=True))
        async for event in cat:
            spawn_id = event.started.spawn_id
            break
        await client.stub.WriteStdin(
            process_pb2.WriteStdinRequest(spawn_id=spawn_id, data=b"typed\n", close=True)
        )
        [e async for e in cat]
        (typed,) = records(daemon, "process.input", spawn_id=spawn_id)
        assert typed["caller"] == ME
    finally:
        await client.close()
        await channel.close(None)

    # Another process, of another uid, on its own connection: its own pid and uid.
    # Imports first, as root (the interpreter may live where nobody cannot
    # read); the identity is dropped before it connects.
    script = (
        "import os, sys, grpc\n"
        "from hostcap_proto.v1 import process_pb2, process_pb2_grpc\n"
        "os.setgroups([]); os.setgid(int(sys.argv[2])); os.setuid(int(sys.argv[2]))\n"
        "with grpc.insecure_channel('unix:' + sys.argv[1]) as channel:\n"
        "    stub = process_pb2_grpc.ProcessServiceStub(channel)\n"
        "    r = stub.Run(process_pb2.SpawnRequest(argv=['true'], request_id='other'), timeout=30)\n"
        "    print(r.started.spawn_id)\n"
    )
    other = subprocess.Popen(
        [sys.executable, "-c", script, str(daemon.socket), str(NOBODY)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
    )
    out, err = other.communicate(timeout=60)
    assert other.returncode == 0, err
    (theirs,) = records(daemon, "process.exec", spawn_id=out.strip())
    assert theirs["caller"] == {"uid": NOBODY, "gid": NOBODY, "pid": other.pid}

    # audit query selects by the caller and shows it.
    mine = hostcapctl(
        "audit", "query", "--file", str(daemon.audit_path), "--caller-pid", str(other.pid),
        "--format", "json",
    )  # fmt: skip
    assert mine.returncode == 0, mine.stderr
    # Its exec names it; its exit is selected by its exec's caller.
    selected = json.loads(mine.stdout)
    assert [(r["event"], r["spawn_id"]) for r in selected] == [
        ("process.exec", theirs["spawn_id"]),
        ("process.exit", theirs["spawn_id"]),
    ]
    by_uid = hostcapctl(
        "audit", "query", "--file", str(daemon.audit_path), "--caller-uid", str(NOBODY),
    )  # fmt: skip
    assert by_uid.returncode == 0, by_uid.stderr
    assert f"[by uid {NOBODY} pid {other.pid}]" in by_uid.stdout
    assert f"pid {os.getpid()}]" not in by_uid.stdout


async def test_an_admin_kill_and_an_audit_read_name_their_caller(
    daemon: Daemon, client: Client
) -> None:
    wait_admin(daemon)
    call = client.stub.Spawn(request(["sleep", "1000"]))
    async for event in call:
        assert event.WhichOneof("event") == "started"
        spawn_id = event.started.spawn_id
        break
    channel = grpc.aio.insecure_channel(f"unix:{daemon.admin_socket}")
    try:
        admin = admin_pb2_grpc.AdminServiceStub(channel)  # type: ignore[no-untyped-call]
        await admin.Kill(admin_pb2.KillRequest(spawn_id=spawn_id))
        lines = [line async for line in admin.QueryAudit(admin_pb2.QueryAuditRequest())]
    finally:
        await channel.close(None)
        call.cancel()
    (kill,) = records(daemon, "admin.call", method="Kill")
    assert kill["caller"] == ME
    assert (kill["spawn_id"], kill["tenant"]) == (spawn_id, "dev")
    (query,) = records(daemon, "admin.call", method="QueryAudit")
    assert query["caller"] == ME and "tenant" not in query and "asked" not in query
    # The kill's record comes before the exit it caused; a read's after what it read.
    (exit_record,) = records(daemon, "process.exit", spawn_id=spawn_id)
    assert kill["seq"] < exit_record["seq"] < query["seq"]
    assert [line.json for line in lines if "QueryAudit" in line.json] == []


# --- the front-end's inner socket ----------------------------------------------------


def _connect_inner(netns_of: int | None) -> str:
    """connect() to the front-ends' inner abstract name, from the host's
    network namespace or from the one of the process `netns_of`."""
    script = (
        "import errno, socket\n"
        "s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)\n"
        "try:\n"
        "    s.connect('\\0h')\n"
        "    print('OK')\n"
        "except OSError as e:\n"
        "    print(errno.errorcode[e.errno])\n"
    )
    enter = ["nsenter", f"--net=/proc/{netns_of}/ns/net"] if netns_of else []
    done = subprocess.run(
        [*enter, sys.executable, "-I", "-c", script],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    return done.stdout.strip()


def test_the_inner_socket_is_in_the_front_ends_own_network_namespace(
    start_daemon: Callable[..., Daemon],
) -> None:
    daemon = wait_admin(start_daemon(tenants={"dev": {}, "ci": {}}))
    frontends = [p for p in children_of(daemon.pid) if b"hostcapd.frontend" in cmdline(p)]
    assert len(frontends) == 3, frontends  # two tenants and the admin socket
    host = os.readlink("/proc/self/ns/net")
    namespaces = {os.readlink(f"/proc/{pid}/ns/net") for pid in frontends}
    assert host not in namespaces and len(namespaces) == 3
    # Reachable inside a front-end's namespace (the control), from nowhere else.
    assert _connect_inner(frontends[0]) == "OK"
    assert _connect_inner(None) == "ECONNREFUSED"
    with (
        socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock,
        pytest.raises(ConnectionRefusedError),
    ):
        sock.connect("\0h")
