"""Where a tenant front-end's CPU per call goes (issue 35 item 4), three
in-process A/Bs (not part of `make bench`):

    python -m bench.frontend_calls relay [--rounds N]
    python -m bench.frontend_calls grpc [--rounds N] [--variants JSON]
    python -m bench.frontend_calls calls [--rounds N]
    python -m bench.frontend_calls pinned [--rounds N] [--stream-mib N]

- `relay`: the who-asked relay's two ways of moving one message, each
  message written by a client, moved by the relay, read by a server, over
  socket pairs with the relay's 1 MiB buffers: splice(2) through a pipe
  (`frontend/peers.py`, two splices) against recv_into + send (one copy
  in, one out) and recv + send, by message size; the relay's thread CPU
  per message (`time.thread_time_ns` around the move only), medians of
  rounds in alternating order, over splice's.
- `grpc`: a bare grpc.aio health server (the front-end's server options,
  uvloop) in a process per variant, the client here, Check calls
  interleaved across the variants in rotating order; the server's CPU per
  call (schedstat of all its threads) and p50, over the first variant's.
  The default variants: the environment's fork support and poll strategy,
  the server's BDP probe, its health service registered or generic only,
  a second default (the A/A: the noise), a call spaced 8 ms after the
  previous (what a call costs when the server was idle, as a Run's answer
  finds the front-end), and the server's threads kept on one core
  (`daemon.frontend_cpu = "core"`, `hostcapd.frontend.affinity`).
- `calls`: one bench daemon (`full`); its tenant front-end's CPU per call
  (schedstat) and voluntary context switches per call, for Health.Check
  (answered in the front-end), List and Capabilities (relayed to the root,
  answered at once), Run /bin/true and a 4 KiB ReadFile, interleaved; and
  List again after 8 ms of quiet and after 8 ms of the client's own busy
  loop (the front-end's CPU counted around the call only).
- `pinned`: one bench daemon (`full` and `stream`, `frontend_cpu = "any"`)
  whose tenant front-ends the bench keeps on the CPU each runs on, or lets
  go, in alternation (sched_setaffinity of each of their threads: what
  `frontend_cpu = "core"` does from the start, on a machine without SMT):
  the front-end's CPU per call for Health.Check, List and Run /bin/true,
  row 2's 8 clients (spawns per second, the front-end's and the daemon's
  CPU per spawn, medians of windows), and streamed Spawns' median rate and
  the front-end's CPU per GiB, kept over let go.
"""

from __future__ import annotations

import argparse
import asyncio
import fcntl
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

RELAY_BUFFER = 1024 * 1024
SIZES = (100, 400, 4096, 16384, 65536)
#: The `grpc` part's default variants: name -> {"env", "opts", "spaced" (s)}.
VARIANTS: dict[str, dict[str, Any]] = {
    "default": {},
    "default (A/A)": {},
    "GRPC_ENABLE_FORK_SUPPORT=0": {"env": {"GRPC_ENABLE_FORK_SUPPORT": "0"}},
    "GRPC_ENABLE_FORK_SUPPORT=1": {"env": {"GRPC_ENABLE_FORK_SUPPORT": "1"}},
    "GRPC_POLL_STRATEGY=poll": {"env": {"GRPC_POLL_STRATEGY": "poll"}},
    "grpc.http2.bdp_probe=0": {"opts": [["grpc.http2.bdp_probe", 0]]},
    "health generic only": {"env": {"BENCH_HEALTH_GENERIC": "1"}},
    "spaced 8 ms": {"spaced": 0.008},
    "kept on one core": {"env": {"BENCH_FRONTEND_CPU": "core"}},
}


# --- relay -------------------------------------------------------------------


def _pair() -> tuple[socket.socket, socket.socket]:
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    for s in (a, b):
        s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, RELAY_BUFFER)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, RELAY_BUFFER)
        s.setblocking(False)
    return a, b


