"""Session environments (issue 30): spawns that name one share its network
namespace and /tmp, each with its own pid namespace; nothing reaches it from
another environment or tenant; closing it ends what runs there."""

from __future__ import annotations

import ast
import asyncio
import json
import time
from collections.abc import Callable
from typing import Any

import grpc
import pytest
from hostcap_proto.errors import from_rpc_error
from hostcap_proto.v1 import common_pb2, process_pb2
from support.daemon import Daemon, audit_records, processes_with, wait_gone
from support.process import Client, request

FETCH = r"""
import json, sys, time, urllib.request
deadline = time.monotonic() + 20
while True:
    try:
        body = urllib.request.urlopen("http://127.0.0.1:8000/page.txt", timeout=5).read().decode()
        print(json.dumps({"body": body}))
        break
    except OSError as error:
        if time.monotonic() > deadline or not sys.argv[1:] == ["wait"]:
            print(json.dumps({"error": type(error).__name__, "errno": getattr(getattr(error, "reason", error), "errno", None)}))
            break
        time.sleep(0.1)
"""


async def open_env(client: Client, **kwargs: Any) -> str:
    info = await client.stub.OpenEnvironment(process_pb2.OpenEnvironmentRequest(**kwargs))
    return str(info.environment_id)


async def run(client: Client, *argv: str, **kwargs: Any) -> process_pb2.RunResult:
    result: process_pb2.RunResult = await client.stub.Run(request(list(argv), **kwargs))
    return result


def reason(error: grpc.aio.AioRpcError) -> str:
    wire = from_rpc_error(error)
    assert wire is not None, error
    return wire.reason


async def fetch(client: Client, env: str = "", wait: bool = False) -> dict[str, Any]:
    result = await run(client, "python3", "-I", "-c", FETCH, *(["wait"] if wait else []),
                       environment_id=env)  # fmt: skip
    assert result.exited.exit_code == 0, result.stderr.decode(errors="replace")
    found: dict[str, Any] = json.loads(result.stdout)
    return found


@pytest.fixture
def two_tenants(start_daemon: Callable[..., Daemon]) -> Daemon:
    return start_daemon(tenants={"alpha": {}, "beta": {}})


