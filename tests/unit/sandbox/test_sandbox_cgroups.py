"""cgroups: real cgroups on this host; processes in them OOM, fork-bomb and get killed."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from hostcapd.sandbox import cgroups
from sandbox_attempts import run_through_setup, start_in_cgroup

MiB = 1 << 20
pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="cgroups need root")
PROBED = cgroups.CgroupHost.probe()
if not PROBED.support.version:
    pytestmark = pytest.mark.skip(reason=f"no usable cgroups: {PROBED.support.reason}")


def _kill_modes() -> list[str]:
    modes = ["auto"]
    if PROBED.support.version == "v1" and Path("/sys/fs/cgroup/freezer").is_dir():
        modes.append("freezer")
    return modes


def _host(parent: str, kill_mode: str = "auto") -> cgroups.CgroupHost:
    return cgroups.CgroupHost.probe(parent, unified_kill=kill_mode == "auto")


@pytest.fixture(params=_kill_modes())
def kill_mode(request: pytest.FixtureRequest) -> str:
    """ "auto" (cgroup.kill where there is one) and, on a v1 host, "freezer"."""
    mode: str = request.param
    return mode


@pytest.fixture
def host(kill_mode: str) -> Iterator[cgroups.CgroupHost]:
    """A prepared host whose subtree is private to this test (the real daemon's is
    `hostcapd`); swept and removed afterwards."""
    parent = f"hostcapd-test-{uuid.uuid4().hex[:12]}"
    prepared = _host(parent, kill_mode)
    prepared.prepare()
    yield prepared
    prepared.close()  # the subtrees' fds its creates opened
    prepared.sweep_stale()
    for h in prepared.hierarchies:
        with contextlib.suppress(FileNotFoundError):
            h.subtree.rmdir()


def wait_until(condition: object, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():  # type: ignore[operator]
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.01)


def alive(pid: int) -> bool:
    """Running (not gone, not a zombie)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"


def test_probe_detects_this_hosts_layout() -> None:
    mountinfo = Path("/proc/self/mountinfo").read_text()
    pure_v2 = any(
        " /sys/fs/cgroup " in line and " - cgroup2 " in line for line in mountinfo.splitlines()
    )
    assert PROBED.support.version == ("v2" if pure_v2 else "v1")
    assert {"memory", "pids"} <= set(PROBED.support.controllers)
    roles = {role for h in PROBED.hierarchies for role in h.roles}
    assert {"memory", "pids"} <= roles
    assert "kill" in roles or "freezer" in roles or PROBED.support.version == "v1"
    for h in PROBED.hierarchies:
        assert h.subtree == h.own / cgroups.SUBTREE
        assert str(h.own).startswith(str(h.mount))


def test_parent_names_the_subtree_and_bad_ones_are_refused() -> None:
    relative = cgroups.CgroupHost.probe("tests/a")
    absolute = cgroups.CgroupHost.probe("/elsewhere/b")
    for h, r, a in zip(PROBED.hierarchies, relative.hierarchies, absolute.hierarchies, strict=True):
        assert r.subtree == h.own / "tests" / "a"
        assert a.subtree == h.mount / "elsewhere" / "b"
    for bad in ("../escape", "a/../../b", "/", "a b"):
        with pytest.raises(cgroups.CgroupError, match="not a plain cgroup path"):
            cgroups.CgroupHost.probe(bad)


def test_create_needs_prepare() -> None:
    with pytest.raises(cgroups.CgroupError, match="prepare"):
        _host(f"hostcapd-test-{uuid.uuid4().hex[:12]}").create("x", None, None)


def test_a_process_allocating_past_the_memory_limit_is_oom_killed(
    host: cgroups.CgroupHost,
) -> None:
    limit = 64 * MiB
    cg = host.create("oom", memory_bytes=limit, pids=64)
    child = start_in_cgroup(cg.procs_fds(), "allocate", str(512 * MiB))
    assert child.wait(timeout=60) == -signal.SIGKILL
    assert child.stdout is not None and child.stdout.read() == ""
    stats = cg.stats()
    assert stats.oom_kills >= 1
    assert stats.peak_memory_bytes is not None
    assert limit * 3 // 4 <= stats.peak_memory_bytes <= limit
    cg.remove()


