"""What a child's joins of a spawn's cgroups cost the kernel (issue 35 rows
1 and 2; bench/README.md, "what a spawn's cgroup costs, eighth pass").

    python -m bench.cgroup_join [--rounds N] [--batch N] [--exec]

One spawn cgroup made by the daemon's own code (`CgroupHost`, in a subtree
of its own, with a spawn's limits) and a C loop (cgroup_join.c): a forked
child writes "0" into none, some or all of the cgroup's cgroup.procs (what
a spawn's child does with its order's fds: one migration a hierarchy),
then exits (or, `--exec`, execs /bin/true); batches of each set alternate
in rotating order, all in the one cgroup (each child reaped). Prints the
child's CPU (wait4's rusage) and the wall time per child, medians of the
batches, and each set's extra over joining none. A warm child joins ahead
of its spawn (the pool maker's child); a fresh spawn's child joins on the
spawn's path.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

from hostcapd.sandbox.cgroups import CgroupHost
from hostcapd.sandbox.cpu import CpuHost

from bench.native import compile_c

MEMORY = 256 << 20
PIDS = 64


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.cgroup_join")
    parser.add_argument("--rounds", type=int, default=12, help="batches a set")
    parser.add_argument("--batch", type=int, default=100, help="children a batch")
    parser.add_argument("--exec", action="store_true", help="the child execs /bin/true")
    args = parser.parse_args(argv)
    parent = f"hostcapd-bench-cgjoin-{os.getpid()}"
    host = CgroupHost.probe(parent)
    cpu = CpuHost.probe(parent)
    if not host.support.version:
        print(f"no cgroups: {host.support.reason}")
        return 1
    host.prepare()
    view = host.for_tenant("bench", pids=4096, memory_bytes=4 << 30)
    cgroup = view.create(uuid.uuid4().hex, MEMORY, PIDS)
    share = cpu.tenant("bench", 100, None) if cpu.subtree is not None else None
    try:
        with tempfile.TemporaryDirectory(prefix="cgroup-join-") as directory:
            binary = compile_c("cgroup_join.c", Path(directory))
            procs = {
                f"v{h.version} {'+'.join(h.roles)}": f"{path}/cgroup.procs"
                for h, path in zip(host.hierarchies, cgroup.paths, strict=True)
            }
            if share is not None:  # a spawn's child joins its tenant's cpu cgroup too
                procs["v1 cpu (the tenant's share)"] = f"{share.directory}/cgroup.procs"
            sets = {"none": []} | {name: [path] for name, path in procs.items()}
            if len(procs) > 1:
                sets["all (a spawn's)"] = list(procs.values())
            print(f"{host.support.reason}; load before: {os.getloadavg()[0]:.2f}", flush=True)
            results: dict[str, list[tuple[float, float]]] = {name: [] for name in sets}
            for index in range(args.rounds):
                names = list(sets)
                shift = index % len(names)
                for name in names[shift:] + names[:shift]:
                    out = subprocess.run(
                        [str(binary), str(args.batch), "1" if args.exec else "0", *sets[name]],
                        capture_output=True,
                        text=True,
                        check=True,
                    ).stdout.split()
                    results[name].append((float(out[0]), float(out[1])))
    finally:
        cgroup.kill()
        cgroup.remove()
        view.close()
        host.release()
        cpu.release()
    print(
        f"{args.rounds} batches of {args.batch} a set, child {'execs' if args.exec else 'exits'};"
        f" load after: {os.getloadavg()[0]:.2f}"
    )
    print(f"{'µs a child (median batch)':32}{'CPU':>9}{'extra':>9}{'wall':>9}{'extra':>9}")
    cpu0 = statistics.median(c for c, _ in results["none"])
    wall0 = statistics.median(w for _, w in results["none"])
    for name, values in results.items():
        cpu = statistics.median(c for c, _ in values)
        wall = statistics.median(w for _, w in values)
        print(f"{name:32}{cpu:9.1f}{cpu - cpu0:+9.1f}{wall:9.1f}{wall - wall0:+9.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
