"""A spawn's cgroup recycled for its runtime's next spawn
(hostcapd.process.cgroup_pool.Recycled, `daemon.recycle_spawn_cgroups`, on
by default): the next spawn's figures (memory peak, CPU, OOM kills, refused
forks) are its own, nothing of the previous spawn is left in it, its own
limits are the ones enforced, it has an id of its own, and the cgroups kept
are bounded and removed with the daemon. Each test first checks that the
cgroup was in fact the same one (else it would prove nothing)."""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hostcap_proto.v1 import common_pb2, process_pb2
from hostcapd.process.cgroup_pool import KEEP
from support.daemon import Daemon, audit_records
from support.process import Client, outcome, request

MiB = 1 << 20
CGROUP_ROOT = Path("/sys/fs/cgroup")

#: Prints its memory cgroup, then allocates and touches `sys.argv[1]` MiB and
#: burns `sys.argv[2]` s of CPU.
HEAVY = r"""
import sys, time
print([l for l in open("/proc/self/cgroup").read().splitlines() if ":memory:" in l][0], flush=True)
b = bytearray(int(sys.argv[1]) << 20)
for i in range(0, len(b), 4096):
    b[i] = 1
end = time.process_time() + float(sys.argv[2])
while time.process_time() < end:
    pass
"""
#: Prints its memory cgroup (nothing else: a small figure after a heavy one).
WHERE = "grep :memory: /proc/self/cgroup"


def _where(result: Any) -> str:
    line = result.stdout.decode().splitlines()[0]
    assert ":memory:" in line, result
    return line