def test_a_cgroup_made_ahead_takes_its_limits_when_taken_and_its_stats_are_read_fresh(
    host: cgroups.CgroupHost,
) -> None:
    """The pool's way (hostcapd.process.cgroup_pool): made unlimited with its
    stat files opened, limited when a spawn takes it; the stats read through
    the files opened before anything ran are the ones the OOM left."""
    limit = 64 * MiB
    cg = host.create("ahead", memory_bytes=None, pids=None, ahead=True)
    cg.open_stats()
    before = cg.stats()
    assert before.oom_kills == 0 and before.pids_refused == 0
    host.set_limits(cg, limit, 64)
    child = start_in_cgroup(cg.procs_fds(), "allocate", str(512 * MiB))
    assert child.wait(timeout=60) == -signal.SIGKILL
    stats = cg.stats()
    assert stats.oom_kills >= 1
    assert stats.peak_memory_bytes is not None
    assert limit * 3 // 4 <= stats.peak_memory_bytes <= limit
    # The same as a fresh open of each file reads.
    assert cgroups.SpawnCgroup(cg.name, cg._members).stats() == stats
    cg.remove()
    assert not any(d.exists() for d in cg.directories)


def test_a_fork_bomb_is_contained_by_the_pids_limit(host: cgroups.CgroupHost) -> None:
    cg = host.create("forkbomb", memory_bytes=1024 * MiB, pids=32)
    bomb = start_in_cgroup(cg.procs_fds(), "forkbomb")
    try:
        wait_until(lambda: cg.stats().pids_refused > 0)
        assert len(cg.pids()) <= 32
        wait_until(lambda: cg.stats().pids_refused > 20)
        assert len(cg.pids()) <= 32
    finally:
        cg.kill()
    assert bomb.wait(timeout=10) == -signal.SIGKILL
    assert cg.pids() == []
    cg.remove()


@pytest.mark.parametrize("final", [False, True])
def test_a_recycled_cgroups_next_figures_are_its_own_whenever_its_stats_were_read(
    host: cgroups.CgroupHost, final: bool
) -> None:
    """`recycle` takes the counters `stats` read as its next base only when
    its caller said the tree was gone then (`final`): read while the fork
    bomb still ran (not final), forks refused after that read are not the
    next spawn's; read after the kill (final), the base is what was read."""
    cg = host.create("recycled", memory_bytes=1024 * MiB, pids=16)
    pids_at = cg.role_at("pids")
    assert pids_at is not None
    bomb = start_in_cgroup(cg.procs_fds(), "forkbomb")
    try:
        wait_until(lambda: cg.stats().pids_refused > 0)
        if not final:
            first = cg.stats()  # while it runs: more are refused after this read
            pids_events = Path(pids_at[3], "pids.events")
            wait_until(lambda: int(pids_events.read_text().split()[1]) > first.pids_refused + 100)
    finally:
        cg.kill()
    assert bomb.wait(timeout=10) == -signal.SIGKILL
    # Every process reaped (the bomb's orphans by whoever adopted them), as
    # after a pid namespace's init.
    wait_until(lambda: Path(pids_at[3], "pids.current").read_text().strip() == "0")
    if final:
        first = cg.stats(final=True)
        assert first.pids_refused > 0
    assert cg.recycle(64 * MiB)  # (its leftover charge is not what this test is about)
    assert cg.stats() == cgroups.CgroupStats(cg.stats().peak_memory_bytes, 0, 0)
    # A next spawn's own refused forks count from zero.
    again = start_in_cgroup(cg.procs_fds(), "forkbomb")
    try:
        wait_until(lambda: cg.stats().pids_refused > 0)
        assert cg.stats().pids_refused < first.pids_refused + 10_000
    finally:
        cg.kill()
    again.wait(timeout=10)
    cg.remove()


