"""Row 6: daemon memory. Idle RSS of a one-tenant daemon (default profile)
over a bare grpc.aio server's, both measured after the same settling time;
then RSS after N spawns (10,000 in the full run) with 8 concurrent clients,
against the RSS after a warm-up of 200 spawns (one-time allocations: the
executable hash cache, gRPC's buffers, the allocator's arenas), so what grows
with the number of spawns shows. Front-end process only (VmRSS); the
spawner's and the fs worker's are reported as figures.
"""

from __future__ import annotations

import asyncio
import time

from bench import procfs
from bench.client import TenantClient
from bench.daemon import BenchDaemon, MiB
from bench.report import Line, Row, Target

WARM_UP = 200


async def spawn_many(daemon: BenchDaemon, n: int) -> float:
    """Run /bin/true n times (8 clients) on the memory daemon; seconds taken."""
    clients = [TenantClient(daemon.socket("full")) for _ in range(8)]
    start = time.perf_counter()
    try:
        counter = iter(range(n))

        async def loop(client: TenantClient) -> None:
            for _ in counter:
                await client.true()

        await asyncio.gather(*(loop(c) for c in clients))
    finally:
        for c in clients:
            await c.close()
    return time.perf_counter() - start


async def measure(
    daemon: BenchDaemon, idle_rss: int, grpc_idle_rss: int, quick: bool, frontend_idle_rss: int = 0
) -> Row:
    n = 500 if quick else 10_000
    await spawn_many(daemon, WARM_UP)
    warm = procfs.rss_bytes(daemon.pid)
    seconds = await spawn_many(daemon, n)
    after = procfs.rss_bytes(daemon.pid)
    growth_pct = (after - warm) / warm * 100
    row = Row("6 memory")
    row.figures.update(
        {
            "idle_rss_mb": idle_rss / MiB,
            "grpc_floor_idle_rss_mb": grpc_idle_rss / MiB,
            "rss_after_warm_up_mb": warm / MiB,
            "rss_after_spawns_mb": after / MiB,
            "spawns": n,
            "spawns_per_s": n / seconds,
            "growth_pct_from_idle": (after - idle_rss) / idle_rss * 100,
        }
    )
    for role, pid in daemon.helper_pids().items():
        row.figures[f"{role}_rss_mb"] = procfs.rss_bytes(pid) / MiB
    if frontend_idle_rss:
        # The split (decision 0027): what each tenant's front-end process
        # costs, idle, against the same bare server.
        row.lines.append(
            Line(
                "6",
                "idle tenant front-end RSS / bare grpc.aio server",
                frontend_idle_rss / grpc_idle_rss,
                f"{frontend_idle_rss / MiB:.1f} MiB",
                f"grpc {grpc_idle_rss / MiB:.1f} MiB",
                "frontend_idle_rss_over_grpc_floor",
                Target("<=", 1.3),
            )
        )
    row.lines.append(
        Line(
            "6",
            "idle daemon RSS / bare grpc.aio server",
            idle_rss / grpc_idle_rss,
            f"{idle_rss / MiB:.1f} MiB",
            f"grpc {grpc_idle_rss / MiB:.1f} MiB",
            "idle_rss_over_grpc_floor",
            # Issue 35: the root process imports no grpc since issue 28.
            Target("<=", 1.3),
        )
    )
    row.lines.append(
        Line(
            "6",
            f"RSS growth over {n} spawns (after {WARM_UP} warm-up)",
            growth_pct,
            f"{after / MiB:.1f} MiB",
            f"warm {warm / MiB:.1f} MiB",
            "rss_growth_pct_10k_spawns",
            Target("<=", 10),
            unit="%",
        )
    )
    return row
