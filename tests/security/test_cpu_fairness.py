"""One tenant's busy loops must not take the CPU from the other tenants and
from the daemon: each tenant's spawns share one cpu cgroup (cpu.shares /
cpu.weight), the daemon's own processes are outside every tenant's. While
tenant A runs 16 busy loops (16 spawns), a fixed amount of CPU work of
tenant B's takes within 4x its idle time, and B's /bin/true spawns stay
within 10x their idle latency (correctness bounds, not a benchmark: without
the shares, B's work took about 8x as long on a 2-core host, one share in
17; with A's weight at 100x B's, B's work took 20-106x and its latency
17-133x, every pair below failing).
Idle and loaded are measured in pairs of adjacent windows (A's loops
stopped, then running again), the best of up to three pairs counted: the
host's own load moves both windows of a pair alike. The latency bound is
wide because the host's load moves the ratio itself: with A's loops, B's
spawn waits for a slice at each of its hops (the daemon, the spawner, the
init), and on a host at load 16-24 of 2 cores the best pair read 0.5-6.3x
(1.1-1.6x on a quiet one; CI's noisy host once read 3.9x in one window),
while B's work read 1.1-2.6x.
A quota a host cannot enforce refuses the tenant."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from hostcap_proto.v1 import host_pb2, host_pb2_grpc
from hostcapd.sandbox.cpu import CpuHost
from support.cgroupfs import dirs_ending
from support.daemon import Daemon, cmdline, daemon_config, tenant_config, waiting_warm_child
from support.process import Client, outcome, request

CPU = CpuHost.probe()
pytestmark = pytest.mark.skipif(CPU.subtree is None, reason=f"no cpu cgroups: {CPU.reason}")
LOOPS = 16
#: Pairs of windows (A's loops stopped, then running), the best one counted.
PAIRS = 3
BUSY = "echo started; while :; do :; done"
#: The tenant's processes that work on its behalf, not for a spawn.
DAEMON_SIDE = (b"hostcapd.frontend", b"hostcapd.fs.worker")


async def _latency(client: Client, runs: int = 15) -> float:
    """Median seconds of a Run of /bin/true."""
    times = []
    for _ in range(runs):
        begun = time.perf_counter()
        result = await client.run("/bin/true")
        times.append(time.perf_counter() - begun)
        assert outcome(result) == "EXITED"
    return statistics.median(times)


#: A fixed amount of CPU work, about 0.2 s on an idle core.
WORK = "i=0; while [ $i -lt 200000 ]; do i=$((i+1)); done"


async def _work(client: Client, runs: int = 3) -> float:
    """Median seconds of a spawn doing WORK (the spawn's own duration)."""
    times = []
    for _ in range(runs):
        result = await client.run("sh", "-c", WORK, limits={"wall_seconds": 100})
        assert outcome(result) == "EXITED"
        times.append(result.exited.duration_seconds)
    return statistics.median(times)


def _tenant_dir(daemon: Daemon, tenant: str) -> Path:
    """The daemon's cpu cgroup of `tenant` (the cpu hierarchy is shared by
    every daemon on the host: other tenants may have the same name)."""
    parent = daemon.config["daemon"]["cgroup_parent"]
    [directory] = dirs_ending(CPU_ROOT, f"{parent}/tenant-{tenant}")
    return directory


async def _until_empty(daemon: Daemon, tenant: str) -> None:
    """Wait (up to 20 s) until the tenant's cpu cgroup holds no process but
    its warm children waiting for a request (decision 0026) and its
    front-end and fs worker (the tenant's cost too, issue 29)."""
    tasks = _tenant_dir(daemon, tenant) / "tasks"
    for _ in range(200):
        if all(
            waiting_warm_child(int(pid)) or any(m in cmdline(int(pid)) for m in DAEMON_SIDE)
            for pid in tasks.read_text().split()
        ):
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"tenant {tenant}'s processes outlived their cancelled spawns")


def _loops(daemon: Daemon) -> list[int]:
    """A's busy loops: the processes of its cpu cgroup running BUSY."""
    tasks = (_tenant_dir(daemon, "alpha") / "tasks").read_text().split()
    return [int(pid) for pid in tasks if b"while :" in cmdline(int(pid))]


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return "gone"


async def _stop(loops: list[int]) -> None:
    """SIGSTOP A's loops and wait (up to 10 s) until none runs: a stop takes
    effect when the process next runs, a moment later on a loaded machine."""
    for pid in loops:
        os.kill(pid, signal.SIGSTOP)
    for _ in range(1000):
        if all(_state(pid) == "T" for pid in loops):
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"A's loops did not stop: {[_state(pid) for pid in loops]}")


