"""A/B of a ReadFile asked of the fs worker directly (decision 0034) against
one relayed through the root process, in one process: two daemons, reads
interleaved in rotating order, each process's CPU per read.

    python -m bench.fs_direct_ab [--rounds N] [--size BYTES] [--swap]

`a` runs with `daemon.fs_direct_reads = false` (relayed), `b` with it true
(direct); `--swap` gives the names the other way round (the same daemons,
started in the other order), so a run and its swap are both orders. Prints
each side's p50 and p95, the CPU per read of the root, the tenant's
front-end and its fs worker (from /proc/PID/task/*/schedstat), and b / a.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from hostcap_proto.v1 import fs_pb2

from bench.client import TenantClient, ready_for_ab
from bench.daemon import BenchDaemon, state_parent
from bench.frontend_ab import _cpu, frontend_of
from bench.stats import rotation

TENANT = "full"
PATH = "fs-direct-ab"


async def compare(rounds: int, size: int, swap: bool) -> None:
    state = Path(tempfile.mkdtemp(prefix="fs-direct-ab-", dir=state_parent()))
    direct = {"a": False, "b": True}
    if swap:
        direct = {"a": True, "b": False}
    daemons = {kind: BenchDaemon(state / kind, (TENANT,)) for kind in "ab"}
    for kind, daemon in daemons.items():
        daemon.config["daemon"]["fs_direct_reads"] = direct[kind]
    clients: dict[str, TenantClient] = {}
    try:
        for daemon in daemons.values():
            daemon.start()
        clients = {kind: TenantClient(d.socket(TENANT)) for kind, d in daemons.items()}
        fs = await ready_for_ab(clients, PATH, 5)
        data = os.urandom(size)
        for stub in fs.values():
            await stub.WriteFile(fs_pb2.WriteFileRequest(path=PATH, data=data))
        pids: dict[str, dict[str, int]] = {}
        for kind, daemon in daemons.items():
            workers = [p for r, p in daemon.helper_pids().items() if r.startswith("worker")]
            pids[kind] = {"root": daemon.pid, "front-end": frontend_of(daemon, TENANT)}
            pids[kind].update({f"worker{i}": p for i, p in enumerate(workers)})
        request = fs_pb2.ReadFileRequest(path=PATH)
        for _ in range(30):
            for kind in "ab":
                reply = await fs[kind].ReadFile(request)
                assert reply.data == data
        print(f"a: direct={direct['a']}  b: direct={direct['b']}  ({size} bytes)")
        print(f"load before: {os.getloadavg()[0]:.2f}", flush=True)
        lat: dict[str, list[float]] = {k: [] for k in "ab"}
        cpu = {k: dict.fromkeys(pids[k], 0.0) for k in "ab"}
        for index in range(rounds):
            for kind in rotation(["a", "b"], index):
                before = {role: _cpu(pid) for role, pid in pids[kind].items()}
                start = time.perf_counter()
                await fs[kind].ReadFile(request)
                lat[kind].append(time.perf_counter() - start)
                for role, pid in pids[kind].items():
                    cpu[kind][role] += _cpu(pid) - before[role]
        p50 = {k: statistics.median(v) * 1e6 for k, v in lat.items()}
        for kind in "ab":
            ordered = sorted(lat[kind])
            p95 = ordered[int(len(ordered) * 0.95)] * 1e6
            per = "  ".join(f"{r} {c / rounds * 1e6:5.0f} us" for r, c in cpu[kind].items())
            total = sum(cpu[kind].values()) / rounds * 1e6
            print(
                f"{kind} p50 {p50[kind]:6.0f} us p95 {p95:6.0f} us  CPU per read: {per}"
                f"  all {total:5.0f} us"
            )
        both = {k: sum(cpu[k].values()) for k in "ab"}
        root = {k: cpu[k]["root"] for k in "ab"}
        print(
            f"b / a: p50 {p50['b'] / p50['a']:.2f}  daemon CPU {both['b'] / both['a']:.2f}"
            f"  root CPU {root['b'] / root['a']:.2f}"
            if root["a"]
            else ""
        )
        print(f"load after: {os.getloadavg()[0]:.2f}")
    finally:
        for client in clients.values():
            await client.close()
        for daemon in daemons.values():
            daemon.stop()
        shutil.rmtree(state, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=500)
    parser.add_argument("--size", type=int, default=4096)
    parser.add_argument("--swap", action="store_true", help="a direct, b relayed")
    args = parser.parse_args()
    asyncio.run(compare(args.rounds, args.size, args.swap))


if __name__ == "__main__":
    main()
