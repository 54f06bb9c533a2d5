"""Row 2: spawns per second with 8 concurrent clients, against bwrap 8-way.

Windows alternate: bwrap with 8 always in flight (C, each until its tree is
reaped), and 8 clients on 8 channels each running /bin/true back to back on
the `full` tenant and on `nocg`. Their order rotates from one round of
windows to the next (`stats.rotation`, as row 1's), so that none always
follows the same one: the kernel's deferred work of a window (namespaces' and
cgroups' teardown on kworkers, RCU) runs into the next one, and a fixed
order charged it to the same contender every time (a tenant's place moved
its rate by 10-17 %). A window's rate is completed spawns over the time
until the last one finished; the row reports the median window, and the
JSON each contender's median by the window just before it
(`<name>.spawns_per_s_after.<previous>`: another contender's, its own
where a round ends with the contender the next begins with, `none` for
the first window).
Also how busy the front-end's event loop thread was meanwhile (its CPU
seconds over the window's): every request of every tenant is served by
that one thread, so near 1.0 it is what caps the rate.

And the machine's CPU per spawn (/proc/stat, all CPUs): the rate is bound by
cores / that. What is not the daemon's own (front-end, spawner) is the
clients' and the sandbox's: the child and its set-up, the kernel threads
that tear its namespaces and cgroups down. `throughput_zero_cost_daemon_over_bwrap`
is the rate a daemon costing nothing would reach on those, over bwrap's.

The floors of the design (issue 35, bench/README.md "The floors of the
design"): the CPU a daemon of this design must spend per spawn at least,
measured here: the relay server's and its hop process's CPU per call
through the relay on to the hop (the front-end's and the root side's least),
the calling thread's CPU per spawn of the fresh set-up (the spawner's), and
per durable append (the exec record). Over bwrap's machine CPU per spawn it
bounds `daemon_cpu_per_spawn_over_bwrap_cpu`; added to what is not the
daemon's (the zero-cost daemon's rest) it bounds the 8-client rate.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import time
from pathlib import Path

from bench import procfs
from bench.baselines import Baselines
from bench.client import TenantClient
from bench.daemon import BenchDaemon
from bench.design_floor import DesignFloor
from bench.report import Line, Row, Target
from bench.stats import rotation

CLIENTS = 8
#: The contenders, whose order rotates from one round of windows to the next.
CONTENDERS = ("bwrap", "full", "nocg")


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


def _loops(root: int, frontends: list[int]) -> list[float]:
    """CPU seconds of the main thread (the event loop) of the root process,
    then of each front-end."""
    return [procfs.cpu_seconds(pid, pid) for pid in (root, *frontends)]


class FloorCpu:
    """The CPU per spawn of each part of the design's floor (see the
    module's doc), measured a batch after each window and summed over them:
    /proc's CPU times tick every 10 ms, so one call alone does not show."""

    def __init__(self, base: Baselines, design: DesignFloor, quick: bool) -> None:
        self.base, self.design = base, design
        self.calls = 100 if quick else 80
        self.spawns = 10
        self.relay_s = 0.0
        self.relay_calls = 0

    async def batch(self) -> None:
        pids = self.base.relay_pids()
        cpu = procfs.cpu_seconds_of(pids)
        for _ in range(self.calls):
            await self.base.relay_hop_rtt()
        self.relay_s += procfs.cpu_seconds_of(pids) - cpu
        self.relay_calls += self.calls
        for _ in range(self.spawns):
            self.design.fresh()
            self.design.append()

    def ms(self) -> dict[str, float]:
        return {
            "relay_hop": self.relay_s * 1e3 / max(self.relay_calls, 1),
            "spawn": self.design.cpu_ms("fresh"),
            "append": self.design.cpu_ms("append"),
        }


