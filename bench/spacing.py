"""What spacing the requests costs, in one process: a warm spawn of /bin/true
on `full` and bwrap's, each after an idle pause of several lengths, in one
rotation (row 1's spaced line is the 50 ms column).

    python -m bench.spacing [--rounds N] [--gaps 0,2,10,50] [--busy] [--fsync-ms MS]

With `--busy`, every other round runs with a spinner at SCHED_IDLE on each
CPU (it takes no time from any other task, but the CPUs never go idle):
what is left of the spacing's cost then is not the CPUs' wake from idle.
With `--fsync-ms`, a second daemon whose audit log's batched fsync comes
that long after an append (the default's 50 ms is the spacing's: the exit
record's fsync timer fires just before the next spaced request), `full2`.
Prints each contender's p50 by gap (and by busy), and its ratio to the
back-to-back (gap 0) one.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

from bench.baselines import Baselines
from bench.client import TenantClient
from bench.daemon import BenchDaemon, state_parent
from bench.stats import Summary, rotation

SPIN = (
    "import os\n"
    "os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))\n"
    "os.sched_setaffinity(0, {%d})\n"
    "while True: pass\n"
)


def spinners() -> list[subprocess.Popen[bytes]]:
    """One stopped SCHED_IDLE spinner per CPU (SIGCONT runs it)."""
    procs = []
    for cpu in sorted(os.sched_getaffinity(0)):
        proc = subprocess.Popen([sys.executable, "-c", SPIN % cpu])
        os.kill(proc.pid, signal.SIGSTOP)
        procs.append(proc)
    return procs


async def main(rounds: int, gaps: list[float], busy: bool, fsync_ms: int, names: list[str]) -> int:
    state = Path(tempfile.mkdtemp(prefix="spacing-", dir=state_parent()))
    daemon = BenchDaemon(state / "d", ("full",))
    daemon.start()
    other: BenchDaemon | None = None
    if fsync_ms >= 0:
        other = BenchDaemon(state / "e", ("full",))
        other.config["audit"]["fsync_interval_ms"] = fsync_ms
        other.start()
    bin_dir = daemon.workspace("full") / "bench-bin"
    bin_dir.mkdir(mode=0o755)
    base = await Baselines.start(state, bin_dir, 0.5)
    client = TenantClient(daemon.socket("full"))
    spin = spinners() if busy else []

    async def bwrap() -> float:
        return base.bwrap()

    contenders = {"full": client.true, "bwrap": bwrap}
    if other is not None:
        contenders["full2"] = TenantClient(other.socket("full")).true
    contenders = {k: v for k, v in contenders.items() if not names or k in names}
    # For a trace of the run (perf sched): whose pids are whose.
    pids = {"bench": os.getpid(), "root": daemon.pid, **daemon.helper_pids()}
    print("pids " + " ".join(f"{k}={v}" for k, v in pids.items()), flush=True)
    print(f"load {os.getloadavg()[0]:.2f}", flush=True)
    try:
        for fn in contenders.values():
            for _ in range(5):
                await fn()
        modes = [False, True] if busy else [False]
        cells = [(name, gap, mode) for name in contenders for gap in gaps for mode in modes]
        samples: dict[tuple[str, float, bool], list[float]] = {cell: [] for cell in cells}
        for index in range(rounds):
            mode = modes[index % len(modes)]
            for p in spin:
                os.kill(p.pid, signal.SIGCONT if mode else signal.SIGSTOP)
            for name, gap, m in rotation([c for c in cells if c[2] == mode], index):
                await asyncio.sleep(gap / 1000)
                samples[(name, gap, m)].append(await contenders[name]())
        for p in spin:
            os.kill(p.pid, signal.SIGSTOP)
        print(f"load {os.getloadavg()[0]:.2f}")
        for name in contenders:
            for mode in modes:
                first = Summary.of(samples[(name, gaps[0], mode)]).p50_us
                line = [f"{name:6} {'busy' if mode else 'idle'}:"]
                for gap in gaps:
                    p50 = Summary.of(samples[(name, gap, mode)]).p50_us
                    line.append(f"gap {gap:g} ms {p50 / 1000:5.2f} ({p50 / first:.2f})")
                print("  ".join(line))
    finally:
        for p in spin:
            p.kill()
            p.wait()
        await client.close()
        await base.close()
        daemon.stop()
        if other is not None:
            other.stop()
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=100)
    parser.add_argument("--gaps", default="0,2,10,50")
    parser.add_argument("--busy", action="store_true")
    parser.add_argument("--fsync-ms", type=int, default=-1)
    parser.add_argument("--only", default="", help="contenders, comma-separated (full,bwrap,full2)")
    args = parser.parse_args()
    gaps = [float(g) for g in args.gaps.split(",")]
    names = [n for n in args.only.split(",") if n]
    sys.exit(asyncio.run(main(args.rounds, gaps, args.busy, args.fsync_ms, names)))
