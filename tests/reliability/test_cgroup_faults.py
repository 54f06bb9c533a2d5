"""The host refuses the spawn's cgroup: the spawn fails typed at step
"cgroup", nothing runs, nothing is left in any hierarchy, and the
write-ahead exec record (appended before the cgroup is made, so its fsync
overlaps that work) is closed by an exit record.

Cgroups made before the refusal are used: each runtime keeps `POOL_SIZE`
made ahead for fresh spawns (hostcapd.process.cgroup_pool) and a warm child
is born in its own; a spawn fails at step "cgroup" once those are taken and
their refills refused."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from reliability_probes import (
    POOL_SIZE,
    READY_PREFIX,
    _cgroups_in,
    audit_chain_intact,
    cgroup_subtrees,
    exec_records,
    exit_records,
    spawn_cgroups,
)
from support.daemon import Daemon, children_of, processes_with, spawner_pid, waiting_warm_child
from support.process import Client, outcome


@contextlib.contextmanager
def no_new_cgroups(subtree: Path) -> Iterator[None]:
    """cgroup v2: mkdir beneath `subtree` fails (EAGAIN) while this holds."""
    limit = subtree / "cgroup.max.descendants"
    old = limit.read_text().strip()
    limit.write_text("0")
    try:
        yield
    finally:
        limit.write_text(old)


async def _pool_made(subtree: Path) -> None:
    """Wait until the runtime's pool holds its `POOL_SIZE` cgroups in
    `subtree` (made at start, in a later turn of the daemon's loop)."""
    for _ in range(200):  # correctness deadline, generous: 10 s
        found = [e.name for e in _cgroups_in(subtree) if e.name.startswith(READY_PREFIX)]
        if len(found) >= POOL_SIZE:
            return
        await asyncio.sleep(0.05)
    seen = [e.path for e in _cgroups_in(subtree)]
    raise AssertionError(f"the cgroup pool was never filled: {seen}")


def _subtrees(daemon: Daemon) -> tuple[list[Path], list[Path]]:
    """The daemon's cgroup subtrees, and the cgroup v2 ones (skips without)."""
    subtrees = cgroup_subtrees(daemon)
    unified = [s for s in subtrees if (s / "cgroup.max.descendants").exists()]
    if not unified:
        pytest.skip("no cgroup v2 hierarchy to refuse a mkdir in")
    return subtrees, unified


async def test_a_refused_cgroup_fails_the_spawn_at_step_cgroup_and_closes_its_record(
    start_reliable_daemon: Callable[..., Daemon], marker: str
) -> None:
    # Fresh spawns: a warm child's cgroup is made before the request (the
    # test below refuses the refill); none recycled (the test after them
    # runs spawns in recycled cgroups while new ones are refused).
    daemon = start_reliable_daemon(
        tenants={"dev": {"warm_spawns": 0}}, daemon={"recycle_spawn_cgroups": False}
    )
    subtrees, unified = _subtrees(daemon)
    await _pool_made(unified[0])
    client = Client(daemon.socket)
    try:
        with no_new_cgroups(unified[0]):
            # The cgroups made ahead are used; their refills are refused.
            for _ in range(POOL_SIZE):
                pooled = await client.run("true")
                assert outcome(pooled) == "EXITED", pooled.exited.message
            result = await client.run(
                "sh", "-c", "echo ran; sleep 1000", env={"TEST_MARKER": marker}
            )
        assert outcome(result) == "SPAWN_FAILED", result.exited.message
        assert result.exited.failed_step == "cgroup"
        assert "cgroup" in result.exited.message
        assert result.stdout == b"" and processes_with(marker) == []  # nothing ran
        spawn_id = result.started.spawn_id
        # No half-made cgroup in the hierarchies whose mkdir had worked.
        assert spawn_cgroups(subtrees) == set()
        # The exec record was written first; its exit record closes it.
        assert spawn_id in exec_records(daemon)
        assert exit_records(daemon)[spawn_id]["outcome"] == "SPAWN_FAILED"
        assert audit_chain_intact(daemon) == ""
        # The next spawn, with the host fixed, runs as usual.
        again = await client.run("true")
        assert outcome(again) == "EXITED"
        # Its cgroup is removed a turn of the daemon's loop after its answer
        # left (the answer goes first): under load the client can look sooner.
        for _ in range(40):  # correctness deadline, generous: 2 s
            if not spawn_cgroups(subtrees):
                break
            await asyncio.sleep(0.05)
        assert spawn_cgroups(subtrees) == set()
    finally:
        await client.close()


async def test_with_new_cgroups_refused_the_waiting_warm_children_run_then_spawns_fail_typed(
    start_reliable_daemon: Callable[..., Daemon],
) -> None:
    """A warm child's cgroup was made before the refusal: the two waiting run
    their requests, then the fresh spawns after them take the cgroups made
    ahead; their refills are refused (logged, the pools stay short), so the
    next spawn fails typed at step "cgroup" (none recycled)."""
    daemon = start_reliable_daemon(
        tenants={"dev": {"warm_spawns": 2}}, daemon={"recycle_spawn_cgroups": False}
    )
    _, unified = _subtrees(daemon)
    await _pool_made(unified[0])
    client = Client(daemon.socket)
    try:
        for _ in range(100):
            if len([p for p in children_of(spawner_pid(daemon)) if waiting_warm_child(p)]) == 2:
                break
            await asyncio.sleep(0.05)
        with no_new_cgroups(unified[0]):
            ran = [await client.run("echo", str(i)) for i in range(2 + POOL_SIZE)]
            refused = await client.run("echo", "refused")
        assert [outcome(r) for r in ran] == ["EXITED"] * len(ran)
        assert [r.stdout for r in ran] == [f"{i}\n".encode() for i in range(len(ran))]
        assert outcome(refused) == "SPAWN_FAILED" and refused.exited.failed_step == "cgroup"
        assert refused.stdout == b""
        # Refused no longer: the pool fills again and spawns run.
        fourth = await client.run("echo", "four")
        assert (outcome(fourth), fourth.stdout) == ("EXITED", b"four\n")
        assert audit_chain_intact(daemon) == ""
    finally:
        await client.close()


async def test_with_new_cgroups_refused_spawns_run_in_recycled_ones_under_their_own_limits(
    start_reliable_daemon: Callable[..., Daemon],
) -> None:
    """A spawn's cgroup, recycled once its spawn ended (the default), needs
    no mkdir: with new cgroups refused, later spawns still run in recycled
    ones, each under its own request's memory limit."""
    daemon = start_reliable_daemon(tenants={"dev": {"warm_spawns": 0}})
    _, unified = _subtrees(daemon)
    await _pool_made(unified[0])
    client = Client(daemon.socket)
    try:
        # One at a time: each ends (its cgroup kept) before the next asks.
        for _ in range(3):
            assert outcome(await client.run("true")) == "EXITED"
        with no_new_cgroups(unified[0]):
            ran = [await client.run("echo", str(i)) for i in range(2 * POOL_SIZE + 2)]
            hungry = await client.run(
                "python3",
                "-c",
                "b = bytearray(96 * 1024 * 1024); print(len(b))",
                limits={"memory_bytes": 32 * 1024 * 1024},
            )
        assert [(outcome(r), r.stdout) for r in ran] == [
            ("EXITED", f"{i}\n".encode()) for i in range(len(ran))
        ]
        assert outcome(hungry) == "MEMORY_LIMIT", hungry.exited.message
        assert audit_chain_intact(daemon) == ""
    finally:
        await client.close()
