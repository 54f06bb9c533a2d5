"""A/B of the warm path (decision 0026), in one process: each profile with
and without warm children, on one daemon.

    python -m bench.warm_ab [--rounds N] [--seconds S]
    python -m bench.warm_ab --a-python PY [--rounds N] [--spaced-rounds N]

Latency: back-to-back Runs of /bin/true in rotation over the six tenants,
then the same spaced 50 ms apart (a pool refilled between requests, as agent
tool calls arrive). Throughput: 8 clients running /bin/true back to back on
`full_fresh` and on `full` (warm), in alternating windows (under load the spawner is
never idle, so the pool is refilled from the same CPU as the spawns). Prints
p50 / p95 and the ratios warm / fresh.

With `--a-python`, two daemons instead: `a` under that interpreter (another
checkout's venv: its own daemon and spawner), `b` this checkout's (or
`--b-python`'s: a wrapper that switches something in the same checkout),
each with `full` (warm) and `full_fresh`, the four in one rotation, back to
back and then spaced 50 ms: warm / fresh in each, b / a of each line, and
each daemon's warm spawns that found no warm child ready (its metrics).
"""

from __future__ import annotations

import argparse
import asyncio
import http.client
import os
import shutil
import socket
import statistics
import sys
import tempfile
from pathlib import Path

from bench.client import TenantClient
from bench.daemon import BenchDaemon, state_parent
from bench.stats import Summary, rotation
from bench.throughput import daemon_rate

#: (fresh, warm) pairs: the default profile's are warm by default.
PAIRS = (("full_fresh", "full"), ("nocg_fresh", "nocg"), ("minimal", "minimal_warm"))
TENANTS = tuple(name for pair in PAIRS for name in pair)


