"""The figures of issue 31 (interactive spawns), against one daemon of its own.

    python -m bench.tty_bench [--quick]      # also row 8 of `make bench`

- A keystroke's echo round trip: one byte written (WriteStdin) to a tty
  spawn, until its echo comes back as an Output event of the streamed
  Spawn; against the same through a pseudo-terminal pair in this process
  (write a byte to the master, read its echo from it: the kernel's line
  discipline, nothing else), interleaved. Both echo in the line discipline:
  the ratio is what the daemon's path adds to a keystroke.
- A tty stream against a pipe: a streamed Spawn of `head -c N /dev/zero`
  on a terminal and without one, the same tenant, interleaved (NUL bytes
  pass a terminal unchanged, so both carry N bytes); and against the same
  `head` onto a pty pair of the bench process: a terminal moves at most
  4 KiB a read through its line discipline, which no daemon can change.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from hostcap_proto.v1 import common_pb2, process_pb2

from bench.client import TenantClient, check_exited
from bench.daemon import BenchDaemon, state_parent
from bench.native import BenchError
from bench.report import Line, Row
from bench.stats import Summary, rotation

TENANT = "stream"
MiB = 1024 * 1024


async def _pty_echo(master: int) -> float:
    """One byte to a pty pair's master, until its echo is read back."""
    loop = asyncio.get_running_loop()
    echoed: asyncio.Future[None] = loop.create_future()
    loop.add_reader(master, lambda: echoed.done() or echoed.set_result(None))
    try:
        start = time.perf_counter()
        os.write(master, b"x")
        await echoed
        got = os.read(master, 64)
        seconds = time.perf_counter() - start
    finally:
        loop.remove_reader(master)
    if b"x" not in got:
        raise BenchError(f"the pty pair echoed {got!r}")
    return seconds


class _TtySession:
    """A streamed Spawn of `cat` on a terminal: keystrokes in, echoes out."""

    def __init__(self, client: TenantClient) -> None:
        self.client = client
        request = process_pb2.SpawnRequest(
            argv=["cat"], tty=process_pb2.TerminalSize(rows=24, cols=80)
        )
        self.call = client.process.Spawn(request)
        self.events = self.call.__aiter__()
        self.spawn_id = ""

    async def start(self) -> None:
        first = await self.events.__anext__()
        if not first.HasField("started"):
            raise BenchError(f"the tty spawn did not start: {first}")
        self.spawn_id = first.started.spawn_id

    async def echo(self) -> float:
        start = time.perf_counter()
        await self.client.process.WriteStdin(
            process_pb2.WriteStdinRequest(spawn_id=self.spawn_id, data=b"x")
        )
        got = b""
        while b"x" not in got:
            event = await self.events.__anext__()
            if not event.HasField("output"):
                raise BenchError(f"the tty spawn ended: {event}")
            got += event.output.data
        return time.perf_counter() - start

    async def close(self) -> None:
        self.call.cancel()


async def _stream(client: TenantClient, nbytes: int, tty: bool) -> float:
    request = process_pb2.SpawnRequest(
        argv=["head", "-c", str(nbytes), "/dev/zero"],
        limits=common_pb2.Limits(output_bytes=2 * nbytes),
    )
    if tty:
        request.tty.CopyFrom(process_pb2.TerminalSize(rows=24, cols=80))
    received, exited = 0, None
    start = time.perf_counter()
    async for event in client.process.Spawn(request):
        if event.HasField("output"):
            received += len(event.output.data)
        elif event.HasField("exited"):
            exited = event.exited
    seconds = time.perf_counter() - start
    if exited is None:
        raise BenchError("the stream ended without an Exited event")
    check_exited(exited, f"Spawn head -c {nbytes} (tty={tty})")
    if received != nbytes:
        raise BenchError(f"received {received} of {nbytes} bytes (tty={tty})")
    return seconds


def _pty_stream(nbytes: int) -> float:
    """`head -c N /dev/zero` onto a pty pair of this process, read from its
    master: what the kernel's terminal alone costs a stream."""
    master, slave = os.openpty()
    received = 0
    start = time.perf_counter()
    head = subprocess.Popen(["head", "-c", str(nbytes), "/dev/zero"], stdout=slave)
    os.close(slave)
    try:
        while True:
            try:
                data = os.read(master, MiB)
            except OSError:  # EIO: its other side is closed
                break
            if not data:
                break
            received += len(data)
    finally:
        os.close(master)
        head.wait()
    if received != nbytes:
        raise BenchError(f"the pty pair carried {received} of {nbytes} bytes")
    return time.perf_counter() - start