async def test_dev_server(two_tenants: Daemon, marker: str) -> None:
    daemon = two_tenants
    (daemon.root("alpha") / "page.txt").write_text(f"hello {marker}\n")
    alpha = Client(daemon.socket_of("alpha"))
    beta = Client(daemon.socket_of("beta"))
    env = await open_env(alpha, idle_timeout_seconds=300)
    other = await open_env(alpha)
    server = await run(
        alpha, "python3", "-m", "http.server", "8000", "--bind", "127.0.0.1",
        detached=True, environment_id=env,
    )  # fmt: skip
    spawn_id = server.started.spawn_id
    assert spawn_id and not server.HasField("exited")
    try:
        # A second spawn in the same environment reaches it on localhost.
        assert await fetch(alpha, env, wait=True) == {"body": f"hello {marker}\n"}
        # Not from another environment, a fresh spawn, or another tenant.
        assert (await fetch(alpha, other))["errno"] == 111  # ECONNREFUSED
        assert (await fetch(alpha))["errno"] == 111
        assert (await fetch(beta))["errno"] == 111
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await run(beta, "true", environment_id=env)
        assert reason(refused.value) == "NOT_FOUND"
        # The client that started it goes away; a new one reads the log by offset.
        await alpha.close()
        alpha = Client(daemon.socket_of("alpha"))
        log = b""
        offset = 0
        deadline = time.monotonic() + 20
        while b"GET /page.txt" not in log and time.monotonic() < deadline:
            answer = await alpha.stub.ReadOutput(
                process_pb2.ReadOutputRequest(spawn_id=spawn_id, offset=offset, wait_ms=2000)
            )
            log += answer.stderr + answer.stdout
            offset = answer.next_offset
        assert b"GET /page.txt" in log and answer.running
        listed = await alpha.stub.ListEnvironments(process_pb2.ListEnvironmentsRequest())
        assert {e.environment_id: list(e.spawn_ids) for e in listed.environments} == {
            env: [spawn_id],
            other: [],
        }
        # beta sees none of it.
        assert not (
            await beta.stub.ListEnvironments(process_pb2.ListEnvironmentsRequest())
        ).environments
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await beta.stub.CloseEnvironment(
                process_pb2.CloseEnvironmentRequest(environment_id=env)
            )
        assert reason(refused.value) == "NOT_FOUND"
        # Closing it ends the server; its exit record says why.
        closed = await alpha.stub.CloseEnvironment(
            process_pb2.CloseEnvironmentRequest(environment_id=env)
        )
        assert list(closed.spawns_ended) == [spawn_id]
        last = await alpha.stub.ReadOutput(
            process_pb2.ReadOutputRequest(spawn_id=spawn_id, offset=offset, wait_ms=5000)
        )
        assert not last.running
        assert common_pb2.Outcome.Name(last.exited.outcome) == "CANCELLED"
        assert "the environment closed: closed by the client" in last.exited.message
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await run(alpha, "true", environment_id=env)
        assert reason(refused.value) == "NOT_FOUND"
        await alpha.stub.CloseEnvironment(process_pb2.CloseEnvironmentRequest(environment_id=other))
    finally:
        await alpha.close()
        await beta.close()
    records = list(audit_records(daemon.audit_path))
    exit_record = [
        r for r in records if r["event"] == "process.exit" and r.get("spawn_id") == spawn_id
    ]
    assert [r["outcome"] for r in exit_record] == ["CANCELLED"]
    assert "the environment closed" in exit_record[0]["message"]
    opened = [r for r in records if r["event"] == "environment.open"]
    closes = {r["environment_id"]: r for r in records if r["event"] == "environment.close"}
    assert {r["environment_id"] for r in opened} == {env, other}
    assert closes[env]["reason"] == "closed by the client"
    assert closes[env]["spawns_ended"] == [spawn_id]


async def test_spawns_share_tmp_but_not_pids(daemon: Daemon, marker: str) -> None:
    client = Client(daemon.socket)
    try:
        env = await open_env(client)
        await run(client, "sh", "-c", f"echo shared > /tmp/note; sleep 300; : {marker}",
                  detached=True, environment_id=env)  # fmt: skip
        deadline = time.monotonic() + 10
        while not processes_with(marker) and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        looks = (
            "import os; print(open('/tmp/note').read().strip()); "
            "print(sorted(open(f'/proc/{p}/comm').read().strip() for p in os.listdir('/proc') if p.isdigit()))"
        )
        second = await run(client, "python3", "-I", "-c", looks, environment_id=env)
        fresh = await run(client, "sh", "-c", "cat /tmp/note")
        assert second.exited.exit_code == 0, second.stderr
        # The environment's /tmp; only its own processes (no sleep of the other).
        note, comms = second.stdout.decode().split("\n")[:2]
        assert note == "shared"
        assert (
            len(ast.literal_eval(comms)) == 2
            and "sleep" not in comms
            and "sh" not in ast.literal_eval(comms)
        )
        assert fresh.exited.exit_code != 0  # a fresh spawn has its own /tmp
        await client.stub.CloseEnvironment(process_pb2.CloseEnvironmentRequest(environment_id=env))
        assert wait_gone(marker, 10) == []
    finally:
        await client.close()


