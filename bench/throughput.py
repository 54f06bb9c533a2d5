"""Row 2: spawns per second with 8 concurrent clients, against bwrap 8-way.

Windows alternate: bwrap with 8 always in flight (C, each until its tree is
reaped), then 8 clients on 8 channels each running /bin/true back to back on
the `full` tenant (and on `nocg`). A window's rate is completed spawns over
the time until the last one finished; the row reports the median window.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from pathlib import Path

from bench import procfs
from bench.baselines import Baselines
from bench.client import TenantClient
from bench.daemon import BenchDaemon
from bench.report import Line, Row, Target

CLIENTS = 8


async def daemon_rate(socket: Path, seconds: float, clients: int = CLIENTS) -> tuple[int, float]:
    """Spawns done and seconds taken by `clients` channels running /bin/true
    back to back until `seconds` have passed (and the last one finished)."""
    channels = [TenantClient(socket) for _ in range(clients)]
    try:
        for c in channels:  # connect outside the window
            await c.health_rtt()
        done = 0
        deadline = time.perf_counter() + seconds

        async def loop(client: TenantClient) -> None:
            nonlocal done
            while time.perf_counter() < deadline:
                await client.true()
                done += 1

        start = time.perf_counter()
        await asyncio.gather(*(loop(c) for c in channels))
        return done, time.perf_counter() - start
    finally:
        for c in channels:
            await c.close()


async def measure(base: Baselines, daemon: BenchDaemon, quick: bool) -> Row:
    windows = 2 if quick else 5
    seconds = 1.0 if quick else 2.0
    rates: dict[str, list[float]] = {"bwrap": [], "full": [], "nocg": []}
    spawner = daemon.helper_pids()["spawner"]
    cpu_ms: dict[str, list[float]] = {
        "full": [],
        "nocg": [],
        "full_spawner": [],
        "nocg_spawner": [],
    }
    for _ in range(windows):
        rates["bwrap"].append(base.bwrap_flood(CLIENTS, seconds))
        for tenant in ("full", "nocg"):
            front, back = procfs.cpu_seconds(daemon.pid), procfs.cpu_seconds(spawner)
            spawns, elapsed = await daemon_rate(daemon.socket(tenant), seconds)
            rates[tenant].append(spawns / elapsed)
            cpu_ms[tenant].append((procfs.cpu_seconds(daemon.pid) - front) * 1e3 / spawns)
            cpu_ms[f"{tenant}_spawner"].append((procfs.cpu_seconds(spawner) - back) * 1e3 / spawns)
    med = {name: statistics.median(v) for name, v in rates.items()}
    row = Row("2 throughput")
    for name, value in med.items():
        row.figures[f"{name}.spawns_per_s"] = value
    # CPU per spawn of the front-end and the spawner, from /proc/<pid>/stat.
    for name, values in cpu_ms.items():
        row.figures[f"{name}.cpu_ms_per_spawn"] = statistics.median(values)
    row.lines.append(
        Line(
            "2",
            "8 clients, default + cgroup / bwrap 8-way",
            med["full"] / med["bwrap"],
            f"{med['full']:.0f}/s",
            f"bwrap {med['bwrap']:.0f}/s",
            "throughput_8_clients_over_bwrap",
            Target(">=", 1.5),
        )
    )
    row.lines.append(
        Line(
            "2",
            "8 clients, default, no cgroup / bwrap 8-way",
            med["nocg"] / med["bwrap"],
            f"{med['nocg']:.0f}/s",
            f"bwrap {med['bwrap']:.0f}/s",
        )
    )
    return row
