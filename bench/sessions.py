"""The figures of issue 30 (sessions), in one process against one daemon.

    python -m bench.sessions [--rounds N] [--items N]

- ReadOutput of new output (a detached spawn that prints every 5 ms, read
  with wait_ms 0 once something is new) against a bare grpc.aio round trip,
  interleaved.
- The memory one idle background spawn and one idle environment cost the
  daemon's side (the daemon, its spawner and its front-ends), per item
  over `--items` of each (USS). The kernel's own memory for the namespaces is not
  in it.
- Run of /bin/true inside an environment against a fresh one (the same
  tenant without warm children: an environment's spawns never take one),
  and against the default warm path, interleaved.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import sys
import tempfile
import time
from pathlib import Path

import grpc
from hostcap_proto.v1 import process_pb2

from bench import floor_servers
from bench.baselines import start_server, stop
from bench.client import TRUE, TenantClient, check_exited
from bench.daemon import BenchDaemon, state_parent
from bench.stats import Summary, rotation

TENANTS = ("full", "full_fresh")
PRINTER = ["sh", "-c", "while :; do echo tick; sleep 0.005; done"]


def _tree_uss(root: int) -> int:
    """PSS of `root` and every process beneath it but the spawns (the
    daemon's side: the daemon, its spawner, front-ends and fs workers), private memory."""
    total = 0
    pids = [root]
    while pids:
        pid = pids.pop()
        try:
            comm = Path(f"/proc/{pid}/comm").read_text().strip()
            children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
        except OSError:
            continue
        if comm in ("sleep", "hostcap-init"):
            continue
        total += _uss(pid)
        pids += [int(c) for c in children]
    return total


def _uss(pid: int) -> int:
    """Private memory of `pid` (USS): unlike PSS, it does not shrink when a
    spawn maps the same libraries."""
    total = 0
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
        if line.startswith(("Private_Clean:", "Private_Dirty:")):
            total += int(line.split()[1]) * 1024
    return total


async def _settled_uss(pid: int) -> int:
    await asyncio.sleep(1.0)
    return _tree_uss(pid)


async def main(rounds: int, items: int) -> int:
    state = Path(tempfile.mkdtemp(prefix="sessions-", dir=state_parent()))
    daemon = BenchDaemon(state / "d", TENANTS)
    for name in TENANTS:
        daemon.config["tenants"][name].update(
            max_detached_spawns=items + 4, max_environments=items + 4, max_concurrent_spawns=256
        )
    daemon.start()
    grpc_proc = start_server("grpc", state / "grpc-floor.sock")
    channel = grpc.aio.insecure_channel(
        f"unix:{state / 'grpc-floor.sock'}", options=floor_servers.OPTIONS
    )
    echo = channel.unary_unary(floor_servers.ECHO, None, None)
    clients = {name: TenantClient(daemon.socket(name)) for name in TENANTS}
    stub = clients["full_fresh"].process
    try:
        for c in clients.values():
            for _ in range(3):
                await c.true()

        # 1. ReadOutput of new output against a bare grpc.aio round trip.
        printer = await stub.Run(process_pb2.SpawnRequest(argv=PRINTER, detached=True))
        spawn_id = printer.started.spawn_id
        offset = 0
        samples: dict[str, list[float]] = {"read_output": [], "grpc": []}
        for index in range(rounds):
            for name in rotation(list(samples), index):
                await asyncio.sleep(0.01)  # something new has been printed
                start = time.perf_counter()
                if name == "grpc":
                    await echo(b"x" * 64)
                else:
                    answer = await stub.ReadOutput(
                        process_pb2.ReadOutputRequest(spawn_id=spawn_id, offset=offset)
                    )
                    offset = answer.next_offset
                samples[name].append(time.perf_counter() - start)
        await stub.Signal(process_pb2.SignalRequest(spawn_id=spawn_id, signal=9))
        read, bare = Summary.of(samples["read_output"]), Summary.of(samples["grpc"])
        print(
            f"ReadOutput of new output: p50 {read.p50_us:.0f} us p95 {read.p95_us:.0f} us;"
            f" bare grpc.aio round trip p50 {bare.p50_us:.0f} us;"
            f" ratio p50 {read.p50_us / bare.p50_us:.2f} ({rounds} rounds)"
        )

        # 2. Memory of idle background spawns and idle environments.
        base = await _settled_uss(daemon.pid)
        ids = []
        for _ in range(items):
            started = await stub.Run(process_pb2.SpawnRequest(argv=["sleep", "600"], detached=True))
            ids.append(started.started.spawn_id)
        with_spawns = await _settled_uss(daemon.pid)
        for spawn_id in ids:
            await stub.Signal(process_pb2.SignalRequest(spawn_id=spawn_id, signal=9))
        await asyncio.sleep(0.5)
        base_env = await _settled_uss(daemon.pid)
        envs = []
        for _ in range(items):
            info = await stub.OpenEnvironment(process_pb2.OpenEnvironmentRequest())
            envs.append(info.environment_id)
        with_envs = await _settled_uss(daemon.pid)
        print(
            f"memory (daemon side, USS): one idle background spawn {(with_spawns - base) / items / 1024:.1f} KiB,"
            f" one idle environment {(with_envs - base_env) / items / 1024:.1f} KiB (over {items} each)"
        )

        # 3. Spawn latency inside an environment against a fresh one.
        env = envs[0]
        in_env = process_pb2.SpawnRequest(argv=["/bin/true"], environment_id=env)
        latency: dict[str, list[float]] = {"environment": [], "fresh": [], "warm": []}
        for index in range(rounds):
            for name in rotation(list(latency), index):
                await asyncio.sleep(0.02)
                start = time.perf_counter()
                if name == "environment":
                    result = await stub.Run(in_env)
                elif name == "fresh":
                    result = await stub.Run(TRUE)
                else:
                    result = await clients["full"].process.Run(TRUE)
                latency[name].append(time.perf_counter() - start)
                check_exited(result.exited, name)
        s = {name: Summary.of(v) for name, v in latency.items()}
        print(
            f"Run /bin/true: in an environment p50 {s['environment'].p50_us / 1000:.2f} ms,"
            f" fresh (no warm child) {s['fresh'].p50_us / 1000:.2f} ms,"
            f" warm {s['warm'].p50_us / 1000:.2f} ms;"
            f" environment/fresh {s['environment'].p50_us / s['fresh'].p50_us:.2f},"
            f" environment/warm {s['environment'].p50_us / s['warm'].p50_us:.2f} ({rounds} rounds)"
        )
        for env_id in envs:
            await stub.CloseEnvironment(process_pb2.CloseEnvironmentRequest(environment_id=env_id))
    finally:
        for c in clients.values():
            await c.close()
        await channel.close(None)
        stop(grpc_proc)
        daemon.stop()
        shutil.rmtree(state, ignore_errors=True)
    return 0


def cli() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.sessions")
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--items", type=int, default=20)
    args = parser.parse_args()
    return asyncio.run(main(args.rounds, args.items))


if __name__ == "__main__":
    sys.exit(cli())