async def measure(quick: bool) -> dict[str, Any]:
    rounds, streams, nbytes = (200, 3, 32 * MiB) if quick else (1000, 5, 128 * MiB)
    state = Path(tempfile.mkdtemp(prefix="tty-", dir=state_parent()))
    daemon = BenchDaemon(state / "d", (TENANT,))
    daemon.start()
    client = TenantClient(daemon.socket(TENANT))
    master, slave = os.openpty()
    os.set_blocking(master, False)
    session = _TtySession(client)
    try:
        await session.start()
        for _ in range(20):  # warm-up of both paths
            await session.echo()
            await _pty_echo(master)
        echoes: dict[str, list[float]] = {"daemon": [], "pty": []}
        for index in range(rounds):
            for name in rotation(list(echoes), index):
                sample = await (session.echo() if name == "daemon" else _pty_echo(master))
                echoes[name].append(sample)
        await session.close()
        streamed: dict[str, list[float]] = {"tty": [], "pipe": [], "pty": []}
        for index in range(streams):
            for name in rotation(list(streamed), index):
                if name == "pty":
                    streamed[name].append(await asyncio.to_thread(_pty_stream, nbytes))
                else:
                    streamed[name].append(await _stream(client, nbytes, name == "tty"))
    finally:
        os.close(slave)
        os.close(master)
        await client.close()
        daemon.stop()
        shutil.rmtree(state, ignore_errors=True)
    daemon_echo, pty_echo = Summary.of(echoes["daemon"]), Summary.of(echoes["pty"])
    tty_s, pipe_s, pty_s = (sorted(streamed[n])[streams // 2] for n in ("tty", "pipe", "pty"))
    return {
        "tty.echo.daemon_p50_us": daemon_echo.p50_us,
        "tty.echo.daemon_p95_us": daemon_echo.p95_us,
        "tty.echo.pty_p50_us": pty_echo.p50_us,
        "tty.echo.ratio": daemon_echo.p50_us / pty_echo.p50_us,
        "tty.stream.bytes": nbytes,
        "tty.stream.tty_mib_s": nbytes / MiB / tty_s,
        "tty.stream.pipe_mib_s": nbytes / MiB / pipe_s,
        "tty.stream.pty_mib_s": nbytes / MiB / pty_s,
        "tty.stream.ratio": pipe_s / tty_s,
        "tty.stream.pty_ratio": pty_s / tty_s,
    }


def row(results: dict[str, Any]) -> Row:
    """Row 8 of `make bench`: a tty spawn's keystroke echo and stream."""
    mib = results["tty.stream.bytes"] // MiB
    return Row(
        "8 terminal",
        [
            Line(
                "8", "keystroke echo round trip through a tty spawn (p50)",
                results["tty.echo.ratio"],
                f"{results['tty.echo.daemon_p50_us']:.0f} us",
                f"{results['tty.echo.pty_p50_us']:.0f} us pty pair",
                key="tty_echo_ratio",
            ),
            Line(
                "8", f"{mib} MiB stream on a tty, throughput over a pipe spawn's",
                results["tty.stream.ratio"],
                f"{results['tty.stream.tty_mib_s']:.0f} MiB/s",
                f"{results['tty.stream.pipe_mib_s']:.0f} MiB/s pipe",
                key="tty_stream_ratio",
            ),
            Line(
                "8", f"{mib} MiB stream on a tty, throughput over a pty pair's in the bench",
                results["tty.stream.pty_ratio"],
                f"{results['tty.stream.tty_mib_s']:.0f} MiB/s",
                f"{results['tty.stream.pty_mib_s']:.0f} MiB/s pty pair",
                key="tty_stream_pty_ratio",
            ),
        ],
        {k: float(v) for k, v in results.items()},
    )  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.tty_bench")
    parser.add_argument("--quick", action="store_true")
    if os.geteuid() != 0:
        print("bench: the daemon's full profile needs root", file=sys.stderr)
        return 2
    results = asyncio.run(measure(parser.parse_args().quick))
    print(json.dumps(results, indent=2))
    print(
        f"keystroke echo: tty spawn {results['tty.echo.daemon_p50_us']:.0f} us p50, pty pair "
        f"{results['tty.echo.pty_p50_us']:.0f} us: {results['tty.echo.ratio']:.1f}x; "
        f"{results['tty.stream.bytes'] // MiB} MiB stream: tty "
        f"{results['tty.stream.tty_mib_s']:.0f} MiB/s, pipe "
        f"{results['tty.stream.pipe_mib_s']:.0f} MiB/s: {results['tty.stream.ratio']:.2f}x; "
        f"pty pair in the bench {results['tty.stream.pty_mib_s']:.0f} MiB/s: "
        f"{results['tty.stream.pty_ratio']:.2f}x"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
