"""A warm spawn's exit (decision 0026), the cases a change of who hears it
could break (bench/README.md, "the spawner off a warm spawn's path": the
root hearing a warm init's pidfd and reading its exit record itself was
measured there and not kept): a process the command left in the
background, in a session of its own, is dead at the answer (no grace: the
kernel kills a pid namespace's other processes before its init's exit is
reported); an init killed mid-command (no exit record: its own status,
SIGKILL, is the command's); the spawner killed mid-spawn (SPAWN_FAILED)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
from support.daemon import (
    Daemon,
    children_of,
    environ,
    processes_with,
    spawner_pid,
    waiting_warm_child,
)
from support.process import Client, outcome

#: A shell that leaves a sleep running in a session of its own (not its
#: group, not its child once it exits), then exits.
LEAVE_BEHIND = "setsid sleep 60 >/dev/null 2>&1 </dev/null & sleep 0.05; echo left"


def _daemon(start_daemon: Callable[..., Daemon], sandbox: dict[str, str]) -> Daemon:
    return start_daemon(tenants={"dev": {"warm_spawns": 2, "sandbox": sandbox}})


async def _waiting(daemon: Daemon, n: int = 2, timeout: float = 10.0) -> set[int]:
    """The warm children that wait (n of them, made and set up)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        spawner = spawner_pid(daemon)
        waiting = {
            pid
            for pid in children_of(spawner)
            if waiting_warm_child(pid) and Path(f"/proc/{pid}").stat().st_uid != 0
        }
        if len(waiting) >= n:
            await asyncio.sleep(0.1)  # their Warmed reached the root
            return waiting
        await asyncio.sleep(0.02)
    raise AssertionError("no warm children were made")


def _alive(pids: list[int]) -> list[int]:
    """Those of `pids` that are not gone nor zombies."""
    alive = []
    for pid in pids:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state != "Z":
            alive.append(pid)
    return alive


@contextlib.asynccontextmanager
async def _warm_sleep(
    start_daemon: Callable[..., Daemon], marker: str
) -> AsyncIterator[tuple[Daemon, Client, asyncio.Future[Any], int]]:
    """A daemon without cgroups whose warm child runs `sleep 60` (`marker`
    in its environment): (the daemon, its client, the Run, the warm init)."""
    daemon = _daemon(start_daemon, {"cgroup": "off"})
    client = Client(daemon.socket)
    try:
        waiting = await _waiting(daemon)
        run = asyncio.ensure_future(client.run("sleep", "60", env={"TEST_MARKER": marker}))
        yield daemon, client, run, await _running(waiting, marker)
    finally:
        await client.close()


async def _running(waiting: set[int], marker: str, timeout: float = 10.0) -> int:
    """The warm init among `waiting` whose command runs (exec'd, `marker`
    in its environment)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for pid in waiting:
            if any(marker.encode() in environ(child) for child in children_of(pid)):
                return pid
        await asyncio.sleep(0.01)
    raise AssertionError("no warm child runs the command")


@pytest.mark.parametrize("sandbox", [{"cgroup": "off"}, {}], ids=["no-cgroup", "default"])
async def test_a_process_left_in_the_background_is_dead_at_the_answer(
    start_daemon: Callable[..., Daemon], sandbox: dict[str, str], marker: str
) -> None:
    daemon = _daemon(start_daemon, sandbox)
    client = Client(daemon.socket)
    try:
        waiting = await _waiting(daemon)
        for _ in range(3):
            result = await client.run("sh", "-c", LEAVE_BEHIND, env={"TEST_MARKER": marker})
            # At the answer, not a moment after: no grace.
            left = _alive(processes_with(marker))
            assert (outcome(result), result.stdout) == ("EXITED", b"left\n"), result.stderr
            assert left == [], "a process the command left outlived its answer"
        assert any(not Path(f"/proc/{pid}").exists() for pid in waiting), "no warm child ran"
    finally:
        await client.close()


async def test_a_warm_init_killed_mid_command_ends_the_spawn_signaled(
    start_daemon: Callable[..., Daemon], marker: str
) -> None:
    async with _warm_sleep(start_daemon, marker) as (_, client, run, init):
        os.kill(init, signal.SIGKILL)
        result = await asyncio.wait_for(run, 10)
        # No exit record: the init's status (SIGKILL) is the command's.
        assert outcome(result) == "SIGNALED", result.exited.message
        assert result.exited.signal == signal.SIGKILL
        assert _alive(processes_with(marker)) == []
        assert (await client.run("echo", "again")).stdout == b"again\n"


async def test_a_spawner_killed_mid_spawn_ends_the_warm_spawn_spawn_failed(
    start_daemon: Callable[..., Daemon], marker: str
) -> None:
    async with _warm_sleep(start_daemon, marker) as (daemon, client, run, _):
        os.kill(spawner_pid(daemon), signal.SIGKILL)
        result = await asyncio.wait_for(run, 10)
        assert outcome(result) == "SPAWN_FAILED", result.exited.message
        assert result.exited.failed_step == "spawner"
        deadline = time.monotonic() + 5
        while _alive(processes_with(marker)) and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        assert _alive(processes_with(marker)) == []
        assert (await client.run("echo", "again")).stdout == b"again\n"
