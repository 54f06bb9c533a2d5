"""python -m bench.loop_ab [--quick] [--rounds N] [--process root|frontend]:
one process's event loop, uvloop against asyncio.

Two daemons in this one process's care, the same config but the loop of one
process: the root's (`daemon.event_loop`, `--process root`, the default) or
the front-ends' (`daemon.frontend_event_loop`, `--process frontend`); the
other keeps its default (uvloop) on both. Each has the `full` tenant (the
default profile, cgroups included). Rounds interleave them in rotating
order; each round measures, on each daemon:

- spawn latency: `Run` of /bin/true, back to back from one channel (p50, p95
  over all rounds);
- throughput: 8 clients on 8 channels, /bin/true back to back for a window
  (median window);
- CPU per spawn in each phase: of the daemon's process tree (the root, the
  front-ends, the spawner and its pool maker, the fs workers; psutil), of
  the root alone and of the tenant's front-end alone (every thread's, from
  schedstat). The process whose loop is not switched is the control: it
  runs the same code on both daemons, so its ratio is what the two daemons
  differ by anyway (their order, their place on the CPUs). The sandboxed
  children are not counted: they are reaped, and they are the same
  whichever loop runs.

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
from bench.frontend_ab import _cpu, frontend_of
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


def _cpu_now(daemon: BenchDaemon, frontend: int) -> tuple[float, float, float]:
    """CPU seconds so far: the daemon's tree, its root, the tenant's front-end."""
    return tree_cpu_seconds(daemon.pid), _cpu(daemon.pid), _cpu(frontend)


def _per_spawn(
    before: tuple[float, float, float], after: tuple[float, float, float], spawns: int
) -> tuple[float, float, float]:
    """ms per spawn of each of `_cpu_now`'s figures."""
    tree, root, frontend = ((b - a) * 1e3 / spawns for a, b in zip(before, after, strict=True))
    return tree, root, frontend


async def _latency(
    client: TenantClient, daemon: BenchDaemon, frontend: int, spawns: int
) -> tuple[list[float], tuple[float, float, float]]:
    """Seconds of each of `spawns` Runs, and the CPU ms per spawn (tree, root, front-end)."""
    cpu = _cpu_now(daemon, frontend)
    samples = [await client.true() for _ in range(spawns)]
    return samples, _per_spawn(cpu, _cpu_now(daemon, frontend), spawns)


async def _throughput(
    daemon: BenchDaemon, frontend: int, seconds: float
) -> tuple[float, tuple[float, float, float]]:
    """Spawns per second of 8 clients, and the CPU ms per spawn (tree, root, front-end)."""
    cpu = _cpu_now(daemon, frontend)
    spawns, elapsed = await daemon_rate(daemon.socket("full"), seconds)
    return spawns / elapsed, _per_spawn(cpu, _cpu_now(daemon, frontend), spawns)


#: The CPU figures of each phase, in `_cpu_now`'s order.
CPU_NAMES = ("cpu_ms_per_spawn", "root_cpu_ms_per_spawn", "frontend_cpu_ms_per_spawn")


async def run(
    rounds: int, spawns: int, window: float, process: str, loops: tuple[str, ...] = LOOPS
) -> dict[str, Any]:
    """`loops` in the order their daemons start and the first round runs."""
    state = Path(tempfile.mkdtemp(prefix="state-loop-ab-", dir=state_parent()))
    daemons = {name: BenchDaemon(state / name, ("full",)) for name in loops}
    key = "event_loop" if process == "root" else "frontend_event_loop"
    for name, daemon in daemons.items():
        daemon.config["daemon"][key] = name
    clients: dict[str, TenantClient] = {}
    latency: dict[str, list[float]] = {name: [] for name in LOOPS}
    latency_cpu: dict[str, list[tuple[float, float, float]]] = {name: [] for name in LOOPS}
    rate: dict[str, list[float]] = {name: [] for name in LOOPS}
    rate_cpu: dict[str, list[tuple[float, float, float]]] = {name: [] for name in LOOPS}
    try:
        for daemon in daemons.values():
            daemon.start()
        clients = {name: TenantClient(d.socket("full")) for name, d in daemons.items()}
        for name in loops:  # warm-up: connect, fill caches, start the pools
            for _ in range(20):
                await clients[name].true()
        front = {name: frontend_of(d, "full") for name, d in daemons.items()}
        for index in range(rounds):
            for name in rotation(loops, index):
                samples, cpu = await _latency(clients[name], daemons[name], front[name], spawns)
                latency[name] += samples
                latency_cpu[name].append(cpu)
            for name in rotation(loops, index + 1):
                per_s, cpu = await _throughput(daemons[name], front[name], window)
                rate[name].append(per_s)
                rate_cpu[name].append(cpu)
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
            "throughput_per_s": statistics.median(rate[name]),
        }
        for phase, cpus in (("latency", latency_cpu[name]), ("throughput", rate_cpu[name])):
            for index, cpu_name in enumerate(CPU_NAMES):
                figures[name][f"{phase}_{cpu_name}"] = statistics.median(c[index] for c in cpus)
    ratios = {key: figures["uvloop"][key] / figures["asyncio"][key] for key in figures["asyncio"]}
    return {"figures": figures, "uvloop_over_asyncio": ratios}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.loop_ab")
    parser.add_argument("--quick", action="store_true", help="3 rounds, 1 s windows")
    parser.add_argument("--rounds", type=int, default=0, help="rounds (default 8; 3 quick)")
    parser.add_argument(
        "--process",
        choices=("root", "frontend"),
        default="root",
        help="whose loop differs: the root's (daemon.event_loop) or the front-ends'",
    )
    parser.add_argument(
        "--uvloop-first",
        action="store_true",
        help="start uvloop's daemon first (asyncio's by default): the other order",
    )
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
        loops = tuple(reversed(LOOPS)) if args.uvloop_first else LOOPS
        result = asyncio.run(run(rounds, spawns, window, args.process, loops))
    except BenchError as error:
        print(f"bench: {error}", file=sys.stderr)
        return 1
    result["meta"] = {
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "rounds": rounds,
        "process": args.process,
        "first": "uvloop" if args.uvloop_first else "asyncio",
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
    print(f"the {args.process}'s loop; the other process's is the control")
    print(f"{'figure':42} {'asyncio':>10} {'uvloop':>10} {'uvloop/asyncio':>15}")
    for key, ratio in ratios.items():
        print(
            f"{key:42} {figures['asyncio'][key]:10.3f} {figures['uvloop'][key]:10.3f} {ratio:14.3f}x"
        )
    meta = result["meta"]
    print(
        f"\n{rounds} rounds, {meta['seconds']} s, load {load_start:.1f} -> "
        f"{meta['loadavg_end']:.1f}; JSON: {path.relative_to(REPO)}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
