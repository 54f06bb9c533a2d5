"""A start-up sweep removes only what this daemon left (issue 29, item 6).

Two config-file daemons on one host, neither naming a `cgroup_parent`, used
to share `<own cgroup>/hostcapd`: the second one's start-up sweep killed the
first one's live spawns and warm children. Now each has a subtree named from
its config's path (`hostcapd-<hash>`), and the sweep at its (re)start kills
only what a previous instance of the same daemon left. A daemon given an
explicit `cgroup_parent` that another live daemon serves from refuses to
start rather than sweep it.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from hostcapd.sandbox.cgroupfs import instance_name
from hostcapd.sandbox.cgroups import CgroupHost
from support.daemon import (
    Daemon,
    children_of,
    daemon_config,
    processes_with,
    spawner_pid,
    tenant_config,
    waiting_warm_child,
)
from support.process import Client, request

CGROUPS = CgroupHost.probe()
pytestmark = pytest.mark.skipif(
    not CGROUPS.support.version, reason=f"no usable cgroups: {CGROUPS.support.reason}"
)
SLEEPER = "echo started; exec sleep 1000"


def _daemon(state: Path, cgroup_parent: str = "") -> Daemon:
    state.mkdir(mode=0o711)
    config = daemon_config(
        state,
        {"dev": tenant_config(state, "dev", warm_spawns=2)},
        # Unset, as an operator's config leaves it: the subtree is derived.
        daemon={"cgroup_parent": cgroup_parent},
    )
    return Daemon(state, config)


@pytest.fixture
def two_daemons(state_dir: Path) -> Iterator[tuple[Daemon, Daemon]]:
    first, second = _daemon(state_dir / "first"), _daemon(state_dir / "second")
    try:
        yield first.start(), second.start()
    finally:
        for daemon in (first, second):
            if daemon.proc is not None and daemon.proc.poll() is None:
                daemon.stop()


async def _start_sleeper(client: Client, marker: str) -> object:
    """A running spawn, once it has said so; the call (cancel it to end it)."""
    call = client.stub.Spawn(
        request(["sh", "-c", SLEEPER], env={"TEST_MARKER": marker}, limits={"wall_seconds": 600})
    )
    async for event in call:
        if event.HasField("output") and b"started" in event.output.data:
            return call
    raise AssertionError("the sleeper never started")


async def _warm(daemon: Daemon, count: int = 2) -> set[int]:
    for _ in range(200):
        waiting = {p for p in children_of(spawner_pid(daemon)) if waiting_warm_child(p)}
        if len(waiting) >= count:
            return waiting
        await asyncio.sleep(0.05)
    raise AssertionError("the warm children never waited")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"


async def test_a_restart_of_one_daemon_leaves_the_other_daemons_spawns_alone(
    two_daemons: tuple[Daemon, Daemon],
) -> None:
    first, second = two_daemons
    assert instance_name(first.config_path) != instance_name(second.config_path)
    mine, theirs = f"mine-{uuid.uuid4().hex[:8]}", f"theirs-{uuid.uuid4().hex[:8]}"
    client = Client(first.socket)
    other = Client(second.socket)
    calls: list[object] = []
    try:
        calls.append(await _start_sleeper(client, mine))
        warm = await _warm(first)
        calls.append(await _start_sleeper(other, theirs))
        [sleeper] = processes_with(mine)
        # The second daemon crashes, and starts again: its sweep runs.
        second.stop(signal.SIGKILL)
        await other.close()
        second.start()
        other = Client(second.socket)
        # The first daemon's spawn and warm children are untouched...
        assert _alive(sleeper), "the other daemon's sweep killed this daemon's spawn"
        assert all(_alive(pid) for pid in warm), "the other daemon's sweep killed warm children"
        result = await client.run("echo", "still")
        assert result.stdout == b"still\n"
        # ...and the second daemon's own leftovers are gone.
        for _ in range(100):
            if not processes_with(theirs):
                break
            await asyncio.sleep(0.05)
        assert processes_with(theirs) == []
        assert (await other.run("echo", "back")).stdout == b"back\n"
    finally:
        for call in calls:
            call.cancel()  # type: ignore[attr-defined]
        with contextlib.suppress(BaseException):
            await client.close()
        with contextlib.suppress(BaseException):
            await other.close()


async def test_a_daemon_given_another_live_daemons_subtree_refuses_to_start(
    state_dir: Path,
) -> None:
    """Two daemons given one explicit cgroup_parent: the second would sweep
    the first's spawns. It refuses to start instead, naming the first, and
    the first's spawn lives on."""
    shared = f"hostcapd-test-shared-{uuid.uuid4().hex[:8]}"
    first, second = _daemon(state_dir / "first", shared), _daemon(state_dir / "second", shared)
    marker = f"shared-{uuid.uuid4().hex[:8]}"
    client: Client | None = None
    call: object = None
    try:
        first.start()
        client = Client(first.socket)
        call = await _start_sleeper(client, marker)
        await _warm(first)
        [sleeper] = processes_with(marker)
        with pytest.raises(RuntimeError):
            second.start(timeout=20)
        assert f"in use by another live hostcapd (pid {first.pid})" in second.output()
        assert _alive(sleeper)
        assert (await client.run("echo", "still")).stdout == b"still\n"
    finally:
        if call is not None:
            call.cancel()  # type: ignore[attr-defined]
        if client is not None:
            await client.close()
        for daemon in (first, second):
            if daemon.proc is not None and daemon.proc.poll() is None:
                daemon.stop()
