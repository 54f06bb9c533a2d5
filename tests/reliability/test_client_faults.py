"""Clients that misbehave: killed mid-stream, too slow to read, half-open,
out of time. Each must end the tree (or, for a slow reader, hold the child
back or drop its excess) and leave the daemon healthy."""

from __future__ import annotations

import asyncio
import socket
import subprocess
import sys
import time
from pathlib import Path

import grpc
import pytest
from hostcap_proto.v1 import common_pb2
from raw_http2 import RawConnection
from reliability_probes import (
    STREAMING_CLIENT,
    WideClient,
    cgroup_subtrees,
    exec_records,
    exit_records,
    first_started,
    health_problem,
    vm_rss,
    wait_cgroups_gone,
    wait_for,
)
from support.daemon import REPO, Daemon, MiB, processes_with, wait_gone
from support.process import Client, request

SPAWN = "/hostcap.v1.ProcessService/Spawn"

#: Streams output for ever and leaves a detached grandchild.
TICKER = "(setsid sleep 1000 </dev/null >/dev/null 2>&1 &); while :; do echo tick; sleep 0.01; done"


def io_written(pid: int) -> int:
    """Bytes `pid` has written (wchar of /proc/<pid>/io; 0 once it is gone)."""
    try:
        lines = Path(f"/proc/{pid}/io").read_text().splitlines()
    except OSError:
        return 0
    return next((int(line.split()[1]) for line in lines if line.startswith("wchar:")), 0)


async def rss_peak_while(daemon: Daemon, seconds: float) -> int:
    """The daemon's largest VmRSS sampled over `seconds`."""
    peak = 0
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        peak = max(peak, vm_rss(daemon.pid))
        await asyncio.sleep(0.05)
    return peak


async def idle_rss(daemon: Daemon, client: Client) -> int:
    """RSS after a warm-up spawn (lazy state, first-use allocations)."""
    for _ in range(3):
        await client.run("head", "-c", str(2 * MiB), "/dev/zero")
    await asyncio.sleep(0.2)
    return vm_rss(daemon.pid)


async def test_client_killed_mid_stream_ends_the_tree(daemon: Daemon, marker: str) -> None:
    subtrees = cgroup_subtrees(daemon)
    proc = subprocess.Popen(
        [sys.executable, "-c", STREAMING_CLIENT, str(daemon.socket), TICKER, marker],
        stdout=subprocess.PIPE,
        cwd=REPO,
    )
    assert proc.stdout is not None
    spawn_id = proc.stdout.readline().decode().strip()
    assert spawn_id, "the client process did not start its spawn"
    await wait_for(lambda: len(processes_with(marker)) >= 3, 10, "the tree to settle")

    proc.kill()
    proc.wait()

    assert wait_gone(marker, 3.0) == [], "the tree outlived its killed client"
    assert wait_cgroups_gone(subtrees, 3.0) == set()
    await wait_for(lambda: spawn_id in exit_records(daemon), 5, "the exit record")
    assert exit_records(daemon)[spawn_id]["outcome"] == "CANCELLED"
    assert await health_problem(daemon) == ""


async def test_a_client_that_stops_reading_holds_back_the_writer_within_bounded_memory(
    daemon: Daemon, marker: str
) -> None:
    """Back-pressure on the kept head: with a 64 MiB output window the daemon
    stops reading the pipe once a few MiB wait unsent, so the child blocks
    instead of the daemon buffering the window (three copies of it without
    back-pressure: queued head, kept head, tail ring)."""
    client = WideClient(daemon.socket)
    baseline = await idle_rss(daemon, client)
    produced = 200 * MiB
    call = client.stub.Spawn(
        request(
            ["head", "-c", str(produced), "/dev/zero"],
            limits={"output_bytes": 64 * MiB},
            env={"TEST_MARKER": marker},
        )
    )
    started = await first_started(call)

    peak = await rss_peak_while(daemon, 3.0)
    written_while_stalled = io_written(started.pid)

    assert written_while_stalled < 24 * MiB, (
        f"the child wrote {written_while_stalled} bytes to a client that read nothing"
    )
    assert peak - baseline < 40 * MiB, f"daemon RSS grew by {(peak - baseline) / MiB:.0f} MiB"
    # Reading again releases the writer; the accounting is exact.
    received = 0
    last = None
    async for event in call:
        if event.WhichOneof("event") == "output":
            received += len(event.output.data)
        last = event
    assert last is not None and common_pb2.Outcome.Name(last.exited.outcome) == "EXITED"
    assert last.exited.stdout.total_bytes == produced
    assert last.exited.stdout.kept_bytes == 64 * MiB
    assert last.exited.stdout.dropped_bytes == produced - 64 * MiB
    assert received > 64 * MiB  # head + dropped marker + tail
    await client.close()
    assert await health_problem(daemon) == ""


async def test_a_client_that_stops_reading_does_not_stall_output_beyond_the_window(
    daemon: Daemon, client: Client, marker: str
) -> None:
    """Drop beyond output_bytes: what falls outside the kept head and tail is
    drained and counted, so a child writing far more than the window runs to
    its end while its client reads nothing, in bounded daemon memory."""
    baseline = await idle_rss(daemon, client)
    produced = 200 * MiB
    call = client.stub.Spawn(
        request(
            ["head", "-c", str(produced), "/dev/zero"],
            limits={"output_bytes": MiB},
            env={"TEST_MARKER": marker},
        )
    )
    started = await first_started(call)
    peak = 0

    def finished() -> bool:
        nonlocal peak
        peak = max(peak, vm_rss(daemon.pid))
        return not processes_with(marker)

    await wait_for(finished, 60, "the writer to finish while its client reads nothing")
    assert started.pid and peak - baseline < 40 * MiB, f"RSS grew {(peak - baseline) / MiB:.0f} MiB"
    events = [e async for e in call]
    exited = events[-1].exited
    assert common_pb2.Outcome.Name(exited.outcome) == "EXITED"
    assert (exited.stdout.total_bytes, exited.stdout.kept_bytes) == (produced, MiB)
    assert exited.stdout.dropped_bytes == produced - MiB
    assert await health_problem(daemon) == ""


