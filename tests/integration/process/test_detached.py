"""Detached spawns (issue 30): they outlive their call and the client's
connection, their output is read by offset, and they are bounded by the
tenant's max_background_seconds and max_detached_spawns."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import grpc
import psutil
import pytest
from hostcap_proto.errors import from_rpc_error
from hostcap_proto.v1 import common_pb2, process_pb2
from support.daemon import Daemon, audit_records, processes_with, wait_gone
from support.process import Client, request


async def detach(client: Client, *argv: str, **kwargs: Any) -> str:
    result = await client.stub.Run(request(list(argv), detached=True, **kwargs))
    assert result.started.spawn_id and not result.HasField("exited"), result
    return str(result.started.spawn_id)


async def read(
    client: Client, spawn_id: str, offset: int = 0, wait_ms: int = 0
) -> process_pb2.ReadOutputResponse:
    answer: process_pb2.ReadOutputResponse = await client.stub.ReadOutput(
        process_pb2.ReadOutputRequest(spawn_id=spawn_id, offset=offset, wait_ms=wait_ms)
    )
    return answer


async def read_until_ended(
    client: Client, spawn_id: str, offset: int = 0
) -> tuple[bytes, bytes, Any]:
    out, err = b"", b""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        answer = await read(client, spawn_id, offset, wait_ms=2000)
        out, err, offset = out + answer.stdout, err + answer.stderr, answer.next_offset
        if not answer.running:
            return out, err, answer
    raise AssertionError("the detached spawn did not end")


def reason(error: grpc.aio.AioRpcError) -> str:
    wire = from_rpc_error(error)
    assert wire is not None, error
    return wire.reason


async def test_outlives_the_connection_and_is_read_by_offset(daemon: Daemon, marker: str) -> None:
    first = Client(daemon.socket)
    spawn_id = await detach(
        first,
        "sh",
        "-c",
        f"echo start-{marker}; read x </dev/null; sleep 1; echo middle >&2; sleep 1; echo end",
    )
    await first.close()  # the client goes away: the spawn runs on
    second = Client(daemon.socket)
    try:
        listed = await second.stub.List(process_pb2.ListRequest())
        assert [s.detached for s in listed.spawns if s.spawn_id == spawn_id] == [True]
        answer = await read(second, spawn_id, 0, wait_ms=5000)
        assert answer.stdout.startswith(f"start-{marker}".encode())
        assert answer.running
        out, err, last = await read_until_ended(second, spawn_id, answer.next_offset)
        assert answer.stdout + out == f"start-{marker}\nend\n".encode()
        assert err == b"middle\n"
        assert last.next_offset == len(answer.stdout + out + err)
        assert common_pb2.Outcome.Name(last.exited.outcome) == "EXITED"
        assert last.exited.stdout.total_bytes == len(answer.stdout + out)
        # Reading again from 0 gives it all once more; past the end is refused.
        again = await read(second, spawn_id, 0)
        assert (again.stdout, again.stderr) == (answer.stdout + out, err)
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await read(second, spawn_id, last.next_offset + 1)
        assert reason(refused.value) == "INVALID_ARGUMENT"
    finally:
        await second.close()
    records = [
        r
        for r in audit_records(daemon.audit_path)
        if r.get("spawn_id") == spawn_id and r["event"] == "process.exit"
    ]
    assert [r["outcome"] for r in records] == ["EXITED"]


async def test_wait_ms_returns_as_output_comes(client: Client) -> None:
    spawn_id = await detach(client, "sh", "-c", "sleep 1; echo late")
    begun = time.monotonic()
    answer = await read(client, spawn_id, 0, wait_ms=20000)
    assert answer.stdout == b"late\n"
    assert time.monotonic() - begun < 15  # woken by the output, not the wait's end
    nothing = await read(client, spawn_id, answer.next_offset, wait_ms=0)
    assert nothing.stdout == b"" and nothing.next_offset == answer.next_offset


async def test_signal_ends_it_and_the_exit_record_says_so(daemon: Daemon, client: Client) -> None:
    spawn_id = await detach(client, "sleep", "300")
    await client.stub.Signal(process_pb2.SignalRequest(spawn_id=spawn_id, signal=9))
    _, _, last = await read_until_ended(client, spawn_id)
    assert common_pb2.Outcome.Name(last.exited.outcome) == "SIGNALED"


async def test_yes_keeps_the_buffer_bounded_and_counts_exact(
    start_daemon: Callable[..., Daemon], marker: str
) -> None:
    daemon = start_daemon(
        tenants={
            "dev": {
                "max_background_seconds": 3,
                # yes writes GiB a second: only the background limit ends it.
                "limits": {"ceiling": {"total_output_bytes": 1 << 40}},
            }
        }
    )
    client = Client(daemon.socket)
    try:
        spawn_id = await detach(
            client, "sh", "-c", f"exec yes {marker}", limits={"output_bytes": 64 * 1024}
        )
        rss = []
        for _ in range(5):
            await asyncio.sleep(0.5)
            rss.append(psutil.Process(daemon.pid).memory_info().rss)
        _, _, last = await read_until_ended(client, spawn_id)
        # Past max_background_seconds: killed, TIMEOUT, the message naming it.
        assert common_pb2.Outcome.Name(last.exited.outcome) == "TIMEOUT"
        assert "background limit of 3 s" in last.exited.message
        stats = last.exited.stdout
        assert stats.total_bytes > 10 * 1024 * 1024  # it wrote a lot more than is kept
        assert stats.kept_bytes + stats.dropped_bytes == stats.total_bytes
        assert stats.kept_bytes <= 128 * 1024
        # What a full read returns is exactly what is kept, and the gap the dropped count.
        everything = await read(client, spawn_id, 0)
        assert len(everything.stdout) == stats.kept_bytes
        assert everything.dropped_bytes == stats.dropped_bytes
        assert everything.next_offset == stats.total_bytes
        line = f"{marker}\n".encode()
        assert everything.stdout.startswith(line * 10)
        # The daemon's memory did not follow the output (tens of MiB written).
        assert max(rss) - min(rss) < 16 * 1024 * 1024, rss
    finally:
        await client.close()


async def test_past_the_count_is_refused(start_daemon: Callable[..., Daemon], marker: str) -> None:
    daemon = start_daemon(tenants={"dev": {"max_detached_spawns": 2}})
    client = Client(daemon.socket)
    try:
        ids = [await detach(client, "sh", "-c", f"sleep 300; : {marker}") for _ in range(2)]
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await detach(client, "sh", "-c", f"sleep 300; : {marker}")
        assert reason(refused.value) == "QUOTA_EXCEEDED"
        # An attached spawn is not counted among them.
        result = await client.run("true")
        assert result.exited.exit_code == 0
        for spawn_id in ids:
            await client.stub.Signal(process_pb2.SignalRequest(spawn_id=spawn_id, signal=9))
        assert wait_gone(marker, 20) == []
        await detach(client, "true")  # room again
    finally:
        await client.close()


async def test_another_tenants_spawn_is_not_found(
    start_daemon: Callable[..., Daemon], marker: str
) -> None:
    daemon = start_daemon(tenants={"alpha": {}, "beta": {}})
    alpha, beta = Client(daemon.socket_of("alpha")), Client(daemon.socket_of("beta"))
    try:
        spawn_id = await detach(alpha, "sh", "-c", f"echo secret-{marker}; sleep 300")
        for call in (
            read(beta, spawn_id),
            beta.stub.Signal(process_pb2.SignalRequest(spawn_id=spawn_id, signal=9)),
        ):
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await call
            assert reason(refused.value) == "NOT_FOUND"
        listed = await beta.stub.List(process_pb2.ListRequest())
        assert spawn_id not in [s.spawn_id for s in listed.spawns]
        assert processes_with(marker)  # still running, untouched
        answer = await read(alpha, spawn_id, 0, wait_ms=5000)
        assert answer.stdout == f"secret-{marker}\n".encode() and answer.running
    finally:
        await alpha.close()
        await beta.close()


async def test_daemon_stop_ends_it_daemon_shutdown(
    start_daemon: Callable[..., Daemon], marker: str
) -> None:
    daemon = start_daemon()
    client = Client(daemon.socket)
    spawn_id = await detach(client, "sh", "-c", f"sleep 300; : {marker}")
    await client.close()
    daemon.stop()
    assert wait_gone(marker, 20) == []
    records = [
        r
        for r in audit_records(daemon.audit_path)
        if r.get("spawn_id") == spawn_id and r["event"] == "process.exit"
    ]
    assert [r["outcome"] for r in records] == ["DAEMON_SHUTDOWN"]
