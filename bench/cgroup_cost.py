"""Where a spawn's cgroup costs, on the whole machine (issue 35, row 2).

    python -m bench.cgroup_cost [--windows N] [--seconds S] [--tenants full,nocg]
                                [--set daemon.KEY=VALUE ...] [--b-set daemon.KEY=VALUE ...]

One daemon with the tenants named (default `full`, the default profile, and
`nocg`, the same without the cgroup protection); windows of 8 clients
running /bin/true back to back alternate between them, in rotating order.
For each window: the rate, the machine's CPU per spawn (/proc/stat, all
CPUs), the root's, and the kernel threads' by kind (kworkers: a cgroup's
offline and release work, the namespaces' teardown; RCU's threads;
ksoftirqd), each thread's CPU from its schedstat. Prints the medians, each
tenant against the first, and the difference per spawn. With `--b-set`, a
second daemon (b: the settings given) serves the same tenants beside the
first (a), each tenant on each daemon a side of its own (e.g. `--tenants full
--b-set daemon.recycle_spawn_cgroups=false`: recycled cgroups against one
cgroup a spawn).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from bench import procfs
from bench.client import TenantClient
from bench.daemon import BenchDaemon, state_parent
from bench.frontend_ab import _apply, _cpu
from bench.stats import rotation
from bench.throughput import daemon_rate


def _kind(comm: str) -> str:
    if comm.startswith("kworker"):
        return "kworker"
    if comm.startswith("rcu"):
        return "rcu"
    if comm.startswith("ksoftirqd"):
        return "ksoftirqd"
    return "other kthread"


def kthreads() -> dict[str, float]:
    """CPU seconds of the kernel's threads (children of kthreadd) by kind."""
    totals: dict[str, float] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
            if stat.rsplit(")", 1)[1].split()[1] != "2" and entry != "2":
                continue
            comm = stat[stat.index("(") + 1 : stat.rindex(")")]
            ns = int(Path(f"/proc/{entry}/schedstat").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            continue
        kind = _kind(comm)
        totals[kind] = totals.get(kind, 0.0) + ns / 1e9
    return totals


def memory_cgroups() -> int:
    """The memory controller's cgroups, the dying ones included (/proc/cgroups)."""
    for line in Path("/proc/cgroups").read_text().splitlines():
        fields = line.split()
        if fields and fields[0] == "memory":
            return int(fields[2])
    return 0


def _parts(daemon: BenchDaemon) -> dict[str, float]:
    """CPU seconds of the daemon's processes: the front-ends together, the
    spawner, the children it reaped (the spawns' inits and commands), the
    pool maker with the children it reaped."""
    roles = daemon.helper_pids()
    parts = {"front-ends": sum(_cpu(p) for r, p in roles.items() if r.startswith("frontend"))}
    spawner = roles["spawner"]
    parts["spawner"] = _cpu(spawner)
    fields = Path(f"/proc/{spawner}/stat").read_text().rsplit(")", 1)[1].split()
    parts["spawns reaped (children)"] = (int(fields[13]) + int(fields[14])) / os.sysconf(
        "SC_CLK_TCK"
    )
    if "pools" in roles:
        parts["pool maker + reaped"] = procfs.cpu_seconds_with_reaped(roles["pools"])
    return parts


async def measure(args: argparse.Namespace) -> None:
    tenants = tuple(args.tenants.split(","))
    state = Path(tempfile.mkdtemp(prefix="cgroup-cost-", dir=state_parent()))
    daemons = {"a": BenchDaemon(state / "a", tenants)}
    _apply(daemons["a"].config, args.set)
    if args.b_set:
        daemons["b"] = BenchDaemon(state / "b", tenants)
        _apply(daemons["b"].config, args.set + args.b_set)
    sides = {
        (f"{kind}:{tenant}" if args.b_set else tenant): (daemon, tenant)
        for tenant in tenants
        for kind, daemon in daemons.items()
    }
    try:
        for daemon in daemons.values():
            daemon.start()
        for daemon, tenant in sides.values():  # warm up
            client = TenantClient(daemon.socket(tenant))
            for _ in range(20):
                await client.true()
            await client.close()
        await asyncio.sleep(0.5)
        print(f"load before: {os.getloadavg()[0]:.2f}", flush=True)
        rows: dict[str, dict[str, list[float]]] = {t: {} for t in sides}

        def add(tenant: str, name: str, value: float) -> None:
            rows[tenant].setdefault(name, []).append(value)

        for index in range(args.windows):
            for side in rotation(list(sides), index):
                daemon, tenant = sides[side]
                k0, m0, r0 = kthreads(), procfs.machine_busy_seconds(), _cpu(daemon.pid)
                g0, p0 = memory_cgroups(), _parts(daemon)
                done, seconds = await daemon_rate(daemon.socket(tenant), args.seconds)
                # The deferred work of the window's last spawns: let it run.
                await asyncio.sleep(args.settle)
                k1, m1, r1 = kthreads(), procfs.machine_busy_seconds(), _cpu(daemon.pid)
                p1 = _parts(daemon)
                tenant = side
                for part in p1:
                    add(tenant, f"{part} ms/spawn", (p1[part] - p0.get(part, 0)) * 1e3 / done)
                add(tenant, "spawns/s", done / seconds)
                add(tenant, "machine CPU ms/spawn", (m1 - m0) * 1e3 / done)
                add(tenant, "root CPU ms/spawn", (r1 - r0) * 1e3 / done)
                for kind in sorted(set(k0) | set(k1)):
                    add(
                        tenant, f"{kind} ms/spawn", (k1.get(kind, 0) - k0.get(kind, 0)) * 1e3 / done
                    )
                add(tenant, "memory cgroups (dying incl.) a spawn", (memory_cgroups() - g0) / done)
        labels = list(sides)
        names = list(rows[labels[0]])
        for tenant in labels[1:]:
            names += [n for n in rows[tenant] if n not in names]
        print(f"{args.windows} windows of {args.seconds:g} s, 8 clients, medians:")
        header = "".join(f"{t:>14}" for t in labels)
        print(f"{'':42}{header}   {labels[0]} - {labels[-1]}")
        for name in names:
            med = [statistics.median(rows[t].get(name, [0.0])) for t in labels]
            cells = "".join(f"{v:14.3f}" for v in med)
            print(f"{name:42}{cells}   {med[0] - med[-1]:+.3f}")
        print(f"load after: {os.getloadavg()[0]:.2f}", flush=True)
    finally:
        for daemon in daemons.values():
            daemon.stop()
        shutil.rmtree(state, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.cgroup_cost")
    parser.add_argument("--tenants", default="full,nocg")
    parser.add_argument("--windows", type=int, default=6)
    parser.add_argument("--seconds", type=float, default=2.0)
    parser.add_argument("--settle", type=float, default=0.2, help="s after each window")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--b-set", action="append", default=[], metavar="KEY=VALUE")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    asyncio.run(measure(args))
    print(f"{time.perf_counter() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
