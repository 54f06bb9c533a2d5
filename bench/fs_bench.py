"""FsService ReadFile / WriteFile through the daemon, against local file I/O.

    python bench/fs_bench.py --socket .hostcap/run/dev.sock [--quick]
    results = await run(socket_path, quick=True)     # from the bench harness

For 4 KiB and 1 MiB, each iteration times one daemon call and one local call
on a file in the same directory (the tenant's primary root), alternating
which goes first, so both see the same disk, cache and machine load. The
result is the median of each and their ratio (daemon / local). Local
baselines: `open().read()` and `open().write()` as the issue asks; a write
through the daemon is also atomic and durable (temp file, fsync, rename,
directory fsync, audit fsync), so `write_*.ratio_vs_atomic` compares it with
the same steps done locally as well.

Keys of the returned dict: `fs.{read,write}_{4k,1m}.{daemon_us,local_us,ratio}`
and `fs.write_{4k,1m}.{atomic_us,ratio_vs_atomic}`. Given `grpc_rtt` (a bare
grpc.aio unary round trip, from the harness's floor server), reads are also
timed in turns with it: `fs.read_{4k,1m}.{grpc_rtt_us,ratio_vs_grpc_rtt}`,
what a ReadFile costs over the transport it cannot avoid. Given `read_floor`
too (the design's least for a 4 KiB ReadFile: bench/README.md, "The floors
of the design"), the 4 KiB reads are timed in turns with it as well:
`fs.read_4k.floor_us`.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import sys
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import grpc
from hostcap_proto.v1 import fs_pb2, fs_pb2_grpc

SIZES = {"4k": 4 << 10, "1m": 1 << 20}
OPTIONS = [
    ("grpc.max_receive_message_length", 64 << 20),
    ("grpc.max_send_message_length", 64 << 20),
]


def _iterations(size: int, quick: bool) -> int:
    if size <= 64 << 10:
        return 40 if quick else 400
    return 10 if quick else 100


async def _timed(operation: Callable[[], Awaitable[Any]]) -> float:
    start = time.perf_counter_ns()
    await operation()
    return (time.perf_counter_ns() - start) / 1000


def _local_read(path: Path) -> Callable[[], Awaitable[None]]:
    async def read() -> None:
        with path.open("rb") as file:
            file.read()

    return read


def _local_write(path: Path, data: bytes) -> Callable[[], Awaitable[None]]:
    async def write() -> None:
        with path.open("wb") as file:
            file.write(data)

    return write


def _local_atomic_write(path: Path, data: bytes) -> Callable[[], Awaitable[None]]:
    async def write() -> None:
        tmp = path.with_name(f".{path.name}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            os.write(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.rename(tmp, path)
        dir_fd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)

    return write


async def _interleaved(
    iterations: int, daemon: Callable[[], Awaitable[Any]], *others: Callable[[], Awaitable[Any]]
) -> list[float]:
    """Median microseconds of `daemon` and of each of `others` (local file
    I/O, a bare grpc.aio round trip), measured in turns."""
    samples: list[list[float]] = [[] for _ in range(1 + len(others))]
    contenders = [daemon, *others]
    for _ in range(3):  # warm-up: connections, page cache, the worker's imports
        for contender in contenders:
            await contender()
    for index in range(iterations):
        order = list(range(len(contenders)))
        if index % 2:
            order.reverse()
        for which in order:
            samples[which].append(await _timed(contenders[which]))
    return [statistics.median(s) for s in samples]


async def run(
    socket_path: str | os.PathLike[str],
    quick: bool,
    grpc_rtt: Callable[[], Awaitable[Any]] | None = None,
    read_floor: Callable[[], Awaitable[Any]] | None = None,
) -> dict[str, float]:
    """Measure and return the results (see the module docstring for the keys)."""
    results: dict[str, float] = {}
    async with grpc.aio.insecure_channel(
        f"unix:{os.fspath(socket_path)}", options=OPTIONS
    ) as channel:
        stub = fs_pb2_grpc.FsServiceStub(channel)  # type: ignore[no-untyped-call]
        bench_dir = f"hostcap-fs-bench-{uuid.uuid4().hex[:8]}"
        probe = await stub.WriteFile(
            fs_pb2.WriteFileRequest(path=f"{bench_dir}/probe", data=b"", create_parents=True)
        )
        local_dir = Path(probe.path).parent
        try:
            for label, size in SIZES.items():
                data = os.urandom(size)
                remote = f"{bench_dir}/remote-{label}"
                local = local_dir / f"local-{label}"
                n = _iterations(size, quick)

                async def write_remote(path: str = remote, content: bytes = data) -> None:
                    await stub.WriteFile(fs_pb2.WriteFileRequest(path=path, data=content))

                async def read_remote(path: str = remote) -> None:
                    await stub.ReadFile(fs_pb2.ReadFileRequest(path=path))

                daemon_us, local_us, atomic_us = await _interleaved(
                    n, write_remote, _local_write(local, data), _local_atomic_write(local, data)
                )
                results[f"fs.write_{label}.daemon_us"] = daemon_us
                results[f"fs.write_{label}.local_us"] = local_us
                results[f"fs.write_{label}.ratio"] = daemon_us / local_us
                results[f"fs.write_{label}.atomic_us"] = atomic_us
                results[f"fs.write_{label}.ratio_vs_atomic"] = daemon_us / atomic_us

                if grpc_rtt is None:
                    daemon_us, local_us = await _interleaved(n, read_remote, _local_read(local))
                elif read_floor is None or label != "4k":
                    daemon_us, local_us, rtt_us = await _interleaved(
                        n, read_remote, _local_read(local), grpc_rtt
                    )
                else:  # the floor of a 4 KiB ReadFile, in the same turns
                    daemon_us, local_us, rtt_us, floor_us = await _interleaved(
                        n, read_remote, _local_read(local), grpc_rtt, read_floor
                    )
                    results[f"fs.read_{label}.floor_us"] = floor_us
                    results[f"fs.read_{label}.grpc_rtt_us"] = rtt_us
                    results[f"fs.read_{label}.ratio_vs_grpc_rtt"] = daemon_us / rtt_us
                results[f"fs.read_{label}.daemon_us"] = daemon_us
                results[f"fs.read_{label}.local_us"] = local_us
                results[f"fs.read_{label}.ratio"] = daemon_us / local_us
        finally:
            shutil.rmtree(local_dir, ignore_errors=True)
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--socket", required=True, help="a tenant socket of a running hostcapd")
    parser.add_argument("--quick", action="store_true", help="fewer iterations")
    args = parser.parse_args(argv)
    results = asyncio.run(run(args.socket, args.quick))
    print(f"{'operation':<12} {'daemon µs':>12} {'local µs':>12} {'ratio':>8}")
    for op in ("read", "write"):
        for label in SIZES:
            key = f"fs.{op}_{label}"
            print(
                f"{op + ' ' + label:<12} {results[key + '.daemon_us']:>12.1f} "
                f"{results[key + '.local_us']:>12.1f} {results[key + '.ratio']:>8.1f}"
            )
    for label in SIZES:
        key = f"fs.write_{label}"
        print(
            f"write {label} vs a local atomic write (fsync, rename, dir fsync): {results[key + '.ratio_vs_atomic']:.2f}x"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
