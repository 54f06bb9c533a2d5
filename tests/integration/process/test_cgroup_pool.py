"""Spawn cgroups made ahead of need (hostcapd.process.cgroup_pool): a fresh
spawn runs in a `ready-<id>` cgroup its runtime made before the request,
limited with the request's own limits when taken, removed when it ends and
never used again (with recycling off: test_cgroup_recycling.py); the untaken ones are unlimited, so the sandboxed command
must not be able to move itself into one; none outlives the daemon."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import time
from collections.abc import Callable
from pathlib import Path

from hostcap_proto.v1 import process_pb2
from support.daemon import Daemon
from support.process import Client, outcome, request

CGROUP_ROOT = Path("/sys/fs/cgroup")
MEMORY = 96 << 20
PIDS = 24


def _ready(daemon: Daemon, tenant: str) -> dict[str, list[Path]]:
    """The tenant's ready-<id> cgroups in the memory and pids hierarchies, by
    id: in the daemon's subtree, `<its own cgroup>/<cgroup_parent>`."""
    parent = daemon.config["daemon"]["cgroup_parent"]
    found: dict[str, list[Path]] = {}
    for controller in ("memory", "pids"):
        own = _cgroup_of(daemon.pid, controller)
        with contextlib.suppress(FileNotFoundError):
            for entry in os.scandir(own / parent / f"tenant-{tenant}"):
                if entry.name.startswith("ready-"):
                    found.setdefault(entry.name.removeprefix("ready-"), []).append(Path(entry.path))
    return found


async def _wait(check: Callable[[], bool], what: str, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout} s: {what}")
        await asyncio.sleep(0.02)


def _cgroup_of(pid: int, controller: str) -> Path:
    for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        if controller in controllers.split(","):
            return CGROUP_ROOT / controller / path.lstrip("/")
    raise AssertionError(f"process {pid} is in no {controller} cgroup")


async def _detached(client: Client, *argv: str) -> process_pb2.Started:
    result = await client.stub.Run(
        request(list(argv), detached=True, limits={"memory_bytes": MEMORY, "pids": PIDS})
    )
    assert result.started.spawn_id and result.started.pid, result
    return result.started


async def test_a_fresh_spawn_runs_in_a_cgroup_made_ahead_limited_for_it_and_used_once(
    start_daemon: Callable[..., Daemon],
) -> None:
    # One cgroup a spawn (test_cgroup_recycling.py: recycled, the default).
    daemon = start_daemon(
        tenants={"dev": {"warm_spawns": 0}}, daemon={"recycle_spawn_cgroups": False}
    )
    client = Client(daemon.socket_of("dev"))
    try:
        await _wait(lambda: len(_ready(daemon, "dev")) == 2, "two cgroups made ahead")
        before = _ready(daemon, "dev")
        started = await _detached(client, "sleep", "30")
        spawn_id = started.spawn_id
        # It took one made before its request, as its own id, with its own limits.
        assert spawn_id in before
        memory = _cgroup_of(started.pid, "memory")
        assert memory.name == f"ready-{spawn_id}"
        assert int((memory / "memory.limit_in_bytes").read_text()) == MEMORY
        assert (_cgroup_of(started.pid, "pids") / "pids.max").read_text().strip() == str(PIDS)
        # The pool is made whole again; the one it keeps waiting is empty.
        await _wait(lambda: len(_ready(daemon, "dev")) == 3, "the pool refilled")
        for other, paths in _ready(daemon, "dev").items():
            if other != spawn_id:
                assert all(not (p / "cgroup.procs").read_text().split() for p in paths)
        stub = client.stub
        await stub.Signal(process_pb2.SignalRequest(spawn_id=spawn_id, signal=9))
        # Removed when it ends: never given to another spawn.
        await _wait(lambda: spawn_id not in _ready(daemon, "dev"), "its cgroup removed")
        second = await _detached(client, "sleep", "30")
        assert second.spawn_id != spawn_id
        assert _cgroup_of(second.pid, "memory").name == f"ready-{second.spawn_id}"
        await stub.Signal(process_pb2.SignalRequest(spawn_id=second.spawn_id, signal=9))
    finally:
        await client.close()


#: Runs inside the sandbox: tries to write itself (0) into each cgroup.procs given.
ESCAPE = r"""
import errno, json, sys
out = {}
for path in sys.argv[1:]:
    try:
        with open(path, "w") as f:
            f.write("0")
        out[path] = "ok"
    except OSError as e:
        out[path] = errno.errorcode.get(e.errno, str(e.errno))
print(json.dumps(out))
"""


async def test_a_sandboxed_command_cannot_move_itself_into_an_unlimited_ready_cgroup(
    start_daemon: Callable[..., Daemon],
) -> None:
    daemon = start_daemon(tenants={"dev": {"warm_spawns": 0}})
    client = Client(daemon.socket_of("dev"))
    try:
        await _wait(lambda: len(_ready(daemon, "dev")) == 2, "two cgroups made ahead")
        targets = [
            str(path / "cgroup.procs") for paths in _ready(daemon, "dev").values() for path in paths
        ]
        result = await client.run("python3", "-c", ESCAPE, *targets)
        assert outcome(result) == "EXITED", result.exited.message
        attempts = json.loads(result.stdout)
        assert set(attempts) == set(targets)
        assert "ok" not in attempts.values(), attempts
    finally:
        await client.close()


async def test_stopping_the_daemon_leaves_no_cgroup_made_ahead(
    start_daemon: Callable[..., Daemon],
) -> None:
    daemon = start_daemon(tenants={"dev": {"warm_spawns": 0}})
    await _wait(lambda: len(_ready(daemon, "dev")) == 2, "two cgroups made ahead")
    paths = [p for ps in _ready(daemon, "dev").values() for p in ps]
    assert daemon.stop() == 0
    assert not [p for p in paths if p.exists()], "a cgroup made ahead outlived the daemon"