async def test_a_half_closed_connection_ends_the_tree(daemon: Daemon, marker: str) -> None:
    """The client sends its request and shuts its side of the socket down."""
    subtrees = cgroup_subtrees(daemon)
    conn = RawConnection.open(daemon.socket)
    conn.start_call(
        SPAWN, request(["sh", "-c", TICKER], env={"TEST_MARKER": marker}).SerializeToString()
    )
    await wait_for(lambda: len(processes_with(marker)) >= 3, 10, "the raw call's tree")

    conn.sock.shutdown(socket.SHUT_WR)

    assert wait_gone(marker, 3.0) == [], "the tree outlived its half-closed connection"
    conn.close()
    assert wait_cgroups_gone(subtrees, 3.0) == set()
    assert await health_problem(daemon) == ""


async def test_a_peer_that_never_reads_or_answers_cannot_keep_a_tree_past_its_limit(
    daemon: Daemon, marker: str
) -> None:
    """A half-open peer (alive, silent: never acknowledges a setting, never
    opens its window, never reads): the spawn still ends at its wall-clock
    limit with its tree and exit record, and other clients are served meanwhile."""
    subtrees = cgroup_subtrees(daemon)
    conn = RawConnection.open(daemon.socket)
    conn.start_call(
        SPAWN,
        request(
            ["sh", "-c", TICKER.replace("echo tick", "yes | head -c 100000")],
            limits={"wall_seconds": 2},
            env={"TEST_MARKER": marker},
        ).SerializeToString(),
    )
    await wait_for(lambda: len(processes_with(marker)) >= 2, 10, "the raw call's tree")
    assert await health_problem(daemon) == ""

    assert wait_gone(marker, 12.0) == [], "the tree outlived its wall-clock limit"
    assert wait_cgroups_gone(subtrees, 3.0) == set()
    ids = [s for s, r in exec_records(daemon).items() if r["argv"][0] == "sh"]
    assert len(ids) == 1
    await wait_for(lambda: ids[0] in exit_records(daemon), 5, "the exit record")
    assert exit_records(daemon)[ids[0]]["outcome"] == "TIMEOUT"
    assert await health_problem(daemon) == ""
    conn.close()


@pytest.mark.parametrize("deadline", [0.001, 0.005, 0.02, 0.05, 0.1, 0.3])
async def test_a_deadline_at_any_point_of_a_spawn_ends_its_tree(
    daemon: Daemon, client: Client, marker: str, deadline: float
) -> None:
    """Deadlines that fire before, during and after set-up and exec. Whatever
    ran is killed, every exec record gets its exit record, nothing is left."""
    subtrees = cgroup_subtrees(daemon)
    program = "(setsid sleep 1000 </dev/null >/dev/null 2>&1 &); sleep 1000"
    for streaming in (False, True):
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            req = request(["sh", "-c", program], env={"TEST_MARKER": marker})
            if streaming:
                async for _ in client.stub.Spawn(req, timeout=deadline):
                    pass
            else:
                await client.stub.Run(req, timeout=deadline)
        assert caught.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    assert wait_gone(marker, 3.0) == []
    assert wait_cgroups_gone(subtrees, 3.0) == set()
    execs = set(exec_records(daemon))
    await wait_for(lambda: execs <= set(exit_records(daemon)), 5, "an exit record for every exec")
    assert {exit_records(daemon)[s]["outcome"] for s in execs} <= {"CANCELLED"}
    assert await health_problem(daemon) == ""


async def test_many_clients_cancelling_at_random_points_leave_nothing(
    daemon: Daemon, marker: str
) -> None:
    subtrees = cgroup_subtrees(daemon)
    clients = [Client(daemon.socket) for _ in range(8)]

    async def one(i: int) -> None:
        call = clients[i % 8].stub.Spawn(request(["sh", "-c", TICKER], env={"TEST_MARKER": marker}))
        await asyncio.sleep((i % 10) * 0.015)
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            async for _ in call:
                pass

    await asyncio.gather(*(one(i) for i in range(40)))
    assert wait_gone(marker, 3.0) == []
    assert wait_cgroups_gone(subtrees, 3.0) == set()
    execs = set(exec_records(daemon))
    await wait_for(lambda: execs <= set(exit_records(daemon)), 5, "an exit record for every exec")
    for c in clients:
        await c.close()
    assert await health_problem(daemon) == ""


async def test_a_client_with_grpc_defaults_receives_the_end_of_a_big_window_spawn(
    client: Client,
) -> None:
    events = [
        e
        async for e in client.stub.Spawn(
            request(["head", "-c", str(40 * MiB), "/dev/zero"], limits={"output_bytes": 16 * MiB})
        )
    ]
    assert events[-1].WhichOneof("event") == "exited"
    assert events[-1].exited.stdout.kept_bytes == 16 * MiB


async def test_a_run_within_the_output_ceiling_delivers_its_result(daemon: Daemon) -> None:
    client = WideClient(daemon.socket)
    try:
        result = await client.run(
            "sh",
            "-c",
            "head -c 64M /dev/zero; head -c 64M /dev/zero >&2",
            limits={"output_bytes": 64 * MiB},
        )
    finally:
        await client.close()
    assert (len(result.stdout), len(result.stderr)) == (64 * MiB, 64 * MiB)