async def test_busy_loops_of_one_tenant_leave_another_its_latency(
    start_daemon: Callable[..., Daemon],
) -> None:
    daemon = start_daemon(tenants={"alpha": {}, "beta": {}})
    a, b = Client(daemon.socket_of("alpha")), Client(daemon.socket_of("beta"))
    #: (idle, loaded) seconds of B's /bin/true, and of its CPU work, per pair.
    latencies: list[tuple[float, float]] = []
    works: list[tuple[float, float]] = []

    def latency_ok() -> bool:
        return any(loaded <= 10 * idle for idle, loaded in latencies)

    def work_ok() -> bool:
        return any(loaded <= 4 * idle for idle, loaded in works)

    try:
        await _latency(b, 5)  # warm-up: pooled namespaces, hash cache
        # 16 spawns of one busy loop each: each spawn is its own session, so
        # per-session fairness (autogroup) alone would give A 16 shares to B's one.
        calls = [
            a.stub.Spawn(request(["sh", "-c", BUSY], limits={"wall_seconds": 600}))
            for _ in range(LOOPS)
        ]
        try:
            for call in calls:
                async for event in call:
                    if event.HasField("output") and b"started" in event.output.data:
                        break
            loops = _loops(daemon)
            assert len(loops) == LOOPS, loops
            while len(latencies) < PAIRS and not (latency_ok() and work_ok()):
                await _stop(loops)
                idle = (await _latency(b), await _work(b))
                for pid in loops:
                    os.kill(pid, signal.SIGCONT)
                await asyncio.sleep(0.5)  # the loops are all spinning
                loaded = (await _latency(b), await _work(b))
                # Loaded throughout: every loop still there (not past its wall limit).
                states = [_state(pid) for pid in loops]
                assert all(state in ("R", "S") for state in states), f"a loop ended: {states}"
                latencies.append((idle[0], loaded[0]))
                works.append((idle[1], loaded[1]))
        finally:
            for pid in _loops(daemon):
                os.kill(pid, signal.SIGCONT)  # as the daemon left them, for their end
            for call in calls:
                call.cancel()
            for call in calls:
                with contextlib.suppress(BaseException):
                    async for _ in call:
                        pass
        await _until_empty(daemon, "alpha")
    finally:
        await a.close()
        await b.close()
    shown = (
        "/bin/true (idle, under load): "
        + ", ".join(f"({i * 1000:.1f}, {w * 1000:.1f}) ms" for i, w in latencies)
        + "; CPU work: "
        + ", ".join(f"({i:.2f}, {w:.2f}) s" for i, w in works)
    )
    assert latency_ok(), shown
    # B's share is half the machine: its one process gets most of a core
    # (v1 splits a group's shares per CPU, so 1.5-2.7x was seen here); without
    # the shares it got 2 of 17 runnable tasks' worth (8x).
    assert work_ok(), shown


async def test_tenants_report_their_share_and_quota(start_daemon: Callable[..., Daemon]) -> None:
    daemon = start_daemon(tenants={"alpha": {"cpu": {"weight": 300, "max_cores": 0.5}}, "beta": {}})
    for name, weight, cores, shares, quota in (
        ("alpha", 300, 0.5, "3072", "50000"),
        ("beta", 100, 0.0, "1024", "-1"),
    ):
        client = Client(daemon.socket_of(name))
        try:
            stub = host_pb2_grpc.HostServiceStub(client.channel)  # type: ignore[no-untyped-call]
            caps = await stub.Capabilities(host_pb2.CapabilitiesRequest())
        finally:
            await client.close()
        assert (caps.cpu_weight, caps.cpu_max_cores) == (weight, cores)
        directory = _tenant_dir(daemon, name)
        assert (directory / "cpu.shares").read_text().strip() == shares
        assert (directory / "cpu.cfs_quota_us").read_text().strip() == quota


async def test_a_spawn_runs_in_its_tenants_cpu_cgroup(start_daemon: Callable[..., Daemon]) -> None:
    daemon = start_daemon(tenants={"alpha": {"cpu": {"max_cores": 0.25}}})
    client = Client(daemon.socket_of("alpha"))
    try:
        result = await client.run("cat", "/proc/self/cgroup")
    finally:
        await client.close()
    line = next(x for x in result.stdout.decode().splitlines() if x.split(":")[1] == "cpu")
    assert line.endswith("/tenant-alpha"), line


def test_a_quota_the_host_cannot_enforce_refuses_the_tenant(state_dir: Path) -> None:
    # Without the cgroup protection (simulated missing) no quota can be set:
    # the daemon refuses to serve the tenant rather than run it unbounded.
    tenant = tenant_config(
        state_dir,
        "alpha",
        cpu={"max_cores": 1.0},
        sandbox={"simulate_unavailable": ["cgroup"], "cgroup": "best-effort"},
    )
    daemon = Daemon(state_dir, daemon_config(state_dir, {"alpha": tenant}))
    with pytest.raises(RuntimeError):
        daemon.start(timeout=20)
    try:
        assert "cpu_quota" in daemon.output(), daemon.output()
    finally:
        if daemon.proc is not None and daemon.proc.poll() is None:
            daemon.stop()


CPU_ROOT = Path("/sys/fs/cgroup/cpu")
