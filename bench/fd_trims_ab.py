"""python -m bench.fd_trims_ab [--rounds N]

In-process A/B of three of the root's per-spawn steps, old form against
new, interleaved in one process (µs a spawn, the median of N rounds of
2000 calls each, each round alternating which goes first; root only):

- a fresh order's cgroup.procs fds: a dup of each (the spawn cgroup's
  three on this host's hybrid layout, the tenant's cpu share's one), closed
  once sent (old), against the list of the fds themselves, lent (new);
- the child's stdin when it has none: /dev/null opened and closed (old)
  against a kept fd, lent (new);
- a recycle's base: `pids.events` and `memory.oom_control` read again and
  parsed (old) against the values `stats` read, taken (new).

The fds are real cgroup files: this process's own cgroup.procs in each
hierarchy a spawn joins, and the counters of a v1 memory and pids cgroup
it makes for the run (and removes).
"""

from __future__ import annotations

import argparse
import os
import statistics

from hostcapd.sandbox.spawn_cgroup import _keyed

from bench.stats import per_call_us

CALLS = 2000
#: What a spawn's child joins on this host: the unified (kill), v1 memory
#: and v1 pids hierarchies, and the tenant's cpu share (v1 cpu).
JOINED = ("unified", "memory", "pids", "cpu")


def _own(hierarchy: str) -> str:
    """This process's cgroup directory in `hierarchy`."""
    with open("/proc/self/cgroup", encoding="ascii") as f:
        for line in f:
            _, controllers, path = line.rstrip("\n").split(":", 2)
            if (hierarchy == "unified" and controllers == "") or hierarchy in controllers.split(
                ","
            ):
                return f"/sys/fs/cgroup/{hierarchy}{path}"
    raise SystemExit(f"no {hierarchy} hierarchy in /proc/self/cgroup")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.fd_trims_ab")
    parser.add_argument("--rounds", type=int, default=100)
    args = parser.parse_args(argv)
    procs = [os.open(f"{_own(h)}/cgroup.procs", os.O_WRONLY | os.O_CLOEXEC) for h in JOINED]
    # Counters of a v1 memory and pids cgroup of the bench's own (the roots have none).
    made = [f"{_own(h)}/bench-fd-trims-{os.getpid()}" for h in ("memory", "pids")]
    for directory in made:
        os.mkdir(directory)
    oom = os.open(f"{made[0]}/memory.oom_control", os.O_RDONLY | os.O_CLOEXEC)
    pids = os.open(f"{made[1]}/pids.events", os.O_RDONLY | os.O_CLOEXEC)
    null = os.open("/dev/null", os.O_RDONLY | os.O_CLOEXEC)
    kept = (0, 0)

    def procs_old() -> None:
        dups = [os.dup(fd) for fd in procs]
        for fd in dups:
            os.close(fd)

    def procs_new() -> list[int]:
        return list(procs)

    def null_old() -> None:
        os.close(os.open("/dev/null", os.O_RDONLY | os.O_CLOEXEC))

    def null_new() -> int:
        return null

    def base_old() -> tuple[int, int]:
        return (
            _keyed(os.pread(oom, 65536, 0).decode(), "oom_kill"),
            _keyed(os.pread(pids, 65536, 0).decode(), "max"),
        )

    def base_new() -> tuple[int, int]:
        return kept

    pairs = {
        "cgroup.procs fds (4)": (procs_old, procs_new),
        "stdin's /dev/null": (null_old, null_new),
        "recycle's base (2 reads)": (base_old, base_new),
    }
    times: dict[str, tuple[list[float], list[float]]] = {k: ([], []) for k in pairs}
    for index in range(args.rounds):
        for name, (old, new) in pairs.items():
            if index % 2:
                times[name][1].append(per_call_us(new, CALLS))
                times[name][0].append(per_call_us(old, CALLS))
            else:
                times[name][0].append(per_call_us(old, CALLS))
                times[name][1].append(per_call_us(new, CALLS))
    with open("/proc/loadavg", encoding="ascii") as f:
        load = f.read().split()[0]
    print(f"median µs a spawn, {args.rounds} rounds of {CALLS} calls, load {load}")
    print(f"  {'step':28}{'old':>8}{'new':>8}{'saved':>8}")
    total = 0.0
    for name, (old_times, new_times) in times.items():
        old_us, new_us = statistics.median(old_times), statistics.median(new_times)
        total += old_us - new_us
        print(f"  {name:28}{old_us:8.2f}{new_us:8.2f}{old_us - new_us:8.2f}")
    print(f"  {'together':28}{'':16}{total:8.2f}")
    for fd in [*procs, oom, pids, null]:
        os.close(fd)
    for directory in made:
        os.rmdir(directory)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
