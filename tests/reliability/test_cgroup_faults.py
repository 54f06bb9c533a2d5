"""The host refuses the spawn's cgroup: the spawn fails typed at step
"cgroup", nothing runs, nothing is left in any hierarchy, and the
write-ahead exec record (appended before the cgroup is made, so its fsync
overlaps that work) is closed by an exit record."""

from __future__ import annotations

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
from support.daemon import Daemon, processes_with
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


async def test_a_refused_cgroup_fails_the_spawn_at_step_cgroup_and_closes_its_record(
    start_reliable_daemon: Callable[..., Daemon], marker: str
) -> None:
    daemon = start_reliable_daemon()
    subtrees = cgroup_subtrees(daemon)
    unified = [s for s in subtrees if (s / "cgroup.max.descendants").exists()]
    if not unified:
        pytest.skip("no cgroup v2 hierarchy to refuse a mkdir in")
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