async def main(rounds: int, seconds: float, windows: int) -> int:
    state = Path(tempfile.mkdtemp(prefix="warm-ab-", dir=state_parent()))
    daemon = BenchDaemon(state / "d", TENANTS)
    daemon.start()
    clients = {name: TenantClient(daemon.socket(name)) for name in TENANTS}
    try:
        for c in clients.values():
            for _ in range(3):
                await c.true()
        await asyncio.sleep(0.5)
        for label, spacing, n in (
            ("back-to-back", 0.0, rounds),
            ("spaced 50 ms", 0.05, rounds // 4),
        ):
            samples: dict[str, list[float]] = {name: [] for name in TENANTS}
            for index in range(n):
                for name in rotation(list(TENANTS), index):
                    if spacing:
                        await asyncio.sleep(spacing)
                    samples[name].append(await clients[name].true())
            s = {name: Summary.of(v) for name, v in samples.items()}
            print(f"latency, {label} ({n} rounds):")
            for fresh_name, warm_name in PAIRS:
                fresh, warm = s[fresh_name], s[warm_name]
                print(
                    f"  {warm_name.removesuffix('_warm'):8} fresh p50 {fresh.p50_us / 1000:6.2f} ms p95 {fresh.p95_us / 1000:6.2f}"
                    f" | warm p50 {warm.p50_us / 1000:6.2f} ms p95 {warm.p95_us / 1000:6.2f}"
                    f" | warm/fresh p50 {warm.p50_us / fresh.p50_us:.2f} p95 {warm.p95_us / fresh.p95_us:.2f}"
                )
        rates: dict[str, list[float]] = {"full_fresh": [], "full": []}
        for index in range(windows):
            for name in rotation(list(rates), index):
                done, took = await daemon_rate(daemon.socket(name), seconds)
                rates[name].append(done / took)
        fresh, warm = statistics.median(rates["full_fresh"]), statistics.median(rates["full"])
        print(
            f"throughput, 8 clients ({windows} windows of {seconds:g} s): full fresh {fresh:.0f}/s,"
            f" full warm {warm:.0f}/s, warm/fresh {warm / fresh:.2f}"
        )
    finally:
        for c in clients.values():
            await c.close()
        daemon.stop()
        shutil.rmtree(state, ignore_errors=True)
    return 0


def warm_counts(daemon: BenchDaemon) -> dict[str, float]:
    """`full`'s warm spawns so far: taken, missed (found none ready)."""
    path = Path(daemon.config["daemon"]["runtime_dir"]) / "metrics.sock"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.connect(str(path))
    connection = http.client.HTTPConnection("localhost")
    connection.sock = sock
    connection.request("GET", "/metrics")
    text = connection.getresponse().read().decode()
    connection.close()
    found = {"taken": 0.0, "missed": 0.0}
    for line in text.splitlines():
        if line.startswith("hostcapd_warm_spawns_total{") and 'tenant="full"' in line:
            for result in found:
                if f'result="{result}"' in line:
                    found[result] = float(line.rsplit(" ", 1)[1])
    return found


async def versus(
    a_python: str, rounds: int, spaced_rounds: int, b_python: str = "", block: int = 1
) -> int:
    """Issue 35's `warm_over_fresh` for two daemons in one rotation. With
    `block` > 1, back to back is each contender's `block` calls in a row
    (the first of them not counted): what a spawn leaves to do after its
    answer is paid by its own next call, not by another contender's."""
    state = Path(tempfile.mkdtemp(prefix="warm-ab-", dir=state_parent()))
    pair = ("full", "full_fresh")
    daemons = {kind: BenchDaemon(state / kind, pair) for kind in ("a", "b")}
    daemons["a"].python = a_python
    if b_python:
        daemons["b"].python = b_python
    for daemon in daemons.values():
        run = Path(daemon.config["daemon"]["runtime_dir"])
        daemon.config["metrics"] = {"socket": str(run / "metrics.sock")}
    clients: dict[str, TenantClient] = {}
    try:
        for daemon in daemons.values():
            daemon.start()
        clients = {
            f"{kind}.{name}": TenantClient(d.socket(name))
            for kind, d in daemons.items()
            for name in pair
        }
        for c in clients.values():
            for _ in range(5):
                await c.true()
        await asyncio.sleep(0.5)
        names = list(clients)
        for label, spacing, n in (
            ("back to back", 0.0, rounds),
            ("spaced 50 ms", 0.05, spaced_rounds),
        ):
            load = os.getloadavg()[0]
            counts = {kind: warm_counts(d) for kind, d in daemons.items()}
            samples: dict[str, list[float]] = {name: [] for name in names}
            calls = 1 if spacing else block
            for index in range(n):
                for name in rotation(names, index):
                    for call in range(calls):
                        if spacing:
                            await asyncio.sleep(spacing)
                        took = await clients[name].true()
                        if call or calls == 1:
                            samples[name].append(took)
            p50 = {name: Summary.of(v).p50_us / 1000 for name, v in samples.items()}
            if calls > 1:
                label += f", blocks of {calls}"
            print(f"{label} ({n} rounds, load {load:.2f} -> {os.getloadavg()[0]:.2f}), p50 ms:")
            for kind in ("a", "b"):
                warm, fresh = p50[f"{kind}.full"], p50[f"{kind}.full_fresh"]
                print(
                    f"  {kind}: warm {warm:6.2f} | fresh {fresh:6.2f} | warm/fresh {warm / fresh:.2f}"
                )
            for name in pair:
                print(f"  b / a, {name}: {p50[f'b.{name}'] / p50[f'a.{name}']:.2f}")
            for kind, d in daemons.items():
                now = warm_counts(d)
                taken, missed = (now[r] - counts[kind][r] for r in ("taken", "missed"))
                print(f"  {kind}: warm spawns {taken:.0f} taken, {missed:.0f} found none ready")
    finally:
        for c in clients.values():
            await c.close()
        for daemon in daemons.values():
            daemon.stop()
        shutil.rmtree(state, ignore_errors=True)
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--windows", type=int, default=4)
    parser.add_argument("--a-python", default="", help="A/B: daemon a's interpreter")
    parser.add_argument("--b-python", default="", help="A/B: daemon b's, if not this one")
    parser.add_argument("--spaced-rounds", type=int, default=50)
    parser.add_argument(
        "--block", type=int, default=1, help="A/B: back to back in blocks of N calls a contender"
    )
    args = parser.parse_args()
    if args.a_python:
        sys.exit(
            asyncio.run(
                versus(args.a_python, args.rounds, args.spaced_rounds, args.b_python, args.block)
            )
        )
    sys.exit(asyncio.run(main(args.rounds, args.seconds, args.windows)))
