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

from bench.baselines import Baselines
from bench.client import TenantClient
from bench.report import Line, Row, Target

CLIENTS = 8


async def daemon_rate(socket: Path, seconds: float, clients: int = CLIENTS) -> float:
    """Spawns per second of `clients` channels running /bin/true until `seconds` pass."""
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
        return done / (time.perf_counter() - start)
    finally:
        for c in channels:
            await c.close()


async def measure(base: Baselines, sockets: dict[str, Path], quick: bool) -> Row:
    windows = 2 if quick else 5
    seconds = 1.0 if quick else 2.0
    rates: dict[str, list[float]] = {"bwrap": [], "full": [], "nocg": []}
    for _ in range(windows):
        rates["bwrap"].append(base.bwrap_flood(CLIENTS, seconds))
        rates["full"].append(await daemon_rate(sockets["full"], seconds))
        rates["nocg"].append(await daemon_rate(sockets["nocg"], seconds))
    med = {name: statistics.median(v) for name, v in rates.items()}
    row = Row("2 throughput")
    for name, value in med.items():
        row.figures[f"{name}.spawns_per_s"] = value
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
