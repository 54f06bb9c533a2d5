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
import sys
import time

import prctl

from bench.frontend_ab import frontend_of
from bench.root_syscalls import parse_summary, parser, print_counts, traced

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
    """The front-end's syscalls by name, and the full trace with `--calls`."""
    text = await traced(
        args, "fe-syscalls-", lambda d: frontend_of(d, args.tenant), summary=not args.calls
    )
    if not args.calls:
        return parse_summary(text), ""
    totals: collections.Counter[str] = collections.Counter()
    for counter in per_thread(text).values():
        totals.update(counter)
    return dict(totals), text


def main(argv: list[str] | None = None) -> int:
    options = parser("python -m bench.frontend_syscalls", clients=8)
    options.add_argument("--calls", action="store_true", help="per thread, from a full trace")
    args = options.parse_args(argv)
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
