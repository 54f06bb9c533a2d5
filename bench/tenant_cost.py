"""python -m bench.tenant_cost: eight Runs at a 256 MiB output ceiling on one
tenant, and what that costs another tenant and the root process (issue 29,
item 2). A bench row, not a test: on a loaded 2-core machine the figures
move with whatever else runs.

Prints, in one process:

- another tenant's Run of /bin/true, p50 and p95, while the eight run,
  against the same measured idle just before (the ratio);
- the root process's resident high-water mark while they run (VmHWM, reset
  first through /proc/<pid>/clear_refs), against its idle RSS;
- how each of the eight ended (a front-end past its own memory limit is
  ended by the kernel: the tenant's cost, not another's).

The eight are made by a client process of their own (`--heavy SOCKET`),
as another tenant's engine would be: receiving and parsing eight replies
of 256 MiB in this process would stall the loop that times /bin/true, and
that is the client's cost, not the daemon's. Its channel receives replies
up to 1 GiB, so a reply the daemon does send is received whole.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import grpc
from hostcap_proto.v1 import common_pb2, process_pb2, process_pb2_grpc

from bench.client import TenantClient
from bench.daemon import BenchDaemon, GiB, MiB, state_parent

CEILING = 256 * MiB
RUNS = 8
HEAVY, LIGHT = "stream", "full"


def _status(pid: int, key: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1]) * 1024
    return 0


def _cpu_seconds(pid: int) -> float:
    """User and system time of a process so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _p95(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))]


async def _heavy_run(stub: process_pb2_grpc.ProcessServiceStub) -> str:
    """One Run of CEILING bytes of stdout; how it ended."""
    request = process_pb2.SpawnRequest(
        argv=["head", "-c", str(CEILING), "/dev/zero"],
        limits=common_pb2.Limits(output_bytes=CEILING, wall_seconds=300),
    )
    try:
        result = await stub.Run(request)
    except grpc.aio.AioRpcError as error:
        return f"{error.code().name}"
    return f"{common_pb2.Outcome.Name(result.exited.outcome)} {len(result.stdout) // MiB} MiB"


async def heavy(socket: Path, runs: int) -> list[str]:
    """The eight Runs at once, from this process (`--heavy`)."""
    options = [("grpc.max_receive_message_length", GiB), ("grpc.max_send_message_length", MiB)]
    async with grpc.aio.insecure_channel(f"unix:{socket}", options=options) as channel:
        stub = process_pb2_grpc.ProcessServiceStub(channel)  # type: ignore[no-untyped-call]
        return list(await asyncio.gather(*(_heavy_run(stub) for _ in range(runs))))


async def measure(state: Path, runs: int = RUNS) -> dict[str, object]:
    daemon = BenchDaemon(state, (HEAVY, LIGHT)).start()
    light = TenantClient(daemon.socket(LIGHT))
    try:
        for _ in range(20):
            await light.true()
        idle = [await light.true() for _ in range(40)]
        rss = _status(daemon.pid, "VmRSS")
        Path(f"/proc/{daemon.pid}/clear_refs").write_text("5")
        cpu = _cpu_seconds(daemon.pid)
        heavy_client = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "bench.tenant_cost",
            "--heavy",
            str(daemon.socket(HEAVY)),
            "--runs",
            str(runs),
            stdout=asyncio.subprocess.PIPE,
        )
        output = asyncio.ensure_future(heavy_client.communicate())
        loaded: list[float] = []
        began = time.monotonic()
        while not output.done():
            loaded.append(await light.true())
        seconds = time.monotonic() - began
        stdout, _ = await output
        ends = json.loads(stdout.decode().strip().splitlines()[-1]) if stdout.strip() else []
        hwm = _status(daemon.pid, "VmHWM")
        cpu = _cpu_seconds(daemon.pid) - cpu
    finally:
        await light.close()
        daemon.stop()
    return {
        "idle_p50_ms": statistics.median(idle) * 1000,
        "idle_p95_ms": _p95(idle) * 1000,
        "loaded_p50_ms": statistics.median(loaded) * 1000,
        "loaded_p95_ms": _p95(loaded) * 1000,
        "loaded_max_ms": max(loaded) * 1000,
        "loaded_runs": len(loaded),
        "root_idle_rss_mib": rss / MiB,
        "root_hwm_mib": hwm / MiB,
        "seconds": seconds,
        "root_cpu_seconds": cpu,
        "ends": ends,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--heavy", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--runs", type=int, default=RUNS, help="Runs at once (default 8)")
    args = parser.parse_args()
    if args.heavy is not None:
        print(json.dumps(asyncio.run(heavy(args.heavy, args.runs))))
        return 0
    base = Path(tempfile.mkdtemp(prefix="tenant-cost-", dir=state_parent()))
    try:
        f = asyncio.run(measure(base / "state", args.runs))
    finally:
        shutil.rmtree(base, ignore_errors=True)
    print(
        f"other tenant's /bin/true: idle p50 {f['idle_p50_ms']:.1f} ms p95 "
        f"{f['idle_p95_ms']:.1f} ms; under {args.runs} ceiling Runs p50 {f['loaded_p50_ms']:.1f} ms "
        f"p95 {f['loaded_p95_ms']:.1f} ms max {f['loaded_max_ms']:.0f} ms "
        f"({f['loaded_runs']} runs in {f['seconds']:.1f} s); p95 ratio "
        f"{float(f['loaded_p95_ms']) / float(f['idle_p95_ms']):.1f}x"  # type: ignore[arg-type]
    )
    print(
        f"root process: idle RSS {f['root_idle_rss_mib']:.0f} MiB, high-water mark during "
        f"{f['root_hwm_mib']:.0f} MiB "
        f"({float(f['root_hwm_mib']) / float(f['root_idle_rss_mib']):.1f}x); "  # type: ignore[arg-type]
        f"its CPU during: {f['root_cpu_seconds']:.1f} s"
    )
    print(f"the {args.runs} Runs ended: {f['ends']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