def relay(rounds: int) -> None:
    client, relay_in = _pair()
    relay_out, server = _pair()
    r, w = os.pipe2(os.O_NONBLOCK)
    fcntl.fcntl(w, getattr(fcntl, "F_SETPIPE_SZ", 1031), 64 * 1024)
    flags = os.SPLICE_F_MOVE | os.SPLICE_F_NONBLOCK
    buf = bytearray(256 * 1024)
    view = memoryview(buf)
    sink = bytearray(2 * RELAY_BUFFER)

    def by_splice() -> None:
        n = os.splice(relay_in.fileno(), w, RELAY_BUFFER, flags=flags)
        while n:
            n -= os.splice(r, relay_out.fileno(), n, flags=flags)

    def by_recv_into() -> None:
        n = relay_in.recv_into(buf)
        relay_out.send(view[:n])

    def by_recv() -> None:
        relay_out.send(relay_in.recv(64 * 1024))

    ways: dict[str, Callable[[], None]] = {
        "splice": by_splice,
        "recv_into+send": by_recv_into,
        "recv+send": by_recv,
    }
    print(f"load {os.getloadavg()[0]:.2f}; the relay's CPU per message, median of 7 x {rounds}")
    for size in SIZES:
        message = b"x" * size
        per: dict[str, list[float]] = {k: [] for k in ways}
        for rep in range(7):
            order = list(ways) if rep % 2 == 0 else list(ways)[::-1]
            for name in order:
                move, spent = ways[name], 0
                for _ in range(rounds):
                    client.send(message)
                    t0 = time.thread_time_ns()
                    move()
                    spent += time.thread_time_ns() - t0
                    got = 0
                    while got < size:
                        got += server.recv_into(sink)
                per[name].append(spent / rounds)
        med = {k: statistics.median(v) for k, v in per.items()}
        print(
            f"{size:>7} B: "
            + "  ".join(f"{k} {v / 1000:.2f} us ({v / med['splice']:.2f}x)" for k, v in med.items())
        )


# --- grpc --------------------------------------------------------------------


def serve(path: str, opts: str) -> None:
    """A bare grpc.aio health server (the `grpc` part's server process)."""
    import grpc
    import uvloop
    from grpc_health.v1 import health, health_pb2, health_pb2_grpc
    from hostcapd.frontend.options import server_options

    if os.environ.get("BENCH_FRONTEND_CPU"):
        from hostcapd.frontend import affinity

        affinity.place(os.environ["BENCH_FRONTEND_CPU"])  # before grpc's threads

    async def main() -> None:
        extra = [tuple(x) for x in json.loads(opts)]
        server: Any = grpc.aio.server(options=server_options(80 << 20, 80 << 20) + extra)
        servicer = health.aio.HealthServicer()  # type: ignore[attr-defined]
        if os.environ.get("BENCH_HEALTH_GENERIC"):
            # Only the generic handler (as the front-end's own services).
            registered = server.add_registered_method_handlers
            server.add_registered_method_handlers = lambda *a: None
            health_pb2_grpc.add_HealthServicer_to_server(servicer, server)
            server.add_registered_method_handlers = registered
        else:
            health_pb2_grpc.add_HealthServicer_to_server(servicer, server)
        server.add_insecure_port("unix:" + path)
        await server.start()
        await servicer.set("", health_pb2.HealthCheckResponse.SERVING)
        print("ready", flush=True)
        await server.wait_for_termination()

    uvloop.run(main())


def cpu_of(pid: int) -> float:
    """CPU seconds of all of `pid`'s threads (schedstat, nanoseconds)."""
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            total += int((task / "schedstat").read_text().split()[0])
        except (FileNotFoundError, ProcessLookupError):
            continue
    return total / 1e9


def switches_of(pid: int) -> int:
    """Voluntary context switches of all of `pid`'s threads."""
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            for line in (task / "status").read_text().splitlines():
                if line.startswith("voluntary_ctxt_switches"):
                    total += int(line.split()[1])
        except (FileNotFoundError, ProcessLookupError):
            continue
    return total


