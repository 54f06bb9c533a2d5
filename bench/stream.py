"""Row 3 (and row 6's stream figure): stdout throughput of a 256 MiB stream.

The daemon side is a streaming Spawn of `head -c 268435456 /dev/zero` on the
`stream` tenant, asking for 512 MiB of kept output (the tenant ceiling's
most, see bench/daemon.py): the live-streamed part of a stream is the head
half of `output_bytes`, so all of it goes out as it is read rather than
sitting in the tail ring. Up to 2026-12-03 the stream was 1 GiB, before
output ceilings were bounded by the client's largest message.

Interleaved with a bare grpc.aio server streaming the same bytes as 64 KiB
messages (the floor) and the shell pipe `head -c N /dev/zero | cat` of the
same size. CPU seconds of the daemon's front-end (and spawner) come from
/proc/<pid>/stat; its RSS is sampled every 20 ms.
"""

from __future__ import annotations

import statistics
import time

from hostcap_proto.v1 import common_pb2, process_pb2

from bench import procfs
from bench.baselines import Baselines
from bench.client import TenantClient, check_exited
from bench.daemon import BenchDaemon, GiB, MiB
from bench.native import BenchError
from bench.report import Line, Row, Target

#: The kept output a stream asks for; its head half is streamed live.
STREAM_OUTPUT_BYTES = 512 * MiB


async def daemon_stream(client: TenantClient, daemon: BenchDaemon, nbytes: int) -> dict[str, float]:
    request = process_pb2.SpawnRequest(
        argv=["head", "-c", str(nbytes), "/dev/zero"],
        limits=common_pb2.Limits(output_bytes=STREAM_OUTPUT_BYTES, wall_seconds=300),
    )
    spawner = daemon.helper_pids().get("spawner")
    watched = [daemon.pid] + ([spawner] if spawner else [])
    cpu = {pid: procfs.cpu_seconds(pid) for pid in watched}
    before = procfs.rss_bytes(daemon.pid)
    received = 0
    exited = None
    with procfs.RssSampler([daemon.pid]) as sampler:
        start = time.perf_counter()
        async for event in client.process.Spawn(request):
            kind = event.WhichOneof("event")
            if kind == "output":
                received += len(event.output.data)
            elif kind == "exited":
                exited = event.exited
        seconds = time.perf_counter() - start
    if exited is None:
        raise BenchError("the stream ended without an Exited event")
    check_exited(exited, f"Spawn head -c {nbytes}")
    if received != nbytes:
        raise BenchError(f"the daemon streamed {received} of {nbytes} bytes ({exited.stdout})")
    return {
        "seconds": seconds,
        "daemon_cpu_s": procfs.cpu_seconds(daemon.pid) - cpu[daemon.pid],
        "spawner_cpu_s": (procfs.cpu_seconds(spawner) - cpu[spawner]) if spawner else 0.0,
        "rss_before_mb": before / MiB,
        "rss_peak_mb": sampler.peak[daemon.pid] / MiB,
    }


async def measure(base: Baselines, daemon: BenchDaemon, quick: bool) -> Row:
    nbytes = STREAM_OUTPUT_BYTES // 2
    repeats = 1 if quick else 5
    client = TenantClient(daemon.socket("stream"))
    runs: list[dict[str, float]] = []
    floors: list[tuple[float, float]] = []
    relays: list[tuple[float, float]] = []
    pipes: list[float] = []
    try:
        await daemon_stream(client, daemon, 16 * MiB)  # warm-up
        await base.grpc_stream(16 * MiB)
        await base.relay_stream(16 * MiB)
        for _ in range(repeats):
            floor = await base.grpc_stream(nbytes)
            floors.append((floor.seconds, floor.server_cpu_seconds))
            runs.append(await daemon_stream(client, daemon, nbytes))
            relayed = await base.relay_stream(nbytes)
            relays.append((relayed.seconds, relayed.server_cpu_seconds))
            pipes.append(base.pipe(nbytes))
    finally:
        await client.close()
    gib = nbytes / GiB
    d_s = statistics.median(r["seconds"] for r in runs)
    f_s = statistics.median(s for s, _ in floors)
    p_s = statistics.median(pipes)
    r_s = statistics.median(s for s, _ in relays)
    r_mbps = nbytes / MiB / r_s
    d_mbps, f_mbps, p_mbps = nbytes / MiB / d_s, nbytes / MiB / f_s, nbytes / MiB / p_s
    d_cpu = statistics.median(r["daemon_cpu_s"] for r in runs) / gib
    f_cpu = statistics.median(c for _, c in floors) / gib
    growth = max(r["rss_peak_mb"] - r["rss_before_mb"] for r in runs)
    row = Row("3 stream")
    row.figures.update(
        {
            "bytes": nbytes,
            "daemon_mb_s": d_mbps,
            "grpc_floor_mb_s": f_mbps,
            "pipe_mb_s": p_mbps,
            "relay_floor_mb_s": r_mbps,
            "relay_floor_cpu_s_per_gib": statistics.median(c for _, c in relays) / gib,
            "daemon_cpu_s_per_gib": d_cpu,
            "grpc_floor_cpu_s_per_gib": f_cpu,
            "spawner_cpu_s_per_gib": statistics.median(r["spawner_cpu_s"] for r in runs) / gib,
            "rss_before_mb": runs[-1]["rss_before_mb"],
            "rss_peak_mb": max(r["rss_peak_mb"] for r in runs),
            "rss_growth_mb": growth,
        }
    )
    row.lines.append(
        Line(
            "3",
            "stdout stream MB/s / bare grpc.aio stream",
            d_mbps / f_mbps,
            f"{d_mbps:.0f} MB/s",
            f"grpc {f_mbps:.0f} MB/s",
            "stream_over_grpc_floor",
            Target(">=", 0.9),
        )
    )
    row.lines.append(
        Line(
            "3",
            "floor: a stream through the relay fed by a hop process (1 MiB messages)"
            " / bare grpc.aio stream",
            r_mbps / f_mbps,
            f"{r_mbps:.0f} MB/s",
            f"grpc {f_mbps:.0f} MB/s",
            "stream_over_grpc_floor_floor",
            Target(">=", 0.9),
            floor_of="stream_over_grpc_floor",
        )
    )
    row.lines.append(
        Line(
            "3",
            "stdout stream / its floor",
            d_mbps / r_mbps,
            f"{d_mbps:.0f} MB/s",
            f"floor {r_mbps:.0f} MB/s",
            "stream_over_its_floor",
        )
    )
    row.lines.append(
        Line(
            "3",
            "stdout stream MB/s / shell pipe",
            d_mbps / p_mbps,
            f"{d_mbps:.0f} MB/s",
            f"pipe {p_mbps:.0f} MB/s",
            "stream_over_pipe",
        )
    )
    row.lines.append(
        Line(
            "3",
            "daemon CPU s per GiB / bare grpc.aio server's",
            d_cpu / f_cpu,
            f"{d_cpu:.2f} s/GiB",
            f"grpc {f_cpu:.2f} s/GiB",
            "stream_cpu_over_grpc_floor",
        )
    )
    row.lines.append(
        Line(
            "6",
            "daemon RSS growth during the stream",
            growth,
            f"peak {max(r['rss_peak_mb'] for r in runs):.0f} MiB",
            f"before {runs[-1]['rss_before_mb']:.0f} MiB",
            "stream_rss_growth_mb",
            Target("<", 32),
            unit="MiB",
        )
    )
    return row
