"""The soak (`make soak`, never in CI): the mixed workload for a long time
with faults injected on a schedule, then the footprint is compared with the
one after warm-up. HOSTCAP_SOAK_SECONDS sets the length (default 600)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable

import pytest
from reliability_probes import (
    STREAMING_CLIENT,
    Footprint,
    audit_chain_intact,
    cgroup_subtrees,
    exec_records,
    exit_records,
    fd_kinds,
    first_started,
    health_problem,
    vm_rss,
    wait_healthy,
)
from reliability_workload import client_session, prepare_load_dir, require_fs, settle
from support.daemon import REPO, Daemon, MiB, wait_gone
from support.process import Client, request

SOAK_SECONDS = float(os.environ.get("HOSTCAP_SOAK_SECONDS", "600"))
CLIENTS = 8
#: What injected faults may make of a workload call.
FAULT_OUTCOMES = frozenset({"SPAWN_FAILED", "DAEMON_SHUTDOWN", "CANCELLED"})
RSS_SLACK = 32 * MiB


async def chaos(daemon: Daemon, marker: str, until: float, tally: dict[str, int]) -> None:
    """Every few seconds one fault: the spawner killed, a stream cancelled
    mid-output, a deadline mid-spawn, a client that vanishes."""
    client = Client(daemon.socket)
    step = 0
    try:
        while time.monotonic() < until:
            step += 1
            await asyncio.sleep(1.5)
            if step % 20 == 0:
                pid = daemon.spawner_pid()
                if pid:
                    os.kill(pid, signal.SIGKILL)
                    tally["spawner killed"] = tally.get("spawner killed", 0) + 1
                    await wait_healthy(daemon, 30)
            elif step % 3 == 0:
                call = client.stub.Spawn(
                    request(["sh", "-c", "(setsid sleep 1000 &); yes"], env={"TEST_MARKER": marker})
                )
                with contextlib.suppress(Exception):
                    await first_started(call)
                await asyncio.sleep(0.1)
                call.cancel()
                tally["stream cancelled"] = tally.get("stream cancelled", 0) + 1
            elif step % 3 == 1:
                with contextlib.suppress(Exception):
                    await client.stub.Run(
                        request(["sleep", "1000"], env={"TEST_MARKER": marker}), timeout=0.05
                    )
                tally["deadline"] = tally.get("deadline", 0) + 1
            else:
                vanishing = Client(daemon.socket)
                call = vanishing.stub.Spawn(request(["sleep", "1000"], env={"TEST_MARKER": marker}))
                with contextlib.suppress(Exception):
                    await first_started(call)
                await vanishing.close()
                tally["client vanished"] = tally.get("client vanished", 0) + 1
    finally:
        await client.close()


@pytest.mark.soak
@pytest.mark.timeout(SOAK_SECONDS * 2 + 300)
async def test_soak_mixed_load_with_faults_keeps_a_flat_footprint(
    start_reliable_daemon: Callable[..., Daemon], marker: str
) -> None:
    daemon = start_reliable_daemon({"dev": {"max_concurrent_spawns": 64}})
    await require_fs(daemon)
    prepare_load_dir(daemon)
    subtrees = cgroup_subtrees(daemon)
    assert await asyncio.gather(*(client_session(daemon, n, 40, True) for n in range(CLIENTS)))
    await asyncio.sleep(1)
    before = Footprint.of(daemon, subtrees)
    until = time.monotonic() + SOAK_SECONDS
    tally: dict[str, int] = {}
    rss: list[int] = []
    problems: list[str] = []

    async def worker(n: int) -> None:
        while time.monotonic() < until:
            problems.extend(await client_session(daemon, n, 80, True, FAULT_OUTCOMES))

    async def sampler() -> None:
        while time.monotonic() < until:
            rss.append(vm_rss(daemon.pid))
            await asyncio.sleep(5)

    await asyncio.gather(
        *(worker(n) for n in range(CLIENTS)), chaos(daemon, marker, until, tally), sampler()
    )

    assert problems == []
    assert wait_gone(marker, 3.0) == []
    # Spawners come and go under chaos; compare the rest exactly.
    after = await settle(daemon, subtrees, before)
    assert after.zombies == () and after.cgroups == frozenset()
    assert after.temp_files == frozenset()
    assert after.threads <= before.threads
    # Exactly the same files, pipes, eventfds. Sockets by count: the spawner
    # channel is new after each spawner kill, and grpc keeps the connection
    # of at most one client that vanished mid-stream (one, however many did).
    files_before = {f for f in before.fds if ":socket:" not in f}
    files_after = {f for f in after.fds if ":socket:" not in f}
    assert files_after == files_before, fd_kinds(files_after ^ files_before)
    sockets = fd_kinds(after.fds).get("socket", 0) - fd_kinds(before.fds).get("socket", 0)
    assert sockets <= 1, f"{sockets} more sockets than after warm-up"
    assert after.rss - before.rss < RSS_SLACK, (before.rss / MiB, after.rss / MiB)
    third = max(1, len(rss) // 3)
    early, late = sum(rss[:third]) / third, sum(rss[-third:]) / third
    assert late - early < RSS_SLACK, f"RSS trend {early / MiB:.0f} -> {late / MiB:.0f} MiB"
    assert set(exec_records(daemon)) <= set(exit_records(daemon))
    assert audit_chain_intact(daemon) == ""
    assert await health_problem(daemon) == ""
    assert tally.get("spawner killed", 0) >= 1 or SOAK_SECONDS < 60, tally


@pytest.mark.soak
@pytest.mark.timeout(300)
async def test_a_frozen_client_is_detected_and_its_tree_ended(
    start_reliable_daemon: Callable[..., Daemon], marker: str
) -> None:
    """A real client, connected and streaming, is frozen (SIGSTOP): alive for
    the kernel, silent for the daemon. Its spawn must not run to the wall limit."""
    daemon = start_reliable_daemon({"dev": {"limits": {"default": {"wall_seconds": 600}}}})
    client = subprocess.Popen(
        [sys.executable, "-c", STREAMING_CLIENT, str(daemon.socket), "sleep 1000", marker],
        stdout=subprocess.PIPE,
        cwd=REPO,
    )
    try:
        assert client.stdout is not None and client.stdout.readline().strip()
        client.send_signal(signal.SIGSTOP)
        # The frozen client's own argv names the marker: it is not the tree.
        alive = wait_gone(marker, 120.0, exclude=(client.pid,))
        assert alive == [], "a frozen client kept its tree for 2 minutes"
    finally:
        client.kill()
        client.wait()
