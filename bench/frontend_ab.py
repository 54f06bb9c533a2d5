"""A/B of the tenant front-end (issue 35 items 4 and 5), in one process: two
daemons, `a` and `b`, measured in alternation, in rotating order.

    python -m bench.frontend_ab [--a-python PY] [--b-set daemon.KEY=VALUE]
                                [--rounds N] [--windows N] [--stream-mib N]
                                [--spaced MS]

`a` is this checkout's daemon unless `--a-python` names another interpreter
(another checkout's venv, e.g. main's in a worktree: its own code, its
daemon and front-ends); `b` is this checkout's with each `--b-set` applied
to its config (`--a-set` likewise). Prints, b against a:

- row 0's Health.Check (answered in the front-end), row 1's Run /bin/true
  on `full` (or `--tenant`: `minimal`, `nocg`, ...), and a 4 KiB ReadFile: p50 and p95;
- the tenant front-end's CPU per call over those rounds, and the whole
  daemon's (root, front-ends, spawner, fs workers);
- row 2's 8 clients on `full`: spawns per second (median window), and the
  daemon's and the front-end's CPU per spawn;
- a streamed Spawn of `head -c N /dev/zero` on `stream` (best of 4), MiB/s.

`--only-read`: the rounds are ReadFiles alone (no windows, no streams), and
the fs workers' CPU per read (every `worker` child of the daemon: only the
tenant's reads) is printed beside the front-end's.
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
from typing import Any

from bench import procfs
from bench.client import TenantClient, ready_for_ab
from bench.daemon import BenchDaemon, MiB, state_parent
from bench.stats import Summary, rotation
from bench.throughput import daemon_rate
from bench.who_asked_ab import _read_4k, _stream

KINDS = ("a", "b")
TENANT = "full"
STREAM = "stream"


def _value(text: str) -> Any:
    lowered = text.lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    try:
        return int(text)
    except ValueError:
        return text


def _apply(config: dict[str, Any], settings: list[str]) -> None:
    for setting in settings:
        key, _, value = setting.partition("=")
        *tables, name = key.split(".")
        where = config
        for table in tables:
            where = where.setdefault(table, {})
        where[name] = _value(value)


def _cpu(pid: int) -> float:
    """CPU seconds of all of `pid`'s threads, to the nanosecond (schedstat:
    the ticks of /proc/PID/stat are too coarse for one call)."""
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            total += int((task / "schedstat").read_text().split()[0])
        except (FileNotFoundError, ProcessLookupError):
            continue  # a thread that ended meanwhile
    return total / 1e9


def _cpu_of(pids: list[int]) -> float:
    return sum(_cpu(pid) for pid in pids)


def _with_children(pid: int) -> float:
    """CPU seconds of `pid` and of its children it has reaped (/proc/PID/stat,
    in ticks): the pool maker's, whose short-lived children (a mount
    namespace's, before it made copies itself) are its work too."""
    if pid <= 0:
        return 0.0
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return sum(int(f) for f in fields[11:15]) / os.sysconf("SC_CLK_TCK")


def frontend_of(daemon: BenchDaemon, tenant: str) -> int:
    """The pid of the front-end serving `tenant` (its cwd is its bind
    directory, beside the tenant's socket, named after it)."""
    name = daemon.socket(tenant).name
    for pid in daemon.frontend_pids():
        if f".{name}.fe." in os.readlink(f"/proc/{pid}/cwd"):
            return pid
    raise RuntimeError(f"no front-end of {tenant!r} found")


def _daemon_pids(daemon: BenchDaemon) -> list[int]:
    return [daemon.pid, *daemon.helper_pids().values()]


def _ratio(name: str, a: float, b: float, unit: str, fmt: str = ".0f") -> str:
    ratio = f"{b / a:.2f}" if a else "n/a"
    return f"{name}: a {a:{fmt}} {unit} | b {b:{fmt}} {unit} | b / a {ratio}"