def test_kill_leaves_no_process(host: cgroups.CgroupHost) -> None:
    cg = host.create("tree", memory_bytes=None, pids=None)
    child = start_in_cgroup(cg.procs_fds(), "tree")
    assert child.stdout is not None and child.stdout.readline() == "tree\n"
    members = cg.pids()
    assert len(members) == 3  # the child, the SIGTERM-ignorer, the setsid grandchild
    cg.kill()
    assert cg.pids() == []
    assert child.wait(timeout=10) == -signal.SIGKILL
    assert [pid for pid in members if alive(pid)] == []
    cg.remove()
    assert not any(d.exists() for d in cg.directories)


def test_kill_without_waiting_still_ends_every_process(host: cgroups.CgroupHost) -> None:
    cg = host.create("nowait", memory_bytes=None, pids=None)
    child = start_in_cgroup(cg.procs_fds(), "tree")
    assert child.stdout is not None and child.stdout.readline() == "tree\n"
    cg.kill(wait=False)
    assert child.wait(timeout=10) == -signal.SIGKILL
    wait_until(lambda: cg.pids() == [])
    cg.remove()
    cg.kill()  # nothing left to kill: not an error


def test_remove_leaves_no_directory_and_is_idempotent(host: cgroups.CgroupHost) -> None:
    cg = host.create("empty", memory_bytes=32 * MiB, pids=8)
    assert all(d.is_dir() for d in cg.directories)
    assert len(cg.directories) == len(host.hierarchies)
    cg.remove()
    assert not any(d.exists() for d in cg.directories)
    cg.remove()


def test_remove_refuses_while_processes_live_then_succeeds(host: cgroups.CgroupHost) -> None:
    cg = host.create("busy", memory_bytes=None, pids=None)
    child = start_in_cgroup(cg.procs_fds(), "sleep")
    with pytest.raises(cgroups.CgroupError, match="busy"):
        cg.remove(timeout=0.05)
    assert child.poll() is None
    cg.kill()
    child.wait(timeout=10)
    cg.remove()
    assert not any(d.exists() for d in cg.directories)


@pytest.mark.usefixtures("no_fd_leak")
def test_a_spawn_cgroup_is_made_used_and_removed_through_its_parents_fds(
    host: cgroups.CgroupHost,
) -> None:
    cg = host.create("relative", memory_bytes=16 * MiB, pids=4)
    parents = [fd for fd, _ in cg.at]
    # Each directory is made beneath its hierarchy's subtree, through the
    # view's O_PATH fd of that subtree, and named relative to it.
    for (fd, leaf), h, directory in zip(cg.at, host.hierarchies, cg.directories, strict=True):
        assert fd is not None and os.readlink(f"/proc/self/fd/{fd}") == os.fspath(h.subtree)
        assert leaf == directory.name and directory.is_dir()
    memory = cg._role("memory")
    assert memory is not None
    limit = "memory.max" if memory[0] == 2 else "memory.limit_in_bytes"
    assert int((Path(memory[1]) / limit).read_text()) == 16 * MiB
    cg.open_stats()
    host.close()  # the view lets go; the cgroup keeps its parents' fds
    for fd in parents:
        os.fstat(fd)
    procs = cg.procs_fds()
    for fd in procs:
        os.close(fd)
    assert cg.stats().oom_kills == 0
    cg.remove()
    assert not any(d.exists() for d in cg.directories)
    del cg  # the last holder: the parents' fds close (no_fd_leak checks)


def test_procs_fds_are_write_only_and_close_on_exec(host: cgroups.CgroupHost) -> None:
    import fcntl

    cg = host.create("fds", memory_bytes=None, pids=None)
    fds = cg.procs_fds()
    try:
        assert len(fds) == len(cg.directories)
        for fd in fds:
            assert fcntl.fcntl(fd, fcntl.F_GETFD) & fcntl.FD_CLOEXEC
            assert fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_ACCMODE == os.O_WRONLY
    finally:
        for fd in fds:
            os.close(fd)
        cg.remove()


