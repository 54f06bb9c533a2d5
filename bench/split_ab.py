"""A/B of the privilege split (decision 0027), in one process: the same
tenants on a split daemon (a front-end process per tenant) and on one that
runs the same front-end code in its root process (`frontend_processes =
false`: the same conversion and channel, no second process). The design's
floor stays a bare grpc.aio server (bench.floor_servers).

    python -m bench.split_ab [--rounds N] [--seconds S] [--windows W]

Prints, split against in-process, measured in alternation:

- row 1's spawn latency: Run /bin/true on `full`, back to back, p50 / p95;
- row 3's stream: 256 MiB of stdout through Spawn, seconds, and the CPU of
  the root process and of the front-end;
- throughput of 8 clients on one tenant, and of 8 clients on each of two
  tenants at once (tenants no longer share one event loop);
- the root process's CPU per spawn under the one-tenant load (the shared
  part of a split daemon: the rate at which it caps), the front-end's, and
  the spawner's;
- idle RSS: each front-end, and a bare grpc.aio server (bench.floor_servers)
  started the same way, in the same run;
- what ten tenants cost, idle: a split and an in-process daemon with ten
  tenants of the default profile each (`--many`), the sum of the PSS of the
  daemon's own processes (root, spawner, front-ends, fs workers; not the
  sandboxes' warm children), and the front-ends' RSS.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

from bench import procfs
from bench.baselines import start_server, stop
from bench.client import TenantClient
from bench.daemon import PROFILES, BenchDaemon, MiB, state_parent
from bench.stats import Summary, rotation
from bench.stream import daemon_stream
from bench.throughput import daemon_rate

#: Two tenants of the default profile (warm, as by default).
PROFILES.setdefault("full2", PROFILES["full"])
#: The many-tenant memory row's tenants, all of the default profile.
MANY_PREFIX = "many"
TENANTS = ("full", "full2", "stream")
STREAM_BYTES = 256 * MiB
KINDS = ("split", "inproc")


def _daemon_pids(daemon: BenchDaemon) -> list[int]:
    return [daemon.pid, *daemon.helper_pids().values()]


async def many_tenants(state: Path, many: int) -> None:
    """Idle memory of a split and an in-process daemon with `many` tenants."""
    names = tuple(f"{MANY_PREFIX}{i}" for i in range(many))
    for name in names:
        PROFILES.setdefault(name, PROFILES["full"])
    figures: dict[str, tuple[int, list[int]]] = {}
    for kind, split in (("split", True), ("inproc", False)):
        daemon = BenchDaemon(state / f"{kind}-many", names, frontend_processes=split)
        clients = []
        try:
            daemon.start()
            clients = [TenantClient(daemon.socket(name)) for name in names]
            for c in clients:
                await c.true()
            await asyncio.sleep(1.0)
            pss = sum(procfs.pss_bytes(pid) for pid in _daemon_pids(daemon))
            figures[kind] = (pss, [procfs.rss_bytes(pid) for pid in daemon.frontend_pids()])
        finally:
            for c in clients:
                await c.close()
            daemon.stop()
    (split_pss, fe_rss), (inproc_pss, _) = figures["split"], figures["inproc"]
    print(
        f"{many} tenants, idle: split daemon PSS {split_pss / MiB:.0f} MiB ({len(fe_rss)} front-ends"
        f" (no admin socket in this config), RSS {min(fe_rss) / MiB:.1f}-{max(fe_rss) / MiB:.1f} MiB"
        f" each) | in-process daemon PSS"
        f" {inproc_pss / MiB:.0f} MiB | split - in-process {(split_pss - inproc_pss) / MiB:.0f} MiB,"
        f" {(split_pss - inproc_pss) / many / MiB:.1f} MiB a tenant"
    )


async def compare(state: Path, rounds: int, seconds: float, windows: int) -> None:
    """Idle front-end RSS, rows 1 and 3, throughput and CPU per spawn: a split
    and an in-process daemon with the same tenants, measured in alternation."""
    daemons = {
        "split": BenchDaemon(state / "split", TENANTS, frontend_processes=True),
        "inproc": BenchDaemon(state / "inproc", TENANTS, frontend_processes=False),
    }
    floor = None
    clients: dict[str, dict[str, TenantClient]] = {}
    try:
        for daemon in daemons.values():
            daemon.start()
        floor = start_server("grpc", state / "grpc-floor.sock")
        clients = {
            kind: {name: TenantClient(d.socket(name)) for name in TENANTS}
            for kind, d in daemons.items()
        }
        for per in clients.values():
            for c in per.values():
                for _ in range(3):
                    await c.true()
        await asyncio.sleep(1.0)

        split = daemons["split"]
        frontends = split.frontend_pids()
        floor_rss = procfs.rss_bytes(floor.pid)
        fe_rss = [procfs.rss_bytes(pid) for pid in frontends]
        print(
            f"idle RSS: front-ends {', '.join(f'{r / MiB:.1f}' for r in fe_rss)} MiB,"
            f" bare grpc.aio {floor_rss / MiB:.1f} MiB: front-end / bare"
            f" {max(fe_rss) / floor_rss:.2f} (target <= 1.3);"
            f" root process split {procfs.rss_bytes(split.pid) / MiB:.1f} MiB,"
            f" in-process {procfs.rss_bytes(daemons['inproc'].pid) / MiB:.1f} MiB"
        )

        samples: dict[str, list[float]] = {kind: [] for kind in KINDS}
        for index in range(rounds):
            for kind in rotation(list(KINDS), index):
                samples[kind].append(await clients[kind]["full"].true())
        s = {kind: Summary.of(v) for kind, v in samples.items()}
        print(
            f"row 1, Run /bin/true ({rounds} rounds): split p50 {s['split'].p50_us / 1000:.2f} ms"
            f" p95 {s['split'].p95_us / 1000:.2f} | in-process p50 {s['inproc'].p50_us / 1000:.2f} ms"
            f" p95 {s['inproc'].p95_us / 1000:.2f} | split / in-process p50"
            f" {s['split'].p50_us / s['inproc'].p50_us:.2f} p95 {s['split'].p95_us / s['inproc'].p95_us:.2f}"
        )

        streams: dict[str, list[float]] = {kind: [] for kind in KINDS}
        fe_cpu: list[float] = []
        root_cpu: dict[str, list[float]] = {kind: [] for kind in KINDS}
        for index in range(max(2, windows)):
            for kind in rotation(list(KINDS), index):
                daemon = daemons[kind]
                fes = daemon.frontend_pids()
                before = procfs.cpu_seconds_of(fes)
                figures = await daemon_stream(clients[kind]["stream"], daemon, STREAM_BYTES)
                streams[kind].append(figures["seconds"])
                root_cpu[kind].append(figures["daemon_cpu_s"])
                if kind == "split":
                    fe_cpu.append(procfs.cpu_seconds_of(fes) - before)
        med = {kind: statistics.median(v) for kind, v in streams.items()}
        print(
            f"row 3, {STREAM_BYTES // MiB} MiB stream: split {STREAM_BYTES / MiB / med['split']:.0f} MiB/s"
            f" (root CPU {statistics.median(root_cpu['split']):.2f} s, front-end"
            f" {statistics.median(fe_cpu):.2f} s) | in-process {STREAM_BYTES / MiB / med['inproc']:.0f} MiB/s"
            f" (CPU {statistics.median(root_cpu['inproc']):.2f} s) | split / in-process time"
            f" {med['split'] / med['inproc']:.2f}"
        )

        one: dict[str, list[float]] = {kind: [] for kind in KINDS}
        two: dict[str, list[float]] = {kind: [] for kind in KINDS}
        per_spawn: dict[str, list[float]] = {
            "root": [],
            "frontend": [],
            "spawner": [],
            "inproc": [],
        }
        for index in range(windows):
            for kind in rotation(list(KINDS), index):
                daemon = daemons[kind]
                helpers = daemon.helper_pids()
                watched = {
                    "root": [daemon.pid],
                    "frontend": daemon.frontend_pids(),
                    "spawner": [helpers["spawner"]],
                }
                cpu = {role: procfs.cpu_seconds_of(pids) for role, pids in watched.items()}
                done, took = await daemon_rate(daemon.socket("full"), seconds)
                one[kind].append(done / took)
                used = {
                    role: procfs.cpu_seconds_of(pids) - cpu[role] for role, pids in watched.items()
                }
                if kind == "split":
                    for role in ("root", "frontend", "spawner"):
                        per_spawn[role].append(used[role] / done * 1e6)
                else:
                    per_spawn["inproc"].append(used["root"] / done * 1e6)
                both = await asyncio.gather(
                    daemon_rate(daemon.socket("full"), seconds),
                    daemon_rate(daemon.socket("full2"), seconds),
                )
                two[kind].append(sum(d for d, _ in both) / max(t for _, t in both))
        r1 = {kind: statistics.median(v) for kind, v in one.items()}
        r2 = {kind: statistics.median(v) for kind, v in two.items()}
        print(
            f"throughput, 8 clients on one tenant: split {r1['split']:.0f}/s, in-process"
            f" {r1['inproc']:.0f}/s, split / in-process {r1['split'] / r1['inproc']:.2f}"
        )
        print(
            f"throughput, 8 clients on each of two tenants: split {r2['split']:.0f}/s, in-process"
            f" {r2['inproc']:.0f}/s, split / in-process {r2['split'] / r2['inproc']:.2f}"
        )
        us = {role: statistics.median(v) for role, v in per_spawn.items()}
        print(
            f"CPU per spawn (one tenant, 8 clients): split root {us['root']:.0f} us, front-end"
            f" {us['frontend']:.0f} us, spawner {us['spawner']:.0f} us | in-process root"
            f" {us['inproc']:.0f} us; the split's root side alone would cap at"
            f" {1e6 / us['root']:.0f} spawns/s of one core"
        )
    finally:
        for per in clients.values():
            for c in per.values():
                await c.close()
        for daemon in daemons.values():
            daemon.stop()
        if floor is not None:
            stop(floor)


async def main(rounds: int, seconds: float, windows: int, many: int) -> int:
    state = Path(tempfile.mkdtemp(prefix="split-ab-", dir=state_parent()))
    try:
        await compare(state, rounds, seconds, windows)
        if many:
            await many_tenants(state, many)
    finally:
        shutil.rmtree(state, ignore_errors=True)
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--windows", type=int, default=4)
    parser.add_argument("--many", type=int, default=10, help="tenants of the memory row (0: skip)")
    args = parser.parse_args()
    sys.exit(asyncio.run(main(args.rounds, args.seconds, args.windows, args.many)))