async def bare_grpc(rounds: int, variants: dict[str, dict[str, Any]]) -> None:
    import grpc
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    tmp = Path(tempfile.mkdtemp(prefix="frontend-calls-"))
    procs: dict[str, subprocess.Popen[bytes]] = {}
    channels: dict[str, Any] = {}
    try:
        stubs = {}
        for i, (name, v) in enumerate(variants.items()):
            env = dict(os.environ, **v.get("env", {}))
            argv = [sys.executable, "-m", "bench.frontend_calls", "--serve", str(tmp / f"s{i}")]
            argv += ["--opts", json.dumps(v.get("opts", []))]
            proc = procs[name] = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE)
            assert proc.stdout is not None
            proc.stdout.readline()
            channels[name] = grpc.aio.insecure_channel(f"unix:{tmp / f's{i}'}")
            stubs[name] = health_pb2_grpc.HealthStub(channels[name])
            for _ in range(50):
                await stubs[name].Check(health_pb2.HealthCheckRequest())
        names = list(variants)
        lat: dict[str, list[float]] = {n: [] for n in names}
        cpu = {n: 0.0 for n in names}
        request = health_pb2.HealthCheckRequest()
        for index in range(rounds):
            for name in names[index % len(names) :] + names[: index % len(names)]:
                if variants[name].get("spaced"):
                    await asyncio.sleep(variants[name]["spaced"])
                c0, t0 = cpu_of(procs[name].pid), time.perf_counter()
                await stubs[name].Check(request)
                lat[name].append(time.perf_counter() - t0)
                cpu[name] += cpu_of(procs[name].pid) - c0
        base = names[0]
        print(f"load {os.getloadavg()[0]:.2f}; bare grpc.aio Health.Check, {rounds} rounds")
        for name in names:
            p50 = statistics.median(lat[name]) * 1e6
            per = cpu[name] / rounds * 1e3
            print(
                f"{name:>28}: p50 {p50:6.0f} us ({p50 / statistics.median(lat[base]) / 1e6:.2f}x)"
                f"  server CPU/call {per:.3f} ms ({per / (cpu[base] / rounds * 1e3):.2f}x)"
            )
    finally:
        for channel in channels.values():
            await channel.close()
        for proc in procs.values():
            proc.kill()
            proc.wait()
        shutil.rmtree(tmp, ignore_errors=True)


# --- calls -------------------------------------------------------------------


async def calls(rounds: int) -> None:
    from hostcap_proto.v1 import host_pb2, host_pb2_grpc, process_pb2

    from bench.client import TenantClient, ready_for_ab
    from bench.daemon import BenchDaemon, state_parent
    from bench.frontend_ab import frontend_of
    from bench.who_asked_ab import _read_4k

    state = Path(tempfile.mkdtemp(prefix="frontend-calls-", dir=state_parent()))
    daemon = BenchDaemon(state / "a", ("full",))
    client: TenantClient | None = None
    try:
        daemon.start()
        client = TenantClient(daemon.socket("full"))
        fs = await ready_for_ab({"a": client}, "frontend-calls-4k", 5)
        host = host_pb2_grpc.HostServiceStub(client.channel)  # type: ignore[no-untyped-call]
        fe = frontend_of(daemon, "full")
        c = client

        async def listed() -> None:
            await c.process.List(process_pb2.ListRequest())

        async def capabilities() -> None:
            await host.Capabilities(host_pb2.CapabilitiesRequest())

        async def read() -> None:
            await _read_4k(fs["a"], "frontend-calls-4k")

        async def quiet() -> None:
            await asyncio.sleep(0.008)

        async def busy() -> None:
            start = time.perf_counter()
            while time.perf_counter() - start < 0.008:
                pass

        async def nothing() -> None:
            return None

        # name: (what comes before the call, uncounted; the call)
        kinds: dict[str, tuple[Callable[[], Awaitable[None]], Callable[[], Awaitable[Any]]]] = {
            "Health.Check": (nothing, c.health_rtt),
            "List": (nothing, listed),
            "Capabilities": (nothing, capabilities),
            "Run /bin/true": (nothing, c.true),
            "ReadFile 4 KiB": (nothing, read),
            "List, after 8 ms quiet": (quiet, listed),
            "List, after 8 ms busy": (busy, listed),
        }
        for _, call in kinds.values():
            for _ in range(5):
                await call()
        cpu = {k: 0.0 for k in kinds}
        switches = {k: 0 for k in kinds}
        lat: dict[str, list[float]] = {k: [] for k in kinds}
        names = list(kinds)
        for index in range(rounds):
            for name in names[index % len(names) :] + names[: index % len(names)]:
                before, call = kinds[name]
                await before()
                s0, c0, t0 = switches_of(fe), cpu_of(fe), time.perf_counter()
                await call()
                lat[name].append(time.perf_counter() - t0)
                cpu[name] += cpu_of(fe) - c0
                switches[name] += switches_of(fe) - s0
        print(f"load {os.getloadavg()[0]:.2f}; the tenant front-end, {rounds} rounds")
        for name in names:
            print(
                f"{name:>24}: front-end CPU/call {cpu[name] / rounds * 1e3:.3f} ms,"
                f" {switches[name] / rounds:.1f} voluntary switches/call,"
                f" p50 {statistics.median(lat[name]) * 1e6:.0f} us"
            )
    finally:
        if client is not None:
            await client.close()
        daemon.stop()
        shutil.rmtree(state, ignore_errors=True)