def _tenant_dir(daemon: Daemon, controller: str, tenant: str = "dev") -> Path:
    for line in Path(f"/proc/{daemon.pid}/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        if controller in controllers.split(","):
            parent = daemon.config["daemon"]["cgroup_parent"]
            return CGROUP_ROOT / controller / path.lstrip("/") / parent / f"tenant-{tenant}"
    raise AssertionError(f"the daemon is in no {controller} cgroup")


def _spawn_cgroups(daemon: Daemon, controller: str = "memory") -> list[Path]:
    with contextlib.suppress(FileNotFoundError):
        return [Path(e.path) for e in os.scandir(_tenant_dir(daemon, controller)) if e.is_dir()]
    return []


async def _run(client: Client, *argv: str, **kwargs: Any) -> Any:
    result = await client.run(*argv, **kwargs)
    # Its cgroup is recycled a turn of the root's loop after the answer left
    # (a margin for a loaded host: a late recycle fails the same-cgroup checks).
    await asyncio.sleep(0.25)
    return result


async def test_a_spawn_in_a_recycled_cgroup_reports_its_own_figures(
    start_daemon: Callable[..., Daemon],
) -> None:
    daemon = start_daemon(tenants={"dev": {"warm_spawns": 0}})
    client = Client(daemon.socket_of("dev"))
    try:
        heavy = await _run(client, "python3", "-c", HEAVY, "96", "0.5")
        assert outcome(heavy) == "EXITED", heavy.exited.message
        assert heavy.exited.peak_memory_bytes >= 96 * MiB
        assert heavy.exited.rusage.user_seconds + heavy.exited.rusage.system_seconds >= 0.4
        small = await _run(client, "sh", "-c", WHERE)
        assert outcome(small) == "EXITED", small.exited.message
        assert _where(small) == _where(heavy), "not recycled: this test proves nothing"
        # Its own figures, not the heavy one's before it in the same cgroup.
        assert small.exited.peak_memory_bytes < 8 * MiB, small.exited
        assert small.exited.rusage.max_rss_bytes < 8 * MiB
        assert small.exited.rusage.user_seconds + small.exited.rusage.system_seconds < 0.2
        # An id of its own: the cgroup's name is not its id.
        ids = [heavy.started.spawn_id, small.started.spawn_id]
        assert ids[0] != ids[1]
        records = {
            r["spawn_id"]: r
            for r in audit_records(daemon.audit_path)
            if r["event"] == "process.exit"
        }
        assert records[ids[1]]["peak_memory_bytes"] == small.exited.peak_memory_bytes
        assert records[ids[0]]["peak_memory_bytes"] == heavy.exited.peak_memory_bytes
    finally:
        await client.close()


#: Leaves a grandchild behind (its own session, a double fork) that would
#: outlive the spawn, marked by its argument.
ESCAPER = "setsid sh -c 'sleep 30.0{mark} & exit 0' & sleep 0.2; echo left"


def _marked(mark: str) -> list[int]:
    """Host processes whose command line is `sleep 30.0<mark>`."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError):
                if (
                    Path(f"/proc/{entry}/cmdline").read_bytes()
                    == f"sleep\0{'30.0' + mark}\0".encode()
                ):
                    found.append(int(entry))
    return found


@pytest.mark.parametrize(
    "sandbox", [{}, {"pid_namespace": "off"}], ids=["init-as-pid-1", "no-pid-namespace"]
)
async def test_nothing_of_a_spawn_is_left_in_the_cgroup_its_next_spawn_gets(
    start_daemon: Callable[..., Daemon], sandbox: dict[str, str]
) -> None:
    daemon = start_daemon(tenants={"dev": {"warm_spawns": 0, "sandbox": sandbox}})
    client = Client(daemon.socket_of("dev"))
    mark = str(os.getpid() % 1000 + 1)
    recycled = 0
    try:
        # Without a pid namespace the grandchild, killed by the spawn's kill
        # sweep, may not be reaped yet when the spawn ends: its cgroup then
        # still counts it (pids.current) and is removed, not recycled. Tried
        # a few times: at least one must be recycled to prove anything.
        for _ in range(5):
            recycled += await _leftover_round(client, mark)
            if recycled:
                break
        assert recycled, "never recycled: this test proves nothing"
    finally:
        await client.close()


async def _leftover_round(client: Client, mark: str) -> int:
    """A spawn that leaves a grandchild behind, then one more: 1 if the
    second ran in the first's cgroup (checked to hold nothing of the first)."""
    # Detached, so its cgroup is read from here while it runs.
    first = await _detached(client, f"{ESCAPER.format(mark=mark)}; sleep 0.3")
    where = _cgroup_of(first.pid, "memory")
    ended = await _ended(client, first.spawn_id)
    assert ended.exited.outcome == common_pb2.Outcome.EXITED, ended
    assert b"left" in ended.stdout
    await asyncio.sleep(0.05)
    assert not _marked(mark), "the grandchild outlived its spawn"
    second = await _detached(client, "sleep 30")
    try:
        if _cgroup_of(second.pid, "memory") != where:
            return 0
        for controller in ("memory", "pids"):
            members = (_cgroup_of(second.pid, controller) / "cgroup.procs").read_text()
            for pid in map(int, members.split()):
                cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
                assert b"30.0" not in cmdline, (controller, pid, cmdline)
        assert not _marked(mark)
        return 1
    finally:
        await client.stub.Signal(process_pb2.SignalRequest(spawn_id=second.spawn_id, signal=9))
        await _ended(client, second.spawn_id)


async def _detached(client: Client, script: str) -> process_pb2.Started:
    result = await client.stub.Run(request(["sh", "-c", script], detached=True))
    assert result.started.spawn_id and result.started.pid, result
    started: process_pb2.Started = result.started
    return started


async def _ended(client: Client, spawn_id: str) -> process_pb2.ReadOutputResponse:
    """A detached spawn's output and end, once it has ended."""
    stdout, offset = b"", 0
    for _ in range(100):
        answer = await client.stub.ReadOutput(
            process_pb2.ReadOutputRequest(spawn_id=spawn_id, offset=offset, wait_ms=500)
        )
        stdout, offset = stdout + answer.stdout, answer.next_offset
        if not answer.running:
            answer.stdout = stdout
            return answer  # type: ignore[no-any-return]
    raise AssertionError(f"spawn {spawn_id} did not end")


def _cgroup_of(pid: int, controller: str) -> Path:
    for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        if controller in controllers.split(","):
            return CGROUP_ROOT / controller / path.lstrip("/")
    raise AssertionError(f"process {pid} is in no {controller} cgroup")


async def test_the_next_spawns_own_memory_limit_is_enforced_and_its_oom_kills_its_own(
    start_daemon: Callable[..., Daemon],
) -> None:
    daemon = start_daemon(tenants={"dev": {"warm_spawns": 0}})
    client = Client(daemon.socket_of("dev"))
    try:
        roomy = await _run(
            client, "python3", "-c", HEAVY, "100", "0", limits={"memory_bytes": 256 * MiB}
        )
        assert outcome(roomy) == "EXITED", roomy.exited.message
        # A tighter limit in the same cgroup: the one enforced.
        tight = await _run(
            client, "python3", "-c", HEAVY, "64", "0", limits={"memory_bytes": 32 * MiB}
        )
        assert _where(tight) == _where(roomy), "not recycled: this test proves nothing"
        assert outcome(tight) == "MEMORY_LIMIT", tight.exited.message
        assert tight.exited.oom_kills >= 1
        # Raised again: the next one runs, and the OOM kill is not its.
        again = await _run(
            client, "python3", "-c", HEAVY, "100", "0", limits={"memory_bytes": 256 * MiB}
        )
        assert _where(again) == _where(roomy), "not recycled: this test proves nothing"
        assert outcome(again) == "EXITED", again.exited.message
        assert again.exited.oom_kills == 0
    finally:
        await client.close()


async def test_refused_forks_count_for_their_own_spawn_only(
    start_daemon: Callable[..., Daemon],
) -> None:
    daemon = start_daemon(tenants={"dev": {"warm_spawns": 0}})
    client = Client(daemon.socket_of("dev"))
    try:
        forks = "for i in 1 2 3 4 5 6 7 8; do sleep 1 & done; wait"
        crowded = await _run(client, "sh", "-c", f"{WHERE}; {forks}", limits={"pids": 4})
        assert outcome(crowded) == "PIDS_LIMIT", crowded.exited.message
        # In the same cgroup, a command that fails without forking too many:
        # its own failure, not a refused fork of the one before.
        failing = await _run(client, "sh", "-c", f"{WHERE}; exit 3", limits={"pids": 4})
        assert _where(failing) == _where(crowded), "not recycled: this test proves nothing"
        assert outcome(failing) == "EXITED", failing.exited.message
        assert failing.exited.exit_code == 3
    finally:
        await client.close()


async def test_recycled_cgroups_are_bounded_and_none_outlives_the_daemon(
    start_daemon: Callable[..., Daemon],
) -> None:
    daemon = start_daemon(tenants={"dev": {"warm_spawns": 0}})
    client = Client(daemon.socket_of("dev"))
    try:
        many = KEEP + 6
        results = await asyncio.gather(*(client.run("sleep", "0.5") for _ in range(many)))
        assert all(outcome(r) == "EXITED" for r in results)
        await asyncio.sleep(0.3)
        # At most KEEP recycled, and the pool's two made ahead.
        left = _spawn_cgroups(daemon)
        assert KEEP <= len(left) <= KEEP + 2, left
        for path in left:
            assert not (path / "cgroup.procs").read_text().split()
        again = await _run(client, "sh", "-c", WHERE)
        assert any(p.name in _where(again) for p in left)
    finally:
        await client.close()
    paths = _spawn_cgroups(daemon) + _spawn_cgroups(daemon, "pids")
    assert paths
    assert daemon.stop() == 0
    assert not [p for p in paths if p.exists()], "a recycled cgroup outlived the daemon"


async def test_with_recycling_off_each_spawn_has_a_cgroup_of_its_own(
    start_daemon: Callable[..., Daemon],
) -> None:
    daemon = start_daemon(
        tenants={"dev": {"warm_spawns": 0}}, daemon={"recycle_spawn_cgroups": False}
    )
    client = Client(daemon.socket_of("dev"))
    try:
        seen = [_where(await _run(client, "sh", "-c", WHERE)) for _ in range(4)]
        assert len(set(seen)) == 4, seen
    finally:
        await client.close()


async def test_no_cgroup_is_recycled_where_file_changes_are_attributed(
    start_daemon: Callable[..., Daemon],
) -> None:
    # Their fallback names a spawn by its cgroup (sandbox/fschanges/attribution.py).
    daemon = start_daemon(tenants={"dev": {"warm_spawns": 0, "disk": {"budget_bytes": 64 * MiB}}})
    client = Client(daemon.socket_of("dev"))
    try:
        first = await _run(client, "sh", "-c", f"{WHERE}; echo x > made.txt")
        assert outcome(first) == "EXITED", first.exited.message
        records = [
            r
            for r in audit_records(daemon.audit_path)
            if r["event"] == "fs.changes" and r["spawn_id"] == first.started.spawn_id
        ]
        assert records, "the file changes are not attributed: this test proves nothing"
        seen = {_where(first)} | {_where(await _run(client, "sh", "-c", WHERE)) for _ in range(3)}
        assert len(seen) == 4, seen
    finally:
        await client.close()


async def test_a_warm_childs_cgroup_refusing_the_memory_limit_gives_way_to_a_new_one(
    start_daemon: Callable[..., Daemon],
) -> None:
    # A warm child waits in a recycled cgroup; a request's memory limit
    # below what is charged to it (v1 refuses a limit it cannot reclaim to)
    # runs as a fresh spawn would (the set-up steps after the cgroup's), in
    # a new cgroup: the old one and its child are gone, nothing is left.
    daemon = start_daemon(tenants={"dev": {"warm_spawns": 1}})
    client = Client(daemon.socket_of("dev"))
    try:
        served: set[str] = set()
        waiting: list[Path] = []
        for _ in range(10):
            served.add(_where(await _run(client, "sh", "-c", WHERE)).rsplit("/", 1)[1])
            await asyncio.sleep(0.2)
            waiting = [p for p in _spawn_cgroups(daemon) if (p / "cgroup.procs").read_text()]
            if len(waiting) == 1 and waiting[0].name in served:
                break
        assert len(waiting) == 1 and waiting[0].name in served, "no warm child in a recycled one"
        (old,) = waiting
        old_procs = [int(pid) for pid in (old / "cgroup.procs").read_text().split()]
        # Below what its child, set up, has charged to it (50-500 KiB).
        tiny = 8 * 1024
        usage = old / "memory.usage_in_bytes"
        for _ in range(50):
            if int(usage.read_text()) > 4 * tiny:
                break
            await asyncio.sleep(0.05)
        assert int(usage.read_text()) > 4 * tiny, "its child is not set up: this proves nothing"
        result = await _run(client, "true", limits={"memory_bytes": tiny})
        step = result.exited.failed_step
        # Not refused at its cgroup (as before): a fresh child's, too small to run.
        assert (outcome(result), step) in {("SPAWN_FAILED", "init"), ("MEMORY_LIMIT", "")}, (
            result.exited
        )
        spawn_id = result.started.spawn_id
        records = [r for r in audit_records(daemon.audit_path) if r.get("spawn_id") == spawn_id]
        assert [r["event"] for r in records] == ["process.exec", "process.exit"]
        assert records[1]["outcome"] == outcome(result)
        await asyncio.sleep(0.2)
        assert not old.exists(), "the warm child's cgroup outlived it"
        assert not [pid for pid in old_procs if Path(f"/proc/{pid}").exists()]
        # The pool goes on: a next spawn runs.
        after = await _run(client, "sh", "-c", WHERE)
        assert outcome(after) == "EXITED", after.exited.message
    finally:
        await client.close()