@pytest.mark.usefixtures("no_fd_leak")
def test_bad_requests_are_refused_and_leave_nothing(host: cgroups.CgroupHost) -> None:
    for name, memory, pids in (
        ("../x", None, None),
        ("", None, None),
        ("a/b", None, None),
        ("ok", 0, None),
        ("ok", None, -1),
    ):
        with pytest.raises(cgroups.CgroupError):
            host.create(name, memory, pids)
    assert not any(
        p.name.startswith(cgroups.SPAWN_PREFIX)
        for h in host.hierarchies
        for p in h.subtree.iterdir()
    )
    first = host.create("twice", memory_bytes=16 * MiB, pids=4)
    with pytest.raises(cgroups.CgroupError, match="already exists"):
        host.create("twice", memory_bytes=None, pids=None)
    assert all(d.is_dir() for d in first.directories)
    first.remove()


def test_a_failed_create_removes_what_it_made(host: cgroups.CgroupHost) -> None:
    # The last hierarchy's directory is in the way: the earlier ones must go again.
    last = host.hierarchies[-1].subtree / f"{cgroups.SPAWN_PREFIX}blocked"
    last.mkdir()
    try:
        with pytest.raises(cgroups.CgroupError, match="already exists"):
            host.create("blocked", memory_bytes=16 * MiB, pids=4)
        for h in host.hierarchies[:-1]:
            assert not (h.subtree / f"{cgroups.SPAWN_PREFIX}blocked").exists()
    finally:
        last.rmdir()


def test_sweep_stale_kills_and_removes_what_a_crashed_daemon_left(
    host: cgroups.CgroupHost, kill_mode: str
) -> None:
    left = [host.create(name, memory_bytes=None, pids=None) for name in ("a", "b")]
    children = [start_in_cgroup(cg.procs_fds(), "tree") for cg in left]
    assert all(c.stdout is not None and c.stdout.readline() == "tree\n" for c in children)
    members = [pid for cg in left for pid in cg.pids()]
    restarted = _host(host.hierarchies[0].subtree.name, kill_mode)
    restarted.prepare()
    assert restarted.sweep_stale() == 2
    assert [child.wait(timeout=10) for child in children] == [-signal.SIGKILL] * 2
    assert [pid for pid in members if alive(pid)] == []
    assert not any(d.exists() for cg in left for d in cg.directories)
    assert restarted.sweep_stale() == 0


def test_the_spawn_set_up_places_the_child_before_exec(host: cgroups.CgroupHost) -> None:
    """Through the C set-up: the child writes "0" into each fd before it execs."""
    cg = host.create("childsetup", memory_bytes=64 * MiB, pids=16)
    fds = cg.procs_fds()
    script = b"print(open('/proc/self/cgroup').read(), flush=True); b'x' * (256 << 20)"
    try:
        code, text = run_through_setup([sys.executable.encode(), b"-c", script], cgroup_fds=fds)
    finally:
        for fd in fds:
            os.close(fd)
    assert code == -signal.SIGKILL, text
    joined = {line.split(":", 2)[2] for line in text.splitlines() if line.count(":") >= 2}
    for h, directory in zip(host.hierarchies, cg.directories, strict=True):
        assert f"/{directory.relative_to(h.mount)}" in joined
    assert cg.stats().oom_kills >= 1
    cg.remove()


def test_repeated_create_and_remove_leaves_nothing(host: cgroups.CgroupHost) -> None:
    for i in range(20):
        cg = host.create(f"cost{i}", memory_bytes=64 * MiB, pids=32)
        for fd in cg.procs_fds():
            os.close(fd)
        cg.remove()
    assert [p for h in host.hierarchies for p in h.subtree.iterdir() if p.is_dir()] == []


def _limit_of(directory: Path) -> tuple[str, str]:
    """(memory limit, pids.max) of one hierarchy's directory ("" where not kept there)."""
    memory = ""
    for name in ("memory.max", "memory.limit_in_bytes"):
        if (directory / name).exists():
            memory = (directory / name).read_text().strip()
    pids = (directory / "pids.max").read_text().strip() if (directory / "pids.max").exists() else ""
    return memory, pids