async def test_bounds_idle_expiry_and_lifetime(
    start_daemon: Callable[..., Daemon], marker: str
) -> None:
    daemon = start_daemon(tenants={"dev": {"max_environments": 2, "max_environment_seconds": 6}})
    client = Client(daemon.socket)
    try:
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await open_env(client, lifetime_seconds=10)
        assert reason(refused.value) == "LIMIT_INVALID"
        idle = await open_env(client, idle_timeout_seconds=0.5)
        busy = await open_env(client)
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await open_env(client)
        assert reason(refused.value) == "QUOTA_EXCEEDED"
        sleeper = await run(client, "sh", "-c", f"sleep 300; : {marker}", detached=True,
                            environment_id=busy)  # fmt: skip
        # The idle one expires 0.5 s after its last use; the busy one lives
        # 6 s from its open: wait for the first (a deadline well inside the
        # second, whatever the host's load made of the steps above).
        deadline = time.monotonic() + 4
        while True:
            names = {
                e.environment_id
                for e in (
                    await client.stub.ListEnvironments(process_pb2.ListEnvironmentsRequest())
                ).environments
            }
            if idle not in names or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.1)
        assert names == {busy}  # the idle one expired; the busy one has not
        assert wait_gone(marker, 15) == []  # its lifetime (6 s) ended what ran in it
        last = await client.stub.ReadOutput(
            process_pb2.ReadOutputRequest(spawn_id=sleeper.started.spawn_id, wait_ms=5000)
        )
        assert "lifetime of 6 s" in last.exited.message
        assert not (
            await client.stub.ListEnvironments(process_pb2.ListEnvironmentsRequest())
        ).environments
    finally:
        await client.close()
    reasons = {
        r["environment_id"]: r["reason"]
        for r in audit_records(daemon.audit_path)
        if r["event"] == "environment.close"
    }
    assert reasons == {idle: "it was idle for 0.5 s", busy: "its lifetime of 6 s was reached"}


async def test_nothing_outlives_its_environment(daemon: Daemon, marker: str) -> None:
    """A background process double-forks and setsids to outlive the close."""
    client = Client(daemon.socket)
    try:
        env = await open_env(client)
        escape = (
            f"(setsid sh -c 'trap \"\" HUP TERM; while :; do sleep 1; done; : {marker}-grandchild' &) ; "
            f"sleep 300; : {marker}"
        )
        await run(client, "sh", "-c", escape, detached=True, environment_id=env)
        deadline = time.monotonic() + 30
        while not processes_with(f"{marker}-grandchild") and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
        assert processes_with(f"{marker}-grandchild"), "the escape did not start"
        await client.stub.CloseEnvironment(process_pb2.CloseEnvironmentRequest(environment_id=env))
        assert wait_gone(marker, 10) == []
    finally:
        await client.close()


async def test_daemon_stop_leaves_nothing(start_daemon: Callable[..., Daemon], marker: str) -> None:
    daemon = start_daemon()
    client = Client(daemon.socket)
    env = await open_env(client)
    await run(client, "sh", "-c", f"sleep 300; : {marker}", detached=True, environment_id=env)
    await client.close()
    daemon.stop()
    assert wait_gone(marker, 20) == []
    records = list(audit_records(daemon.audit_path))
    assert [r["outcome"] for r in records if r["event"] == "process.exit"] == ["DAEMON_SHUTDOWN"]
    closes = [r for r in records if r["event"] == "environment.close"]
    assert [r["reason"] for r in closes] == ["the daemon is shutting down"]


SYSV = r"""
import ctypes, sys
libc = ctypes.CDLL(None, use_errno=True)
IPC_CREAT, KEY = 0o1000, 0x5E55
if sys.argv[1] == "make":
    shmid = libc.shmget(KEY, 4096, IPC_CREAT | 0o600)
else:
    shmid = libc.shmget(KEY, 0, 0)
print(shmid >= 0)
"""


async def test_spawns_share_sysv_ipc(daemon: Daemon) -> None:
    """The environment's IPC namespace: a System V segment one spawn made is
    found by the next in it, not by a fresh spawn."""
    client = Client(daemon.socket)
    try:
        env = await open_env(client)
        made = await run(client, "python3", "-I", "-c", SYSV, "make", environment_id=env)
        found = await run(client, "python3", "-I", "-c", SYSV, "find", environment_id=env)
        fresh = await run(client, "python3", "-I", "-c", SYSV, "find")
        assert (made.stdout, found.stdout, fresh.stdout) == (b"True\n", b"True\n", b"False\n")
        await client.stub.CloseEnvironment(process_pb2.CloseEnvironmentRequest(environment_id=env))
    finally:
        await client.close()
