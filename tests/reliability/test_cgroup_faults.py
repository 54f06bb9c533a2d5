"""The host refuses the spawn's cgroup: the spawn fails typed at step
"cgroup", nothing runs, nothing is left in any hierarchy, and the
write-ahead exec record (appended before the cgroup is made, so its fsync
overlaps that work) is closed by an exit record."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from reliability_probes import (
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
    # test below refuses the refill).
    daemon = start_reliable_daemon(tenants={"dev": {"warm_spawns": 0}})
    subtrees, unified = _subtrees(daemon)
    client = Client(daemon.socket)
    try:
        with no_new_cgroups(unified[0]):
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
        assert spawn_cgroups(subtrees) == set()
    finally:
        await client.close()


async def test_with_new_cgroups_refused_the_waiting_warm_children_run_then_spawns_fail_typed(
    start_reliable_daemon: Callable[..., Daemon],
) -> None:
    """A warm child's cgroup was made before the refusal: the two waiting run
    their requests; their refills are refused (logged, the pool stays short),
    so the next spawn is fresh and fails typed at step "cgroup"."""
    daemon = start_reliable_daemon(tenants={"dev": {"warm_spawns": 2}})
    _, unified = _subtrees(daemon)
    client = Client(daemon.socket)
    try:
        for _ in range(100):
            if len([p for p in children_of(spawner_pid(daemon)) if waiting_warm_child(p)]) == 2:
                break
            await asyncio.sleep(0.05)
        with no_new_cgroups(unified[0]):
            first = await client.run("echo", "one")
            second = await client.run("echo", "two")
            third = await client.run("echo", "three")
        assert [outcome(r) for r in (first, second)] == ["EXITED", "EXITED"]
        assert (first.stdout, second.stdout) == (b"one\n", b"two\n")
        assert outcome(third) == "SPAWN_FAILED" and third.exited.failed_step == "cgroup"
        assert third.stdout == b""
        # Refused no longer: the pool fills again and spawns run.
        fourth = await client.run("echo", "four")
        assert (outcome(fourth), fourth.stdout) == ("EXITED", b"four\n")
        assert audit_chain_intact(daemon) == ""
    finally:
        await client.close()
