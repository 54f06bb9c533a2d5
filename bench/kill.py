"""Row 4: kill latency, from a timeout firing to the last process of a
50-process tree gone, against a direct killpg + reap of the same tree.

The tree (tree.c) runs as a streaming Spawn on the `full` tenant with a
wall-clock limit; it prints its CLOCK_MONOTONIC start time and "ready" once
all 50 processes exist. The bench finds their host pids in /proc, holds a
pidfd on each, and notes when the last one exits. The timeout's firing time
is taken as the tree's own start + the wall limit: the daemon arms its timer
a little after the exec (once the spawner reported it), so this counts that
report delay as kill latency, never less than the truth. The exact firing
time lies between that and the moment the Started event reached the client
(+ the wall limit), which is reported too (`*_from_started`). A third
figure is the daemon's own account: the Exited event's duration (from the
moment the daemon took as the exec, just before it armed the timer, to its
end, after the init was reaped) minus the wall limit, an upper bound that
does not count the exec's report to the root, but counts the reaping and the
end's own report (`*_daemon_account`).
"""

from __future__ import annotations

import os
import statistics
import time
import uuid

from hostcap_proto.v1 import common_pb2, process_pb2

from bench.baselines import Baselines, tree_pids, wait_all_gone
from bench.client import TenantClient, outcome
from bench.native import BenchError
from bench.report import Line, Row, Target, ms

SIZE = 50
WALL = 0.4


async def daemon_kill(client: TenantClient, base: Baselines) -> tuple[float, float, float]:
    """Seconds from the timeout (tree start + WALL; Started + WALL) to the last
    process gone, and the daemon's duration - WALL."""
    marker = f"bench-tree-{uuid.uuid4().hex[:12]}"
    request = process_pb2.SpawnRequest(
        argv=[str(base.tree_exe), str(SIZE), marker], limits=common_pb2.Limits(wall_seconds=WALL)
    )
    call = client.process.Spawn(request)
    started_ns = 0
    tree_start_ns = 0
    text = b""
    events = call.__aiter__()
    while b"ready\n" not in text:
        event = await events.__anext__()
        kind = event.WhichOneof("event")
        if kind == "started":
            started_ns = time.monotonic_ns()
        elif kind == "output":
            text += event.output.data
        elif kind == "exited":
            raise BenchError(
                f"the tree ended before it was ready: {outcome(event.exited)} {event.exited.message}"
            )
    tree_start_ns = int(text.split(b"start ", 1)[1].split(b"\n", 1)[0])
    pidfds = [os.pidfd_open(pid) for pid in tree_pids(marker, SIZE)]
    if time.monotonic_ns() > tree_start_ns + WALL * 1e9:
        raise BenchError("the tree was found too late: raise WALL")
    gone_ns = wait_all_gone(pidfds, timeout=WALL + 10)
    duration = 0.0
    async for event in events:
        if event.WhichOneof("event") == "exited":
            if event.exited.outcome != common_pb2.TIMEOUT:
                raise BenchError(f"the tree ended {outcome(event.exited)}, not TIMEOUT")
            duration = event.exited.duration_seconds
    wall_ns = WALL * 1e9
    return (
        (gone_ns - tree_start_ns - wall_ns) / 1e9,
        (gone_ns - started_ns - wall_ns) / 1e9,
        duration - WALL,
    )


async def measure(base: Baselines, client: TenantClient, quick: bool) -> Row:
    trials = 8 if quick else 20
    daemon: list[float] = []
    from_started: list[float] = []
    account: list[float] = []
    direct: list[float] = []
    base.kill_tree(SIZE)  # warm-up
    for _ in range(trials):
        direct.append(base.kill_tree(SIZE))
        latency, since_started, by_daemon = await daemon_kill(client, base)
        daemon.append(latency)
        from_started.append(since_started)
        account.append(by_daemon)
    d, s, f = statistics.median(daemon), statistics.median(from_started), statistics.median(direct)
    a = statistics.median(account)
    row = Row("4 kill")
    row.figures.update(
        {
            "daemon_timeout_to_gone_us": d * 1e6,
            "daemon_from_started_us": s * 1e6,
            "direct_killpg_reap_us": f * 1e6,
            "daemon_max_us": max(daemon) * 1e6,
            "daemon_account_us": a * 1e6,
        }
    )
    row.lines.append(
        Line(
            "4",
            "timeout to 50-process tree gone / direct killpg + reap",
            d / f,
            ms(d, "s"),
            f"killpg {ms(f, 's')}",
            "kill_tree_over_floor",
            Target("<=", 2.0),
        )
    )
    row.lines.append(
        Line(
            "4",
            "same, timeout taken from Started (lower bound)",
            s / f,
            ms(s, "s"),
            f"killpg {ms(f, 's')}",
            "kill_tree_from_started_over_floor",
        )
    )
    row.lines.append(
        Line(
            "4",
            "same, the daemon's account: its duration - wall (upper bound)",
            a / f,
            ms(a, "s"),
            f"killpg {ms(f, 's')}",
            "kill_tree_daemon_account_over_floor",
        )
    )
    return row