async def compare(args: argparse.Namespace) -> None:
    state = Path(tempfile.mkdtemp(prefix="frontend-ab-", dir=state_parent()))
    tenant = args.tenant
    daemons = {kind: BenchDaemon(state / kind, (tenant, STREAM)) for kind in KINDS}
    _apply(daemons["a"].config, args.a_set)
    _apply(daemons["b"].config, args.b_set)
    if args.a_python:
        daemons["a"].python = args.a_python
    if args.b_python:
        daemons["b"].python = args.b_python
    clients: dict[str, TenantClient] = {}
    streamers: dict[str, TenantClient] = {}
    try:
        for daemon in daemons.values():
            daemon.start()
        clients = {kind: TenantClient(d.socket(tenant)) for kind, d in daemons.items()}
        streamers = {kind: TenantClient(d.socket(STREAM)) for kind, d in daemons.items()}
        fs = await ready_for_ab(clients, "frontend-4k", 10)
        front = {kind: frontend_of(d, tenant) for kind, d in daemons.items()}
        pids = {kind: _daemon_pids(d) for kind, d in daemons.items()}
        await asyncio.sleep(0.5)
        print(f"load before: {os.getloadavg()[0]:.2f}", flush=True)

        if args.only_stream:
            args.rounds = args.windows = 0
        if args.only_read:
            args.windows = args.stream_mib = 0
        workers = {
            k: [p for r, p in d.helper_pids().items() if r.startswith("worker")]
            for k, d in daemons.items()
        }
        worker_cpu = {k: 0.0 for k in KINDS}
        names = ("row 0, Health.Check", "row 1, Run /bin/true", "ReadFile 4 KiB")
        rows: dict[str, dict[str, list[float]]] = {n: {k: [] for k in KINDS} for n in names}
        fe_cpu = {n: {k: 0.0 for k in KINDS} for n in names}
        all_cpu = {n: {k: 0.0 for k in KINDS} for n in names}
        root_cpu = {n: {k: 0.0 for k in KINDS} for n in names}
        pools = {kind: d.helper_pids().get("pools", -1) for kind, d in daemons.items()}
        run_pools = {k: [0.0, 0.0] for k in KINDS}  # the maker's own, with its children
        spawner = {k: d.helper_pids()["spawner"] for k, d in daemons.items()}
        run_spawner = {k: 0.0 for k in KINDS}
        for index in range(args.rounds):
            for kind in rotation(list(KINDS), index):
                if args.spaced:  # each daemon idle that long before its calls
                    await asyncio.sleep(args.spaced / 1000)
                calls = (
                    clients[kind].health_rtt,
                    clients[kind].true,
                    lambda kind=kind: _read_4k(fs[kind], "frontend-4k"),
                )
                p0 = _cpu(pools[kind]) if pools[kind] > 0 else 0.0
                c0 = _with_children(pools[kind])
                s0 = _cpu(spawner[kind])
                for name, call in zip(names, calls, strict=True):
                    if args.only_read and name != names[2]:
                        continue
                    w0 = _cpu_of(workers[kind]) if name == names[2] else 0.0
                    f0 = _cpu(front[kind])
                    d0 = _cpu_of(pids[kind])
                    r0 = _cpu(daemons[kind].pid)
                    rows[name][kind].append(await call())
                    fe_cpu[name][kind] += _cpu(front[kind]) - f0
                    all_cpu[name][kind] += _cpu_of(pids[kind]) - d0
                    root_cpu[name][kind] += _cpu(daemons[kind].pid) - r0
                    if name == names[2]:
                        worker_cpu[kind] += _cpu_of(workers[kind]) - w0
                if pools[kind] > 0:  # over the three calls: only the Run spawns
                    run_pools[kind][0] += _cpu(pools[kind]) - p0
                run_pools[kind][1] += _with_children(pools[kind]) - c0
                run_spawner[kind] += _cpu(spawner[kind]) - s0
        if args.rounds:
            n = args.rounds / 1000
            own = {k: v[0] / n for k, v in run_pools.items()}
            whole = {k: v[1] / n for k, v in run_pools.items()}
            print(
                "pool maker CPU per Run, back to back: "
                + _ratio("own", own["a"], own["b"], "ms", ".3f")
                + "  ;  "
                + _ratio("with its children", whole["a"], whole["b"], "ms", ".3f")
            )
            mine = {k: v / n for k, v in run_spawner.items()}
            print("spawner CPU per Run: " + _ratio("own", mine["a"], mine["b"], "ms", ".3f"))
        for name, samples in rows.items() if args.rounds else ():
            if not samples["a"]:
                continue
            s = {kind: Summary.of(v) for kind, v in samples.items()}
            a, b = s["a"], s["b"]
            print(
                f"{name} ({args.rounds} rounds): a p50 {a.p50_us:6.0f} us p95 {a.p95_us:6.0f}"
                f" | b p50 {b.p50_us:6.0f} us p95 {b.p95_us:6.0f} | b / a p50"
                f" {b.p50_us / a.p50_us:.2f} p95 {b.p95_us / a.p95_us:.2f}"
            )
            n = args.rounds / 1000  # ms per call
            print(
                "  "
                + _ratio(
                    "front-end CPU/call", fe_cpu[name]["a"] / n, fe_cpu[name]["b"] / n, "ms", ".3f"
                )
                + "  ;  "
                + _ratio(
                    "daemon CPU/call", all_cpu[name]["a"] / n, all_cpu[name]["b"] / n, "ms", ".3f"
                )
                + "  ;  "
                + _ratio(
                    "root CPU/call", root_cpu[name]["a"] / n, root_cpu[name]["b"] / n, "ms", ".3f"
                )
            )
            if name == names[2]:
                w = {k: v / n for k, v in worker_cpu.items()}
                print("  " + _ratio("fs workers' CPU/read", w["a"], w["b"], "ms", ".3f"))

        rates: dict[str, list[float]] = {k: [] for k in KINDS}
        per_spawn: dict[str, list[float]] = {k: [] for k in KINDS}
        fe_per_spawn: dict[str, list[float]] = {k: [] for k in KINDS}
        root_per_spawn: dict[str, list[float]] = {k: [] for k in KINDS}
        pools_own = {k: 0.0 for k in KINDS}
        pools_all = {k: 0.0 for k in KINDS}
        spawner_own = {k: 0.0 for k in KINDS}
        spawns = {k: 0 for k in KINDS}
        machine: dict[str, list[float]] = {k: [] for k in KINDS}
        for index in range(args.windows):
            for kind in rotation(list(KINDS), index):
                f0 = _cpu(front[kind])
                d0 = _cpu_of(pids[kind])
                r0 = _cpu(daemons[kind].pid)
                p0 = _cpu(pools[kind]) if pools[kind] > 0 else 0.0
                c0 = _with_children(pools[kind])
                s0 = _cpu(spawner[kind])
                m0 = procfs.machine_busy_seconds()
                done, seconds = await daemon_rate(daemons[kind].socket(tenant), args.seconds)
                machine[kind].append((procfs.machine_busy_seconds() - m0) * 1e3 / done)
                spawner_own[kind] += _cpu(spawner[kind]) - s0
                if pools[kind] > 0:
                    pools_own[kind] += _cpu(pools[kind]) - p0
                pools_all[kind] += _with_children(pools[kind]) - c0
                spawns[kind] += done
                root_per_spawn[kind].append((_cpu(daemons[kind].pid) - r0) * 1e3 / done)
                per_spawn[kind].append((_cpu_of(pids[kind]) - d0) * 1e3 / done)
                fe_per_spawn[kind].append((_cpu(front[kind]) - f0) * 1e3 / done)
                rates[kind].append(done / seconds)
        if not args.windows:
            rates = per_spawn = fe_per_spawn = root_per_spawn = {k: [1.0] for k in KINDS}
        med = {k: statistics.median(v) for k, v in rates.items()}
        cpu = {k: statistics.median(v) for k, v in per_spawn.items()}
        fe = {k: statistics.median(v) for k, v in fe_per_spawn.items()}
        root = {k: statistics.median(v) for k, v in root_per_spawn.items()}
        print(f"8 clients ({args.windows} windows of {args.seconds:g} s a side):")
        print("  " + _ratio("spawns/s", med["a"], med["b"], "/s"))
        print("  " + _ratio("daemon CPU/spawn", cpu["a"], cpu["b"], "ms", ".3f"))
        print("  " + _ratio("front-end CPU/spawn", fe["a"], fe["b"], "ms", ".3f"))
        print("  " + _ratio("root CPU/spawn", root["a"], root["b"], "ms", ".3f"))
        if all(machine.values()):
            busy = {k: statistics.median(v) for k, v in machine.items()}
            print("  " + _ratio("machine CPU/spawn (all CPUs)", busy["a"], busy["b"], "ms", ".3f"))
        if all(spawns.values()):
            own = {k: pools_own[k] * 1e3 / spawns[k] for k in KINDS}
            whole = {k: pools_all[k] * 1e3 / spawns[k] for k in KINDS}
            print("  " + _ratio("pool maker CPU/spawn", own["a"], own["b"], "ms", ".3f"))
            mine = {k: spawner_own[k] * 1e3 / spawns[k] for k in KINDS}
            print("  " + _ratio("spawner CPU/spawn", mine["a"], mine["b"], "ms", ".3f"))
            print(
                "  "
                + _ratio("pool maker + its children CPU/spawn", whole["a"], whole["b"], "ms", ".3f")
            )

        if args.stream_mib:
            size = args.stream_mib * MiB
            streams: dict[str, list[float]] = {kind: [] for kind in KINDS}
            stream_fe = {kind: frontend_of(d, STREAM) for kind, d in daemons.items()}
            stream_cpu = {kind: 0.0 for kind in KINDS}
            stream_root_cpu = {kind: 0.0 for kind in KINDS}
            for index in range(args.streams):
                for kind in rotation(list(KINDS), index):
                    f0, r0 = _cpu(stream_fe[kind]), _cpu(daemons[kind].pid)
                    streams[kind].append(await _stream(streamers[kind], size))
                    stream_cpu[kind] += _cpu(stream_fe[kind]) - f0
                    stream_root_cpu[kind] += _cpu(daemons[kind].pid) - r0
            best = {kind: size / MiB / min(v) for kind, v in streams.items()}
            mid = {kind: size / MiB / statistics.median(v) for kind, v in streams.items()}
            what = f"stream {args.stream_mib} MiB x {args.streams}"
            print(_ratio(f"{what}, best", best["a"], best["b"], "MiB/s"))
            print(_ratio(f"{what}, median", mid["a"], mid["b"], "MiB/s"))
            gib = args.streams * size / (1 << 30)
            fe_gib = {kind: stream_cpu[kind] / gib for kind in KINDS}
            print("  " + _ratio("front-end CPU s/GiB", fe_gib["a"], fe_gib["b"], "s", ".2f"))
            root_gib = {kind: stream_root_cpu[kind] / gib for kind in KINDS}
            print("  " + _ratio("root CPU s/GiB", root_gib["a"], root_gib["b"], "s", ".2f"))
        print(f"load after: {os.getloadavg()[0]:.2f}", flush=True)
    finally:
        for c in [*clients.values(), *streamers.values()]:
            await c.close()
        for daemon in daemons.values():
            daemon.stop()
        shutil.rmtree(state, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.frontend_ab")
    parser.add_argument("--a-python", default="", help="the interpreter of daemon a")
    parser.add_argument("--b-python", default="", help="the interpreter of daemon b")
    parser.add_argument("--a-set", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--b-set", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--tenant", default=TENANT, help="the bench tenant of the Runs (full)")
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--windows", type=int, default=4)
    parser.add_argument("--spaced", type=float, default=0, help="ms of quiet before each round")
    parser.add_argument("--seconds", type=float, default=1.5)
    parser.add_argument("--stream-mib", type=int, default=64)
    parser.add_argument("--streams", type=int, default=4, help="streams a side")
    parser.add_argument("--only-stream", action="store_true")
    parser.add_argument("--only-read", action="store_true", help="ReadFile rounds alone")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    asyncio.run(compare(args))
    print(f"{time.perf_counter() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
