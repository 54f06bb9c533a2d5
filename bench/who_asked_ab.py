"""A/B of who asked (issue 33 item 3, decision 0033), in one process: the same
tenant on a daemon whose front-ends take over the accept and relay each
connection to their gRPC server (`daemon.record_callers = true`, the
default) and on one whose gRPC server serves the socket itself
(`record_callers = false`: the daemon before), measured in alternation.

    python -m bench.who_asked_ab [--rounds N] [--stream-mib N]

Prints, relay against direct, p50 and p95 of:

- row 0: a Health.Check round trip (answered in the front-end: the relay's
  cost alone);
- row 1: Run /bin/true on `full` (the default spawn);
- a 4 KiB ReadFile (bench.fs_bench's row);
- a streamed Spawn of `head -c N /dev/zero` (row 3's kind, smaller), in MiB/s.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import sys
import tempfile
import time
from pathlib import Path

from hostcap_proto.v1 import common_pb2, fs_pb2, fs_pb2_grpc, process_pb2

from bench.client import TenantClient, ready_for_ab
from bench.daemon import BenchDaemon, MiB, state_parent
from bench.stats import Summary, rotation
from bench.stream import STREAM_OUTPUT_BYTES

KINDS = ("relay", "direct")
TENANT = "full"
#: Row 3's tenant (its output ceiling lets the whole stream be streamed live).
STREAM = "stream"


async def _read_4k(stub: fs_pb2_grpc.FsServiceStub, path: str) -> float:
    start = time.perf_counter()
    await stub.ReadFile(fs_pb2.ReadFileRequest(path=path))
    return time.perf_counter() - start


async def _stream(client: TenantClient, size: int) -> float:
    request = process_pb2.SpawnRequest(
        argv=["head", "-c", str(size), "/dev/zero"],
        limits=common_pb2.Limits(output_bytes=STREAM_OUTPUT_BYTES, wall_seconds=300),
    )
    start = time.perf_counter()
    got = 0
    async for event in client.process.Spawn(request):
        if event.WhichOneof("event") == "output":
            got += len(event.output.data)
    seconds = time.perf_counter() - start
    if got < size:
        raise RuntimeError(f"the stream carried {got} of {size} bytes")
    return seconds


def _line(name: str, s: dict[str, Summary]) -> str:
    relay, direct = s["relay"], s["direct"]
    return (
        f"{name}: relay p50 {relay.p50_us:7.0f} us p95 {relay.p95_us:7.0f} | direct p50"
        f" {direct.p50_us:7.0f} us p95 {direct.p95_us:7.0f} | relay / direct p50"
        f" {relay.p50_us / direct.p50_us:.2f} p95 {relay.p95_us / direct.p95_us:.2f},"
        f" +{(relay.p50_us - direct.p50_us) / 1000:.3f} ms at the median"
    )


async def compare(state: Path, rounds: int, stream_mib: int) -> None:
    daemons = {kind: BenchDaemon(state / kind, (TENANT, STREAM)) for kind in KINDS}
    daemons["direct"].config["daemon"]["record_callers"] = False
    clients: dict[str, TenantClient] = {}
    streamers: dict[str, TenantClient] = {}
    try:
        for daemon in daemons.values():
            daemon.start()
        clients = {kind: TenantClient(d.socket(TENANT)) for kind, d in daemons.items()}
        streamers = {kind: TenantClient(d.socket(STREAM)) for kind, d in daemons.items()}
        fs = await ready_for_ab(clients, "who-asked-4k", 5)
        await asyncio.sleep(0.5)

        rows: dict[str, dict[str, list[float]]] = {
            name: {kind: [] for kind in KINDS} for name in ("row 0", "row 1", "read 4K")
        }
        for index in range(rounds):
            for kind in rotation(list(KINDS), index):
                rows["row 0"][kind].append(await clients[kind].health_rtt())
                rows["row 1"][kind].append(await clients[kind].true())
                rows["read 4K"][kind].append(await _read_4k(fs[kind], "who-asked-4k"))
        labels = {
            "row 0": "row 0, Health.Check",
            "row 1": "row 1, Run /bin/true",
            "read 4K": "ReadFile 4 KiB",
        }
        for name, samples in rows.items():
            s = {kind: Summary.of(v) for kind, v in samples.items()}
            print(_line(f"{labels[name]} ({rounds} rounds)", s))

        size = stream_mib * MiB
        streams: dict[str, list[float]] = {kind: [] for kind in KINDS}
        for index in range(4):
            for kind in rotation(list(KINDS), index):
                streams[kind].append(await _stream(streamers[kind], size))
        rate = {kind: size / MiB / min(v) for kind, v in streams.items()}
        print(
            f"stream {stream_mib} MiB (best of 4): relay {rate['relay']:.0f} MiB/s | direct"
            f" {rate['direct']:.0f} MiB/s | relay / direct {rate['relay'] / rate['direct']:.2f}"
        )
    finally:
        for c in [*clients.values(), *streamers.values()]:
            await c.close()
        for daemon in daemons.values():
            daemon.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.who_asked_ab")
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--stream-mib", type=int, default=64)
    args = parser.parse_args(argv)
    state = Path(tempfile.mkdtemp(prefix="who-asked-", dir=state_parent()))
    try:
        asyncio.run(compare(state, args.rounds, args.stream_mib))
    finally:
        shutil.rmtree(state, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
