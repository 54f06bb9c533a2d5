"""The baselines every row is divided by, each measured in the same run.

    base = await Baselines.start(workdir, quick)
    base.floor_true()          # C posix_spawn + waitpid of /bin/true
    base.bwrap()               # bwrap --ro-bind / / --unshare-all --die-with-parent /bin/true,
                               # until its whole tree is reaped (C, subreaper)
    base.bwrap_flood(8, 1.0)   # bwrap 8-way concurrently: runs per second
    base.subprocess_run()      # Python subprocess.run(["/bin/true"])
    await base.echo_rtt()      # a plain asyncio Unix-socket echo
    await base.grpc_rtt()      # a bare grpc.aio unary call
    await base.grpc_stream(n)  # a bare grpc.aio stream of 64 KiB messages
    base.pipe(n)               # head -c n /dev/zero | cat
    base.kill_tree(tree, 50)   # a direct killpg + reap of a 50-process tree
    base.grpc_idle_rss         # a bare grpc.aio server's RSS, idle after start
    await base.relay_rtt()     # grpc.aio through the front-end's relay (the caller's creds)
    await base.relay_hop_rtt() # the same, on to a hop process and back (the root side)
    await base.relay_read_4k() # the same, the hop process reading a 4 KiB file (a worker)
    await base.relay_stream(n) # a stream through the relay, fed by the hop process

Each returns seconds (or runs per second); the rows interleave the calls with
their own so both see the same machine.
"""

from __future__ import annotations

import asyncio
import os
import select
import signal
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import grpc

from bench import floor_servers, procfs
from bench.daemon import REPO
from bench.native import BenchError, Floor, bwrap_argv, compile_c


def wait_connectable(path: Path, proc: subprocess.Popen[bytes], timeout: float = 20.0) -> None:
    import socket

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise BenchError(f"{proc.args!r} exited with {proc.returncode}")
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            s.connect(str(path))
            return
        except OSError:
            time.sleep(0.02)
        finally:
            s.close()
    raise BenchError(f"{proc.args!r} did not listen on {path} within {timeout} s")


def start_server(kind: str, path: Path) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "bench.floor_servers", kind, str(path)],
        cwd=REPO,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO)},
    )
    wait_connectable(path, proc)
    return proc


def stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.terminate()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


@dataclass
class StreamRun:
    seconds: float
    nbytes: int
    server_cpu_seconds: float