async def measure(
    base: Baselines, daemon: BenchDaemon, quick: bool, design: DesignFloor | None = None
) -> Row:
    windows = len(CONTENDERS) * (1 if quick else 2)
    seconds = 1.0 if quick else 2.0
    rates: dict[str, list[float]] = {name: [] for name in CONTENDERS}
    #: (contender, whose window came just before it) -> its rates
    after: dict[tuple[str, str], list[float]] = {}
    previous = "none"
    helpers = daemon.helper_pids()
    # The spawner's own CPU, and its pool maker's (spawner/maker.py) with
    # that of the children the maker reaped (their work is the daemon's; the
    # spawner's reaped children are the sandboxed commands, not counted).
    pools = helpers.get("pools", 0)

    def spawner_cpu() -> float:
        own = procfs.cpu_seconds(helpers["spawner"])
        return own + (procfs.cpu_seconds_with_reaped(pools) if pools else 0.0)

    cpu_ms: dict[str, list[float]] = {
        "full": [],
        "nocg": [],
        "full_spawner": [],
        "nocg_spawner": [],
    }
    # The root process's event loop, and the tenant's front-end's (the
    # split's: one per tenant; without it the root's loop serves the tenant).
    loop_busy: dict[str, list[float]] = {"full": [], "nocg": [], "full_root": [], "nocg_root": []}
    frontends = daemon.frontend_pids()
    front_pids = [daemon.pid, *frontends]
    machine_ms: dict[str, list[float]] = {name: [] for name in CONTENDERS}
    floor = FloorCpu(base, design, quick) if design is not None else None
    if floor is not None:
        await base.relay_hop_rtt()  # its channel connected outside the batches
    for index in range(windows):
        if floor is not None:
            await floor.batch()
        for name in rotation(CONTENDERS, index):
            if name == "bwrap":
                busy = procfs.machine_busy_seconds()
                start = time.perf_counter()
                rate = base.bwrap_flood(CLIENTS, seconds)
                machine_ms["bwrap"].append(
                    (procfs.machine_busy_seconds() - busy)
                    * 1e3
                    / (rate * (time.perf_counter() - start))
                )
            else:
                front, back = procfs.cpu_seconds_of(front_pids), spawner_cpu()
                loops = _loops(daemon.pid, frontends)
                busy = procfs.machine_busy_seconds()
                spawns, elapsed = await daemon_rate(daemon.socket(name), seconds)
                machine_ms[name].append((procfs.machine_busy_seconds() - busy) * 1e3 / spawns)
                rate = spawns / elapsed
                used = [
                    now - then
                    for now, then in zip(_loops(daemon.pid, frontends), loops, strict=True)
                ]
                loop_busy[f"{name}_root"].append(used[0] / elapsed)
                # The other tenants' front-ends are idle: the busiest is this one's.
                loop_busy[name].append(max(used[1:] or used[:1]) / elapsed)
                cpu_ms[name].append((procfs.cpu_seconds_of(front_pids) - front) * 1e3 / spawns)
                cpu_ms[f"{name}_spawner"].append((spawner_cpu() - back) * 1e3 / spawns)
            rates[name].append(rate)
            after.setdefault((name, previous), []).append(rate)
            previous = name
    med = {name: statistics.median(v) for name, v in rates.items()}
    row = Row("2 throughput")
    for name, value in med.items():
        row.figures[f"{name}.spawns_per_s"] = value
    for (name, before), values in after.items():
        row.figures[f"{name}.spawns_per_s_after.{before}"] = statistics.median(values)
    # CPU per spawn of the root process with the front-ends, and of the
    # spawner, from /proc/<pid>/stat.
    for name, values in cpu_ms.items():
        row.figures[f"{name}.cpu_ms_per_spawn"] = statistics.median(values)
    for name, values in loop_busy.items():
        row.figures[f"{name}.loop_busy"] = statistics.median(values)
    for name, values in machine_ms.items():
        row.figures[f"{name}.machine_cpu_ms_per_spawn"] = statistics.median(values)
    row.lines.append(
        Line(
            "2",
            "8 clients, default + cgroup / bwrap 8-way",
            med["full"] / med["bwrap"],
            f"{med['full']:.0f}/s",
            f"bwrap {med['bwrap']:.0f}/s",
            "throughput_8_clients_over_bwrap",
            Target(">=", 0.8),
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
    machine = {name: statistics.median(v) for name, v in machine_ms.items()}
    daemon_ms = statistics.median(cpu_ms["full"]) + statistics.median(cpu_ms["full_spawner"])
    rest_ms = max(machine["full"] - daemon_ms, 1e-3)
    cores = os.cpu_count() or 1
    row.lines.append(
        Line(
            "2",
            "machine CPU per spawn, default + cgroup / bwrap's",
            machine["full"] / machine["bwrap"],
            f"{machine['full']:.2f} ms",
            f"bwrap {machine['bwrap']:.2f} ms",
        )
    )
    row.lines.append(
        Line(
            "2",
            "daemon CPU per spawn (root + front-ends + spawner + pool maker) / bwrap's machine CPU per spawn",
            daemon_ms / machine["bwrap"],
            f"{daemon_ms:.2f} ms",
            f"bwrap {machine['bwrap']:.2f} ms",
            "daemon_cpu_per_spawn_over_bwrap_cpu",
            Target("<=", 0.6),
        )
    )
    row.lines.append(
        Line(
            "2",
            "a zero-cost daemon's bound / bwrap 8-way",
            cores * 1e3 / rest_ms / med["bwrap"],
            f"{cores * 1e3 / rest_ms:.0f}/s",
            f"bwrap {med['bwrap']:.0f}/s",
            "throughput_zero_cost_daemon_over_bwrap",
        )
    )
    if floor is not None:
        parts = floor.ms()
        for name, value in parts.items():
            row.figures[f"floor.{name}.cpu_ms_per_spawn"] = value
        floor_ms = sum(parts.values())
        bound = cores * 1e3 / (rest_ms + floor_ms)
        row.lines.append(
            Line(
                "2",
                "floor: the design's bound, cores / (rest + the floor's CPU) / bwrap 8-way",
                bound / med["bwrap"],
                f"{bound:.0f}/s",
                f"bwrap {med['bwrap']:.0f}/s",
                "throughput_8_clients_over_bwrap_floor",
                Target(">=", 0.8),
                floor_of="throughput_8_clients_over_bwrap",
            )
        )
        row.lines.append(
            Line(
                "2",
                "floor: CPU per spawn (relay + hop, spawn call, durable append)"
                " / bwrap's machine CPU",
                floor_ms / machine["bwrap"],
                f"{floor_ms:.2f} ms",
                f"bwrap {machine['bwrap']:.2f} ms",
                "daemon_cpu_per_spawn_over_bwrap_cpu_floor",
                Target("<=", 0.6),
                floor_of="daemon_cpu_per_spawn_over_bwrap_cpu",
            )
        )
        row.lines.append(
            Line(
                "2",
                "daemon CPU per spawn / the floor's",
                daemon_ms / floor_ms,
                f"{daemon_ms:.2f} ms",
                f"floor {floor_ms:.2f} ms",
                "daemon_cpu_over_floor_cpu",
            )
        )
    row.lines.append(
        Line(
            "2",
            "tenant front-end event loop busy, default + cgroup",
            statistics.median(loop_busy["full"]),
            f"root + fe {statistics.median(cpu_ms['full']):.2f} ms/spawn",
            "of one core",
            "throughput_loop_busy",
        )
    )
    if frontends:
        row.lines.append(
            Line(
                "2",
                "root process event loop busy (the split's shared part)",
                statistics.median(loop_busy["full_root"]),
                "",
                "of one core",
                "throughput_root_loop_busy",
            )
        )
    return row