def test_a_tenants_spawns_live_in_its_tenant_cgroup_under_its_ceilings(
    host: cgroups.CgroupHost,
) -> None:
    tenant = host.for_tenant("alpha", pids=64, memory_bytes=256 * MiB)
    cg = tenant.create("in-tenant", memory_bytes=64 * MiB, pids=32)
    try:
        for h, directory in zip(host.hierarchies, cg.directories, strict=True):
            assert directory.parent == h.subtree / f"{cgroups.TENANT_PREFIX}alpha"
        limits = {_limit_of(d.parent) for d in cg.directories} - {("", "")}
        assert limits <= {(str(256 * MiB), ""), ("", "64"), (str(256 * MiB), "64")}
        assert {m for m, _ in limits} - {""} and {p for _, p in limits} - {""}
        # A fork bomb in two spawns, each allowed 32, stops at the tenant's 64.
        other = tenant.create("in-tenant-2", memory_bytes=64 * MiB, pids=48)
        bombs = [start_in_cgroup(c.procs_fds(), "forkbomb") for c in (cg, other)]
        pids_dir = next(
            d.parent
            for h, d in zip(host.hierarchies, cg.directories, strict=True)
            if "pids" in h.roles
        )
        wait_until(lambda: int((pids_dir / "pids.current").read_text()) >= 60)
        time.sleep(0.3)
        assert int((pids_dir / "pids.current").read_text()) <= 64
        for c in (cg, other):
            c.kill()
        for bomb in bombs:
            bomb.wait(timeout=10)
        other.remove()
    finally:
        cg.kill()
        cg.remove()


def test_a_tenants_ceilings_are_raised_and_lowered_in_place(host: cgroups.CgroupHost) -> None:
    # A reload may raise a limit: v1 keeps memory <= memory+swap, so that order matters.
    for memory, pids in ((64 * MiB, 16), (1 << 30, 4096), (128 * MiB, 32)):
        tenant = host.for_tenant("beta", pids=pids, memory_bytes=memory)
        directory = tenant.hierarchies[0].subtree
        assert directory.name == f"{cgroups.TENANT_PREFIX}beta"
        seen = {_limit_of(h.subtree) for h in tenant.hierarchies} - {("", "")}
        assert (str(memory), "") in seen or (str(memory), str(pids)) in seen, seen
        assert ("", str(pids)) in seen or (str(memory), str(pids)) in seen, seen


def test_a_front_end_cgroup_takes_a_process_and_keeps_its_limits(
    host: cgroups.CgroupHost,
) -> None:
    side = host.frontend("gamma", pids=8, memory_bytes=64 * MiB)
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        side.place(child.pid)
        for directory in side.directories:
            assert str(child.pid) in (directory / "cgroup.procs").read_text().split()
        assert {_limit_of(d) for d in side.directories} - {("", "")}
    finally:
        child.kill()
        child.wait()


def test_sweep_stale_reaches_into_tenants_and_front_ends(
    host: cgroups.CgroupHost, kill_mode: str
) -> None:
    tenant = host.for_tenant("delta", pids=64, memory_bytes=256 * MiB)
    left = [tenant.create(name, memory_bytes=None, pids=None) for name in ("a", "b")]
    children = [start_in_cgroup(cg.procs_fds(), "tree") for cg in left]
    # Made ahead for a fresh spawn (the pool's), one taken and running, one not.
    ready = [tenant.create(name, memory_bytes=None, pids=None, ahead=True) for name in "cd"]
    assert all(d.name.startswith(cgroups.READY_PREFIX) for cg in ready for d in cg.directories)
    children.append(start_in_cgroup(ready[0].procs_fds(), "tree"))
    side = host.frontend("delta", pids=16, memory_bytes=64 * MiB)
    front = start_in_cgroup(side.procs_fds(), "tree")
    assert all(c.stdout is not None and c.stdout.readline() == "tree\n" for c in [*children, front])
    restarted = _host(host.hierarchies[0].subtree.name, kill_mode)
    restarted.prepare()
    assert restarted.sweep_stale() == 4  # spawns; the front-end's cgroup is swept too
    assert [c.wait(timeout=10) for c in [*children, front]] == [-signal.SIGKILL] * 4
    for h in host.hierarchies:
        assert [p.name for p in h.subtree.iterdir() if p.is_dir()] == []