# --- pinned ------------------------------------------------------------------


def _pin(pid: int, cpus: set[int]) -> None:
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            os.sched_setaffinity(int(task), cpus)
        except OSError:
            continue


def _cpu_now(pid: int) -> int:
    """The CPU `pid`'s main thread last ran on (/proc/PID/stat's field 39)."""
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[36])


async def pinned(rounds: int, stream_mib: int) -> None:
    from hostcap_proto.v1 import process_pb2

    from bench.client import TenantClient
    from bench.daemon import BenchDaemon, MiB, state_parent
    from bench.frontend_ab import frontend_of
    from bench.who_asked_ab import _stream

    state = Path(tempfile.mkdtemp(prefix="frontend-calls-", dir=state_parent()))
    daemon = BenchDaemon(state / "a", ("full", "stream"))
    daemon.config["daemon"]["frontend_cpu"] = "any"
    clients: list[TenantClient] = []
    allowed = os.sched_getaffinity(0)
    modes = ("kept", "let go")
    try:
        daemon.start()
        full, streamer = TenantClient(daemon.socket("full")), TenantClient(daemon.socket("stream"))
        clients = [full, streamer]
        fe, stream_fe = frontend_of(daemon, "full"), frontend_of(daemon, "stream")

        async def listed() -> None:
            await full.process.List(process_pb2.ListRequest())

        kinds: dict[str, Callable[[], Awaitable[Any]]] = {
            "Health.Check": full.health_rtt,
            "List": listed,
            "Run /bin/true": full.true,
        }
        for call in kinds.values():
            for _ in range(5):
                await call()
        cpu = {(k, m): 0.0 for k in kinds for m in modes}
        for index in range(rounds):
            for mode in modes if index % 2 == 0 else modes[::-1]:
                _pin(fe, {_cpu_now(fe)} if mode == "kept" else allowed)
                for name, call in kinds.items():
                    await call()  # after the change
                    c0 = cpu_of(fe)
                    await call()
                    cpu[(name, mode)] += cpu_of(fe) - c0
        print(f"load {os.getloadavg()[0]:.2f}; front-end CPU per call, {rounds} rounds")
        for name in kinds:
            kept, free = cpu[(name, "kept")] / rounds, cpu[(name, "let go")] / rounds
            print(
                f"{name:>16}: kept {kept * 1e3:.3f} ms | let go {free * 1e3:.3f} ms"
                f" | kept / let go {kept / free:.2f}"
            )
        from bench.frontend_ab import _cpu_of, _daemon_pids
        from bench.throughput import daemon_rate

        pids = _daemon_pids(daemon)
        rates: dict[str, list[float]] = {m: [] for m in modes}
        fe_per: dict[str, list[float]] = {m: [] for m in modes}
        daemon_per: dict[str, list[float]] = {m: [] for m in modes}
        windows = max(rounds // 15, 4)
        for index in range(windows):
            for mode in modes if index % 2 == 0 else modes[::-1]:
                _pin(fe, {_cpu_now(fe)} if mode == "kept" else allowed)
                f0, d0 = cpu_of(fe), _cpu_of(pids)
                done, took = await daemon_rate(daemon.socket("full"), 1.5)
                rates[mode].append(done / took)
                fe_per[mode].append((cpu_of(fe) - f0) / done)
                daemon_per[mode].append((_cpu_of(pids) - d0) / done)
        med = {m: statistics.median(rates[m]) for m in modes}
        fe_med = {m: statistics.median(fe_per[m]) for m in modes}
        all_med = {m: statistics.median(daemon_per[m]) for m in modes}
        print(
            f"8 clients, {windows} windows of 1.5 s a side: spawns/s kept / let go"
            f" {med['kept'] / med['let go']:.2f} ({med['kept']:.0f} / {med['let go']:.0f});"
            f" front-end CPU per spawn {fe_med['kept'] / fe_med['let go']:.2f};"
            f" daemon CPU per spawn {all_med['kept'] / all_med['let go']:.2f}"
        )
        if stream_mib:
            size = stream_mib * MiB
            await _stream(streamer, size)
            seconds: dict[str, list[float]] = {m: [] for m in modes}
            spent = {m: 0.0 for m in modes}
            streams = max(rounds // 5, 4)
            for index in range(streams):
                for mode in modes if index % 2 == 0 else modes[::-1]:
                    _pin(stream_fe, {_cpu_now(stream_fe)} if mode == "kept" else allowed)
                    c0 = cpu_of(stream_fe)
                    seconds[mode].append(await _stream(streamer, size))
                    spent[mode] += cpu_of(stream_fe) - c0
            gib = streams * size / (1 << 30)
            rate = {m: stream_mib / statistics.median(v) for m, v in seconds.items()}
            print(
                f"stream {stream_mib} MiB x {streams}: median kept {rate['kept']:.0f} MiB/s |"
                f" let go {rate['let go']:.0f} MiB/s | kept / let go"
                f" {rate['kept'] / rate['let go']:.2f}; front-end CPU per GiB kept"
                f" {spent['kept'] / gib:.2f} s | let go {spent['let go'] / gib:.2f} s | kept / let go"
                f" {spent['kept'] / spent['let go']:.2f}; load {os.getloadavg()[0]:.2f}"
            )
    finally:
        for client in clients:
            await client.close()
        daemon.stop()
        shutil.rmtree(state, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.frontend_calls")
    parser.add_argument("part", nargs="?", choices=("relay", "grpc", "calls", "pinned"))
    parser.add_argument("--stream-mib", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=0)
    parser.add_argument("--variants", default="", help="the grpc part's variants, as JSON")
    parser.add_argument("--serve", default="", help=argparse.SUPPRESS)
    parser.add_argument("--opts", default="[]", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.serve:
        serve(args.serve, args.opts)
        return 0
    if args.part == "relay":
        relay(args.rounds or 2000)
    elif args.part == "grpc":
        variants = json.loads(args.variants) if args.variants else VARIANTS
        asyncio.run(bare_grpc(args.rounds or 300, variants))
    elif args.part == "calls":
        asyncio.run(calls(args.rounds or 150))
    elif args.part == "pinned":
        asyncio.run(pinned(args.rounds or 150, args.stream_mib))
    else:
        parser.error("name a part: relay, grpc, calls or pinned")
    return 0


if __name__ == "__main__":
    sys.exit(main())
