"""python -m bench.root_syscalls [--loop asyncio|uvloop] [--tenant T] [--spawns N]
                                 [--clients N] [--python PY] [--set daemon.KEY=VALUE]

The root process's syscalls per spawn, exactly: one bench daemon, warmed up
with 50 Runs of /bin/true, then `strace -c -f -p ROOT` (the root's threads:
its loop and the audit's fsync thread) over `--spawns` Runs, back to back
from one channel (`--clients 1`, row 1's) or from N channels at once
(row 2's 8). Prints the counts per spawn, every syscall and the sum of all
but futex (a futex is the GIL or a lock handed between the loop and the
fsync thread: their number depends on the timing, the others on the code).

`--loop` is the root's `daemon.event_loop` (the front-ends keep their
default); `--python` another checkout's interpreter, as `bench.frontend_ab
--a-python`. strace slows the root several times over: these are counts,
not timings.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import prctl

from bench import procfs
from bench.client import TenantClient
from bench.daemon import BenchDaemon, state_parent
from bench.frontend_ab import _apply

WARM_UP = 50


def parse_summary(text: str) -> dict[str, int]:
    """strace -c's table: calls by syscall name."""
    calls: dict[str, int] = {}
    for line in text.splitlines():
        fields = line.split()
        if len(fields) < 5 or not fields[0][0].isdigit():
            continue
        name = fields[-1]
        if name == "total":
            continue
        # % time, seconds, usecs/call, calls, [errors,] syscall
        calls[name] = int(fields[3])
    return calls


def print_counts(calls: dict[str, int], n: int) -> None:
    """Each syscall's count per operation, most first, then all but futex."""
    for name, c in sorted(calls.items(), key=lambda kv: -kv[1]):
        print(f"  {c / n:7.2f}  {name}")
    other = sum(c for name, c in calls.items() if name != "futex")
    print(f"  {other / n:7.2f}  all but futex")


async def _spawns(socket: Path, spawns: int, clients: int) -> None:
    channels = [TenantClient(socket) for _ in range(clients)]
    try:
        for c in channels:
            await c.health_rtt()
        left = spawns

        async def loop(client: TenantClient) -> None:
            nonlocal left
            while left > 0:
                left -= 1
                await client.true()

        await asyncio.gather(*(loop(c) for c in channels))
    finally:
        for c in channels:
            await c.close()


async def traced(
    args: argparse.Namespace,
    prefix: str,
    pid_of: Callable[[BenchDaemon], int],
    summary: bool = True,
    event_loop: str = "asyncio",
) -> str:
    """One bench daemon (`args.tenant`, `args.set`, `args.python`) warmed up,
    then `strace -f` of the process `pid_of` names over `args.spawns` Runs
    from `args.clients` channels: the text of `strace -c`'s table
    (`summary`) or of the full trace."""
    state = Path(tempfile.mkdtemp(prefix=prefix, dir=state_parent()))
    daemon = BenchDaemon(state / "d", (args.tenant,), event_loop=event_loop)
    _apply(daemon.config, args.set)
    if args.python:
        daemon.python = args.python
    out = state / "strace.txt"
    try:
        daemon.start()
        await _spawns(daemon.socket(args.tenant), WARM_UP, args.clients)
        pid = pid_of(daemon)
        await asyncio.sleep(0.5)
        tracer = subprocess.Popen(
            ["strace", *(["-c"] if summary else []), "-f", "-o", str(out), "-p", str(pid)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        await asyncio.sleep(1.0)  # attached to every thread
        await _spawns(daemon.socket(args.tenant), args.spawns, args.clients)
        await asyncio.sleep(0.5)  # the last exit records' fsyncs
        tracer.send_signal(signal.SIGINT)
        tracer.wait(timeout=30)
        return out.read_text()
    finally:
        daemon.stop()
        procfs.reap_orphans()
        shutil.rmtree(state, ignore_errors=True)


def parser(prog: str, clients: int) -> argparse.ArgumentParser:
    """The options both syscall counters take."""
    parser = argparse.ArgumentParser(prog=prog)
    parser.add_argument("--tenant", default="full")
    parser.add_argument("--spawns", type=int, default=200)
    parser.add_argument("--clients", type=int, default=clients)
    parser.add_argument("--python", default="", help="the daemon's interpreter")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    return parser


def main(argv: list[str] | None = None) -> int:
    options = parser("python -m bench.root_syscalls", clients=1)
    options.add_argument("--loop", default="asyncio", choices=("asyncio", "uvloop"))
    args = options.parse_args(argv)
    if os.geteuid() != 0:
        print("bench: the daemon's default profile needs root", file=sys.stderr)
        return 2
    prctl.set_child_subreaper(True)
    started = time.monotonic()
    text = asyncio.run(traced(args, "root-syscalls-", lambda d: d.pid, event_loop=args.loop))
    calls = parse_summary(text)
    n = args.spawns
    print(
        f"root syscalls per spawn: loop {args.loop}, tenant {args.tenant}, {n} spawns,"
        f" {args.clients} client(s), load {os.getloadavg()[0]:.1f}"
    )
    print_counts(calls, n)
    print(f"{time.monotonic() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