class Baselines:
    def __init__(self, workdir: Path, floor: Floor, tree: Path) -> None:
        self.workdir = workdir
        self.floor = floor
        self.tree_exe = tree
        self.grpc_proc: subprocess.Popen[bytes] | None = None
        self.echo_proc: subprocess.Popen[bytes] | None = None
        self.relay_proc: subprocess.Popen[bytes] | None = None
        self._relay: grpc.aio.Channel | None = None
        #: A 4 KiB file the relay's hop process reads (relay_read_4k).
        self.read_path = workdir / "floor-4k.bin"
        self.grpc_idle_rss = 0
        self._channel: grpc.aio.Channel | None = None
        self._echo: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None

    @classmethod
    async def start(cls, workdir: Path, bin_dir: Path, settle: float) -> Baselines:
        """Compile the C helpers into `bin_dir` and start the floor servers."""
        floor = Floor(compile_c("floor.c", workdir), bwrap_argv())
        base = cls(workdir, floor, compile_c("tree.c", bin_dir))
        grpc_sock = workdir / "grpc-floor.sock"
        base.grpc_proc = start_server("grpc", grpc_sock)
        await asyncio.sleep(settle)  # let start-up allocations settle, as for the daemon
        base.grpc_idle_rss = procfs.rss_bytes(base.grpc_proc.pid)
        base._channel = grpc.aio.insecure_channel(
            f"unix:{grpc_sock}", options=floor_servers.OPTIONS
        )
        echo_sock = workdir / "echo.sock"
        base.echo_proc = start_server("echo", echo_sock)
        base._echo = await asyncio.open_unix_connection(str(echo_sock))
        base.read_path.write_bytes(os.urandom(4096))
        relay_sock = workdir / "relay-floor.sock"
        base.relay_proc = start_server("relay", relay_sock)
        base._relay = grpc.aio.insecure_channel(f"unix:{relay_sock}", options=floor_servers.OPTIONS)
        return base

    async def close(self) -> None:
        for channel in (self._channel, self._relay):
            if channel is not None:
                await channel.close(None)
        if self._echo is not None:
            self._echo[1].close()
        for proc in (self.grpc_proc, self.echo_proc, self.relay_proc):
            if proc is not None:
                stop(proc)
        self.floor.close()

    # --- spawning ---------------------------------------------------------

    def floor_true(self) -> float:
        return self.floor.spawn_true(1)[0]

    def bwrap(self) -> float:
        return self.floor.tree(1)[0]

    def bwrap_flood(self, concurrency: int, seconds: float) -> float:
        done, elapsed = self.floor.flood(concurrency, seconds)
        return done / elapsed

    def subprocess_run(self) -> float:
        start = time.perf_counter()
        subprocess.run(["/bin/true"], check=True)
        return time.perf_counter() - start

    # --- RPC and streams --------------------------------------------------

    async def echo_rtt(self) -> float:
        assert self._echo is not None
        reader, writer = self._echo
        start = time.perf_counter()
        writer.write(b"x" * 63 + b"\n")
        await writer.drain()
        await reader.readline()
        return time.perf_counter() - start

    async def grpc_rtt(self) -> float:
        assert self._channel is not None
        call = self._channel.unary_unary(floor_servers.ECHO, None, None)
        start = time.perf_counter()
        await call(b"x" * 64)
        return time.perf_counter() - start

    async def grpc_stream(self, nbytes: int) -> StreamRun:
        assert self._channel is not None and self.grpc_proc is not None
        return await _stream(self._channel, [self.grpc_proc.pid], nbytes, "grpc floor")

    # --- the relay: the front-end's least (floor_servers.py `relay`) --------

    def relay_pids(self) -> list[int]:
        """The relay server's process and its hop process."""
        assert self.relay_proc is not None
        return [self.relay_proc.pid, *procfs.children_of(self.relay_proc.pid)]

    async def _relay_unary(self, method: str, request: bytes) -> float:
        assert self._relay is not None
        call = self._relay.unary_unary(method, None, None)
        start = time.perf_counter()
        await call(request)
        return time.perf_counter() - start

    async def relay_rtt(self) -> float:
        return await self._relay_unary(floor_servers.ECHO, b"x" * 64)

    async def relay_hop_rtt(self) -> float:
        return await self._relay_unary(floor_servers.HOP, b"x" * 64)

    async def relay_read_4k(self) -> float:
        return await self._relay_unary(floor_servers.READ, bytes(self.read_path))

    async def relay_stream(self, nbytes: int) -> StreamRun:
        assert self._relay is not None
        return await _stream(self._relay, self.relay_pids(), nbytes, "the relay floor")

    def pipe(self, nbytes: int) -> float:
        start = time.perf_counter()
        subprocess.run(["sh", "-c", f"head -c {nbytes} /dev/zero | cat >/dev/null"], check=True)
        return time.perf_counter() - start

    # --- killing a tree ---------------------------------------------------

    def kill_tree(self, size: int) -> float:
        """Start the tree directly, then time killpg(SIGKILL) until all of it is
        reaped (the bench is a subreaper: the orphans come back to it)."""
        marker = f"bench-tree-{uuid.uuid4().hex[:12]}"
        proc = subprocess.Popen(
            [str(self.tree_exe), str(size), marker], stdout=subprocess.PIPE, start_new_session=True
        )
        assert proc.stdout is not None
        lines = [proc.stdout.readline(), proc.stdout.readline()]
        if lines[-1] != b"ready\n":
            proc.kill()
            proc.wait()
            raise BenchError(f"the tree did not start: {lines!r}")
        pids = tree_pids(marker, size)
        start = time.perf_counter()
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        for pid in pids:
            if pid != proc.pid:
                os.waitpid(pid, 0)
        seconds = time.perf_counter() - start
        proc.stdout.close()
        return seconds


def tree_pids(marker: str, size: int, timeout: float = 5.0) -> list[int]:
    """The host pids of a tree started with `marker`, once all `size` exist."""
    deadline = time.monotonic() + timeout
    while True:
        pids = procfs.pids_with(marker.encode())
        if len(pids) >= size:
            return pids
        if time.monotonic() > deadline:
            raise BenchError(f"found {len(pids)} of the tree's {size} processes")
        time.sleep(0.005)


def wait_all_gone(pidfds: list[int], timeout: float) -> int:
    """CLOCK_MONOTONIC ns when the last of `pidfds` became readable (its
    process exited); closes them."""
    poller = select.poll()
    for fd in pidfds:
        poller.register(fd, select.POLLIN)
    left = set(pidfds)
    deadline = time.monotonic() + timeout
    end = time.monotonic_ns()
    try:
        while left:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise BenchError(f"{len(left)} processes of the tree outlived the timeout")
            for fd, _ in poller.poll(remaining * 1000):
                poller.unregister(fd)
                left.discard(fd)
            end = time.monotonic_ns()
    finally:
        for fd in pidfds:
            os.close(fd)
    return end


async def _stream(channel: grpc.aio.Channel, pids: list[int], nbytes: int, who: str) -> StreamRun:
    """`nbytes` streamed by a floor server's STREAM method on `channel`,
    with the CPU of `pids` (the server's processes) meanwhile."""
    call = channel.unary_stream(floor_servers.STREAM, None, None)
    cpu = procfs.cpu_seconds_of(pids)
    received = 0
    start = time.perf_counter()
    async for message in call(str(nbytes).encode()):
        received += len(message)
    seconds = time.perf_counter() - start
    if received != nbytes:
        raise BenchError(f"{who} streamed {received} bytes, not {nbytes}")
    return StreamRun(seconds, nbytes, procfs.cpu_seconds_of(pids) - cpu)
