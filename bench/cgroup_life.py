"""A spawn cgroup's life in one process, made and removed for each spawn
against recycled (issue 35 row 2; bench/README.md, "a spawn's cgroup
recycled").

    python -m bench.cgroup_life [--rounds N] [--batch N] [--warm]

The daemon's own code (`CgroupHost`, `SpawnCgroup`) on this host's cgroups,
in a subtree of its own: each round makes (or takes) a cgroup with a
spawn's limits, gives its cgroup.procs fds to a forked child that joins
them and execs /bin/true, waits for it, reads its stats, then removes (or
recycles) it. Batches of each way alternate. Prints, for each step, this
thread's CPU per round (the root's part), and per batch the kernel
threads' CPU (kworkers: a removed cgroup's offline and release) and the
machine's, per round.

`--warm`: both ways recycle; "made" is then a recycled cgroup made
unlimited for a warm child to wait in and given its spawn's limits at the
take (main before 2026-12-07), "recycled" one that keeps the limits its
last spawn had, the tenant's defaults, which its next spawn asks for too
(`process/cgroup_pool.py`, `default_limits`): no limit written.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
import uuid

from hostcapd.process.cgroup_pool import LEFTOVER_MAX
from hostcapd.sandbox.cgroups import CgroupHost, SpawnCgroup

from bench import procfs
from bench.cgroup_cost import kthreads

MEMORY = 256 << 20
PIDS = 64


def _child(fds: list[int]) -> int:
    pid = os.fork()
    if pid == 0:
        try:
            for fd in fds:
                os.write(fd, b"0")
            os.execv("/bin/true", ["/bin/true"])
        finally:
            os._exit(127)
    for fd in fds:
        os.close(fd)
    return pid


def _round(
    view: CgroupHost,
    kept: list[SpawnCgroup],
    recycle: bool,
    steps: dict[str, list[int]],
    warm: bool = False,
) -> None:
    clock = time.thread_time_ns
    t0 = clock()
    cgroup = kept.pop() if (recycle or warm) and kept else None
    if cgroup is None:
        cgroup = view.create(uuid.uuid4().hex, MEMORY, PIDS)
        cgroup.open_stats()
    else:
        if warm and not recycle:  # made unlimited while a warm child waits
            view.set_limits(cgroup, None, None)
        view.set_limits(cgroup, MEMORY, PIDS)
    t1 = clock()
    fds = cgroup.procs_fds()
    t2 = clock()
    pid = _child(fds)
    os.waitpid(pid, 0)
    t3 = clock()
    cgroup.stats()
    t4 = clock()
    if not ((recycle or warm) and cgroup.recycle(LEFTOVER_MAX)):
        cgroup.remove()
    else:
        kept.append(cgroup)
    t5 = clock()
    for name, ns in (
        ("make (mkdir, limits) / take (limits if changed)", t1 - t0),
        ("cgroup.procs fds", t2 - t1),
        ("stats", t4 - t3),
        ("remove / recycle", t5 - t4),
        ("all the cgroup's steps", t1 - t0 + t2 - t1 + t4 - t3 + t5 - t4),
    ):
        steps.setdefault(name, []).append(ns)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.cgroup_life")
    parser.add_argument("--rounds", type=int, default=600, help="rounds a way")
    parser.add_argument("--batch", type=int, default=50)
    parser.add_argument("--warm", action="store_true", help="both recycle: see the docstring")
    args = parser.parse_args(argv)
    host = CgroupHost.probe(f"hostcapd-bench-cglife-{os.getpid()}")
    if not host.support.version:
        print(f"no cgroups: {host.support.reason}")
        return 1
    host.prepare()
    view = host.for_tenant("bench", pids=4096, memory_bytes=4 << 30)
    print(f"{host.support.reason}; load before: {os.getloadavg()[0]:.2f}", flush=True)
    steps: dict[bool, dict[str, list[int]]] = {False: {}, True: {}}
    kernel: dict[bool, dict[str, list[float]]] = {False: {}, True: {}}
    kept: list[SpawnCgroup] = []
    kept_by = {False: kept, True: [] if args.warm else kept}
    try:
        done = {False: 0, True: 0}
        index = 0
        while min(done.values()) < args.rounds:
            for recycle in (index % 2 == 0, index % 2 == 1):
                k0, m0 = kthreads(), procfs.machine_busy_seconds()
                for _ in range(args.batch):
                    _round(view, kept_by[recycle], recycle, steps[recycle], args.warm)
                time.sleep(0.05)  # the deferred work of the batch's last ones
                k1, m1 = kthreads(), procfs.machine_busy_seconds()
                per = kernel[recycle]
                for kind in set(k0) | set(k1):
                    per.setdefault(kind, []).append(
                        (k1.get(kind, 0) - k0.get(kind, 0)) * 1e6 / args.batch
                    )
                per.setdefault("machine (all CPUs)", []).append((m1 - m0) * 1e6 / args.batch)
                done[recycle] += args.batch
            index += 1
    finally:
        for cgroup in [*kept_by[False], *kept_by[True]] if args.warm else kept:
            cgroup.remove()
        view.close()
        host.release()
    print(
        f"{args.rounds} rounds a way, batches of {args.batch}; load after: {os.getloadavg()[0]:.2f}"
    )
    print(
        f"{'µs a round (median; kernel threads: median batch)':58}{'made':>10}{'recycled':>10}{'ratio':>8}"
    )
    for name in steps[False]:
        a = statistics.median(steps[False][name]) / 1e3
        b = statistics.median(steps[True][name]) / 1e3
        print(f"{name:58}{a:10.1f}{b:10.1f}{b / a if a else 0:8.2f}")
    for name in sorted(kernel[False]):
        a = statistics.median(kernel[False][name])
        b = statistics.median(kernel[True].get(name, [0.0]))
        print(f"{name:58}{a:10.1f}{b:10.1f}{b / a if a else 0:8.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
