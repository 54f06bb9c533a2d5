"""python -m bench.loop_ab [--quick] [--rounds N]: the daemon on uvloop against asyncio.

Two daemons in this one process's care, the same config but
`daemon.event_loop` ("asyncio", "uvloop"), each with the `full` tenant (the
default profile, cgroups included). Rounds interleave them in rotating
order; each round measures, on each daemon:

- spawn latency: `Run` of /bin/true, back to back from one channel (p50, p95
  over all rounds);
- throughput: 8 clients on 8 channels, /bin/true back to back for a window
  (median window);
- daemon CPU per spawn: user + system seconds of the daemon's process tree
  (the front-end, the spawner, the fs workers; psutil), over the spawns of
  each phase. The sandboxed children are not counted: they are reaped, and
  they are the same whichever loop the front-end runs.

Prints uvloop / asyncio for each figure (below 1.0: uvloop is better, except
for throughput, where above 1.0 is) and writes the JSON to
bench/results/loop-ab-<timestamp>.json.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import prctl
import psutil

from bench import procfs
from bench.client import TenantClient
from bench.daemon import REPO, BenchDaemon, state_parent
from bench.native import BenchError
from bench.stats import Summary, rotation
from bench.throughput import daemon_rate

LOOPS = ("asyncio", "uvloop")
RESULTS = REPO / "bench" / "results"


def tree_cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of `pid` and its live descendants."""
    root = psutil.Process(pid)
    total = 0.0
    for proc in [root, *root.children(recursive=True)]:
        with contextlib.suppress(psutil.NoSuchProcess):
            times = proc.cpu_times()
            total += times.user + times.system
    return total


async def _latency(
    client: TenantClient, daemon: BenchDaemon, spawns: int
) -> tuple[list[float], float]:
    """Seconds of each of `spawns` Runs, and the daemon tree's CPU ms per spawn."""
    cpu = tree_cpu_seconds(daemon.pid)
    samples = [await client.true() for _ in range(spawns)]
    return samples, (tree_cpu_seconds(daemon.pid) - cpu) * 1e3 / spawns


async def _throughput(daemon: BenchDaemon, seconds: float) -> tuple[float, float]:
    """Spawns per second of 8 clients, and the daemon tree's CPU ms per spawn."""
    cpu = tree_cpu_seconds(daemon.pid)
    spawns, elapsed = await daemon_rate(daemon.socket("full"), seconds)
    return spawns / elapsed, (tree_cpu_seconds(daemon.pid) - cpu) * 1e3 / spawns


async def run(rounds: int, spawns: int, window: float) -> dict[str, Any]:
    state = Path(tempfile.mkdtemp(prefix="state-loop-ab-", dir=state_parent()))
    daemons = {name: BenchDaemon(state / name, ("full",), event_loop=name) for name in LOOPS}
    clients: dict[str, TenantClient] = {}
    latency: dict[str, list[float]] = {name: [] for name in LOOPS}
    latency_cpu: dict[str, list[float]] = {name: [] for name in LOOPS}
    rate: dict[str, list[float]] = {name: [] for name in LOOPS}
    rate_cpu: dict[str, list[float]] = {name: [] for name in LOOPS}
    try:
        for daemon in daemons.values():
            daemon.start()
        clients = {name: TenantClient(d.socket("full")) for name, d in daemons.items()}
        for name in LOOPS:  # warm-up: connect, fill caches, start the pools
            for _ in range(20):
                await clients[name].true()
        for index in range(rounds):
            for name in rotation(LOOPS, index):
                samples, cpu_ms = await _latency(clients[name], daemons[name], spawns)
                latency[name] += samples
                latency_cpu[name].append(cpu_ms)
            for name in rotation(LOOPS, index + 1):
                per_s, cpu_ms = await _throughput(daemons[name], window)
                rate[name].append(per_s)
                rate_cpu[name].append(cpu_ms)
            print(f"round {index + 1}/{rounds} done", file=sys.stderr, flush=True)
    finally:
        for client in clients.values():
            await client.close()
        for daemon in daemons.values():
            daemon.stop()
        procfs.reap_orphans()
        shutil.rmtree(state, ignore_errors=True)
    figures: dict[str, dict[str, float]] = {}
    for name in LOOPS:
        summary = Summary.of(latency[name])
        figures[name] = {
            "latency_p50_ms": summary.p50_us / 1e3,
            "latency_p95_ms": summary.p95_us / 1e3,
            "latency_cpu_ms_per_spawn": statistics.median(latency_cpu[name]),
            "throughput_per_s": statistics.median(rate[name]),
            "throughput_cpu_ms_per_spawn": statistics.median(rate_cpu[name]),
        }
    ratios = {key: figures["uvloop"][key] / figures["asyncio"][key] for key in figures["asyncio"]}
    return {"figures": figures, "uvloop_over_asyncio": ratios}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.loop_ab")
    parser.add_argument("--quick", action="store_true", help="3 rounds, 1 s windows")
    parser.add_argument("--rounds", type=int, default=0, help="rounds (default 8; 3 quick)")
    args = parser.parse_args(argv)
    if os.geteuid() != 0:
        print("bench: the daemon's default profile needs root", file=sys.stderr)
        return 2
    prctl.set_child_subreaper(True)
    rounds = args.rounds or (3 if args.quick else 8)
    spawns, window = (40, 1.0) if args.quick else (80, 2.0)
    load_start = os.getloadavg()[0]
    started = time.monotonic()
    try:
        result = asyncio.run(run(rounds, spawns, window))
    except BenchError as error:
        print(f"bench: {error}", file=sys.stderr)
        return 1
    result["meta"] = {
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "rounds": rounds,
        "spawns_per_round": spawns,
        "window_s": window,
        "loadavg_start": load_start,
        "loadavg_end": os.getloadavg()[0],
        "seconds": round(time.monotonic() - started, 1),
    }
    RESULTS.mkdir(exist_ok=True)
    stamp = datetime.datetime.now(datetime.UTC).strftime("%Y%m%dT%H%M%SZ")
    path = RESULTS / f"loop-ab-{stamp}.json"
    path.write_text(json.dumps(result, indent=2) + "\n")
    figures, ratios = result["figures"], result["uvloop_over_asyncio"]
    print(f"{'figure':32} {'asyncio':>10} {'uvloop':>10} {'uvloop/asyncio':>15}")
    for key, ratio in ratios.items():
        print(
            f"{key:32} {figures['asyncio'][key]:10.2f} {figures['uvloop'][key]:10.2f} {ratio:14.3f}x"
        )
    meta = result["meta"]
    print(
        f"\n{rounds} rounds, {meta['seconds']} s, load {load_start:.1f} -> "
        f"{meta['loadavg_end']:.1f}; JSON: {path.relative_to(REPO)}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
