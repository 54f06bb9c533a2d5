"""Does the order of a round move row 1's warm / fresh? One daemon with
row 1's spawning tenants and bwrap, the old order (`stats.circle`: `full`
always right after `bwrap`, `full_fresh` after `minimal`) and the new one
(`stats.rotation`: each round's order shuffled behind its first) in
alternate rounds of one process, then each tenant's p50 by the call that
came just before it (new order's rounds).

    python -m bench.rotation_ab [--rounds N]

HOSTCAP_BENCH_PYTHON runs the daemon under another interpreter (another
checkout's venv), as for any bench.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import sys
import tempfile
from collections.abc import Awaitable, Callable
from pathlib import Path

from bench.baselines import Baselines
from bench.client import TenantClient
from bench.daemon import BenchDaemon, state_parent
from bench.stats import Summary, circle, rotation

TENANTS = ("full", "nocg", "minimal", "full_fresh", "nocg_fresh")
#: Row 1's order of these (bench/spawn_latency.py).
ORDER = ("bwrap", *TENANTS)
ORDERS = {"circle": circle, "rotation": rotation}


async def main(rounds: int) -> int:
    state = Path(tempfile.mkdtemp(prefix="rotation-ab-", dir=state_parent()))
    daemon = BenchDaemon(state / "d", TENANTS)
    daemon.start()
    clients = {name: TenantClient(daemon.socket(name)) for name in TENANTS}
    base: Baselines | None = None
    try:
        bin_dir = daemon.workspace("full") / "bench-bin"
        bin_dir.mkdir(mode=0o755)
        base = await Baselines.start(state, bin_dir, 0.5)
        bwrap = base.bwrap

        async def bwrap_call() -> float:
            return bwrap()

        calls: dict[str, Callable[[], Awaitable[float]]] = {
            "bwrap": bwrap_call,
            **{name: clients[name].true for name in TENANTS},
        }
        for call in calls.values():
            for _ in range(3):
                await call()
        samples = {kind: {name: [] for name in ORDER} for kind in ORDERS}
        after: dict[tuple[str, str], list[float]] = {}
        load = os.getloadavg()[0]
        for index in range(rounds):
            for kind in sorted(ORDERS, reverse=bool(index % 2)):
                before = ""
                for name in ORDERS[kind](ORDER, index):
                    took = await calls[name]()
                    samples[kind][name].append(took)
                    if kind == "rotation":
                        after.setdefault((name, before or "(first)"), []).append(took)
                    before = name
        print(
            f"{rounds} rounds of each order, load {load:.2f} -> {os.getloadavg()[0]:.2f}, p50 ms:"
        )
        for kind, found in samples.items():
            p50 = {name: Summary.of(v).p50_us / 1000 for name, v in found.items()}
            print(
                f"  {kind:8}: full {p50['full']:.2f} / fresh {p50['full_fresh']:.2f}"
                f" = {p50['full'] / p50['full_fresh']:.2f} | nocg {p50['nocg']:.2f}"
                f" / fresh {p50['nocg_fresh']:.2f} = {p50['nocg'] / p50['nocg_fresh']:.2f}"
                f" | full / bwrap {p50['full'] / p50['bwrap']:.2f}"
            )
        print("p50 ms by the call just before (rotation's rounds; samples):")
        for name in ORDER:
            cells = sorted((b, v) for (n, b), v in after.items() if n == name)
            print(
                f"  {name:10}: "
                + "  ".join(f"{b} {Summary.of(v).p50_us / 1000:.2f} ({len(v)})" for b, v in cells)
            )
    finally:
        for c in clients.values():
            await c.close()
        if base is not None:
            await base.close()
        daemon.stop()
        shutil.rmtree(state, ignore_errors=True)
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=300)
    sys.exit(asyncio.run(main(parser.parse_args().rounds)))
