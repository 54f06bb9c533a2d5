"""python -m bench.frontend_syscalls [--tenant T] [--spawns N] [--clients N]
                                     [--python PY] [--set daemon.KEY=VALUE] [--calls]

The tenant front-end's syscalls per Run of /bin/true, exactly: one bench
daemon, warmed up with 50 Runs, then `strace -c -f -p FE` (every thread
of the tenant's front-end: its loop, grpc.aio's poller, grpc's event
engine threads) over `--spawns` Runs, back to back from `--clients`
channels at once (1: row 1's, 8: row 2's). Prints the counts per Run and
the sum of all but futex (a futex is the GIL or a lock handed between
threads: their number depends on the timing, the others on the code).
`--calls` also keeps a full trace (`strace -f -tt`, per thread) and prints
each thread's syscalls per Run. strace slows the front-end several times
over: these are counts, not timings.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import prctl

from bench import procfs
from bench.daemon import BenchDaemon, state_parent
from bench.frontend_ab import _apply, frontend_of
from bench.root_syscalls import WARM_UP, _spawns, parse_summary, print_counts

_LINE = re.compile(r"^(\d+)\s+(?:\d+:\d+:\d+\.\d+\s+)?(?:<\.\.\. )?(\w+)")


def per_thread(text: str) -> dict[int, collections.Counter[str]]:
    """A `strace -f` trace's syscalls by thread id (a resumed call is not
    counted twice: only its first line is)."""
    threads: dict[int, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    for line in text.splitlines():
        if "resumed>" in line or "+++" in line or "---" in line:
            continue
        found = _LINE.match(line)
        if found:
            threads[int(found.group(1))][found.group(2)] += 1
    return threads


async def count(args: argparse.Namespace) -> tuple[dict[str, int], str]:
    state = Path(tempfile.mkdtemp(prefix="fe-syscalls-", dir=state_parent()))
    daemon = BenchDaemon(state / "d", (args.tenant,))
    _apply(daemon.config, args.set)
    if args.python:
        daemon.python = args.python
    out = state / "strace.txt"
    trace = state / "trace.txt"
    try:
        daemon.start()
        await _spawns(daemon.socket(args.tenant), WARM_UP, args.clients)
        fe = frontend_of(daemon, args.tenant)
        await asyncio.sleep(0.5)
        command = ["strace", "-c", "-f", "-o", str(out), "-p", str(fe)]
        if args.calls:
            command = ["strace", "-f", "-o", str(trace), "-p", str(fe)]
        tracer = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        await asyncio.sleep(1.0)  # attached to every thread
        await _spawns(daemon.socket(args.tenant), args.spawns, args.clients)
        await asyncio.sleep(0.5)
        tracer.send_signal(signal.SIGINT)
        tracer.wait(timeout=30)
        if args.calls:
            text = trace.read_text()
            totals: collections.Counter[str] = collections.Counter()
            for counter in per_thread(text).values():
                totals.update(counter)
            return dict(totals), text
        return parse_summary(out.read_text()), ""
    finally:
        daemon.stop()
        procfs.reap_orphans()
        shutil.rmtree(state, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.frontend_syscalls")
    parser.add_argument("--tenant", default="full")
    parser.add_argument("--spawns", type=int, default=200)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--python", default="", help="the daemon's interpreter")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--calls", action="store_true", help="per thread, from a full trace")
    args = parser.parse_args(argv)
    if os.geteuid() != 0:
        print("bench: the daemon's default profile needs root", file=sys.stderr)
        return 2
    prctl.set_child_subreaper(True)
    started = time.monotonic()
    calls, text = asyncio.run(count(args))
    n = args.spawns
    print(
        f"tenant front-end syscalls per Run: tenant {args.tenant}, {n} Runs,"
        f" {args.clients} client(s), load {os.getloadavg()[0]:.1f}"
    )
    print_counts(calls, n)
    if text:
        for tid, counter in sorted(per_thread(text).items(), key=lambda kv: -sum(kv[1].values())):
            top = ", ".join(f"{k} {v / n:.2f}" for k, v in counter.most_common(8))
            print(f"  thread {tid}: {sum(counter.values()) / n:.2f}: {top}")
    print(f"{time.monotonic() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
