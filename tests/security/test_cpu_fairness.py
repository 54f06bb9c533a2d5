"""One tenant's busy loops must not take the CPU from the other tenants and
from the daemon: each tenant's spawns share one cpu cgroup (cpu.shares /
cpu.weight), the daemon's own processes are outside every tenant's. While
tenant A runs 16 busy loops (16 spawns), tenant B's /bin/true spawns stay
within 3x their idle latency, and a fixed amount of CPU work of B's within
4x its idle time (generous correctness bounds, not a benchmark: without the
shares, B's work took about 8x as long on a 2-core host, one share in 17;
with A's weight at 100x B's, B's latency was 44-63x and its work 48-51x).
The latency is the best of up to three windows of the same load: a noisy
host (CI's) once moved one window's median to 3.9x while B's work read 1.4x,
and a starved tenant misses in every window.
A quota a host cannot enforce refuses the tenant."""

from __future__ import annotations

import asyncio
import contextlib
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from hostcap_proto.v1 import host_pb2, host_pb2_grpc
from hostcapd.sandbox.cpu import CpuHost
from support.daemon import Daemon, cmdline, daemon_config, tenant_config, waiting_warm_child
from support.process import Client, outcome, request

CPU = CpuHost.probe()
pytestmark = pytest.mark.skipif(CPU.subtree is None, reason=f"no cpu cgroups: {CPU.reason}")
LOOPS = 16
#: Windows of B's latency under A's load, the best one counted (above).
WINDOWS = 3
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
    [directory] = CPU_ROOT.glob(f"**/{parent}/tenant-{tenant}")
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


async def test_busy_loops_of_one_tenant_leave_another_its_latency(
    start_daemon: Callable[..., Daemon],
) -> None:
    daemon = start_daemon(tenants={"alpha": {}, "beta": {}})
    a, b = Client(daemon.socket_of("alpha")), Client(daemon.socket_of("beta"))
    try:
        await _latency(b, 5)  # warm-up: pooled namespaces, hash cache
        idle = await _latency(b)
        idle_work = await _work(b)
        # 16 spawns of one busy loop each: each spawn is its own session, so
        # per-session fairness (autogroup) alone would give A 16 shares to B's one.
        calls = [
            a.stub.Spawn(request(["sh", "-c", BUSY], limits={"wall_seconds": 100}))
            for _ in range(LOOPS)
        ]
        windows: list[float] = []
        try:
            for call in calls:
                async for event in call:
                    if event.HasField("output") and b"started" in event.output.data:
                        break
            await asyncio.sleep(1.0)  # the loops are all spinning
            loaded_work = await _work(b)
            while len(windows) < WINDOWS:
                windows.append(await _latency(b))
                if windows[-1] <= 3 * idle:
                    break
        finally:
            for call in calls:
                call.cancel()
            for call in calls:
                with contextlib.suppress(BaseException):
                    async for _ in call:
                        pass
        await _until_empty(daemon, "alpha")
        # The idle figures again, once A's loops are gone: other work on the
        # host (not A's) moves both, so the larger of the two is the baseline.
        idle = max(idle, await _latency(b))
        idle_work = max(idle_work, await _work(b))
    finally:
        await a.close()
        await b.close()
    assert windows
    loaded = min(windows)
    shown = (
        f"/bin/true: idle {idle * 1000:.1f} ms, under load "
        f"{', '.join(f'{w * 1000:.1f}' for w in windows)} ms (windows); "
        f"CPU work: idle {idle_work:.2f} s, under load {loaded_work:.2f} s"
    )
    assert loaded <= 3 * idle, shown
    # B's share is half the machine: its one process gets most of a core
    # (v1 splits a group's shares per CPU, so 1.5-2.7x was seen here); without
    # the shares it got 2 of 17 runnable tasks' worth (8x).
    assert loaded_work <= 4 * idle_work, shown


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
