"""The forker (childsetup_c/forker.c), which clones the inits: every init
reports, a forker gone is replaced, a failed clone is the clone's error, a
step that fails is told wherever it fails (in the init or the command's
process, cloned by the forker or by the caller), and the command runs with
the caller's CPU affinity (the init is born pinned to the caller's CPU)."""

from __future__ import annotations

import dataclasses
import errno
import os
import signal
import time

import pytest
from hostcapd import _childsetup, childsetup  # type: ignore[attr-defined]
from hostcapd.spawner import init_report
from support.childplans import bare_plan

CLONE_NEWPID = 0x20000000
CLONE_SIGHAND = 0x00000800

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="a pid namespace needs root")

BASE = bare_plan(
    exe_path=b"/bin/sh",
    argv=[b"sh", b"-c", b"exit 3"],
    envp=[],
    clone_flags=CLONE_NEWPID,
    no_new_privs=True,
    pdeathsig=9,
    init=True,
)


def forkers() -> list[int]:
    """This process's children named hostcap-forker."""
    found = []
    for task in os.listdir("/proc/self/task"):
        with open(f"/proc/self/task/{task}/children") as f:
            for pid in f.read().split():
                try:
                    with open(f"/proc/{pid}/comm") as comm:
                        if comm.read().strip() == "hostcap-forker":
                            found.append(int(pid))
                except FileNotFoundError:
                    pass
    return found


def run(plan: childsetup.ChildPlan) -> tuple[int, init_report.CommandExit | None]:
    pid, report = childsetup.spawn(plan)
    _, status = os.waitpid(pid, 0)
    return status, init_report.read_and_close(report)


def test_every_init_is_cloned_by_one_forker_and_reports() -> None:
    for _ in range(20):
        status, command = run(BASE)
        assert os.waitstatus_to_exitcode(status) == 3
        assert command is not None and os.waitstatus_to_exitcode(command.status) == 3
    assert len(forkers()) == 1


def test_a_forker_killed_between_spawns_is_replaced() -> None:
    run(BASE)
    (old,) = forkers()
    os.kill(old, signal.SIGKILL)
    deadline = time.monotonic() + 5
    while os.path.exists(f"/proc/{old}/comm") and time.monotonic() < deadline:
        with open(f"/proc/{old}/stat") as f:
            if f.read().split(")")[-1].split()[0] == "Z":
                break
        time.sleep(0.01)
    status, command = run(BASE)
    assert os.waitstatus_to_exitcode(status) == 3 and command is not None
    (new,) = forkers()
    assert new != old


def test_a_clone_that_fails_is_the_clones_error() -> None:
    # CLONE_SIGHAND without CLONE_VM: clone(2) refuses it (EINVAL).
    bad = dataclasses.replace(BASE, clone_flags=CLONE_NEWPID | CLONE_SIGHAND)
    with pytest.raises(childsetup.SetupError) as raised:
        childsetup.spawn(bad)
    assert raised.value.args == ("clone", errno.EINVAL)
    # and nothing is left waiting: the next spawn runs.
    status, _ = run(BASE)
    assert os.waitstatus_to_exitcode(status) == 3


CLONE_NEWNS = 0x00020000


@pytest.mark.parametrize("forker", [True, False], ids=["the forker", "the caller clones"])
def test_a_step_that_fails_is_told_whoever_fails_it(forker: bool) -> None:
    was = _childsetup._use_forker(forker)
    try:
        # In the command's process (the exec) and in the init (a mount).
        missing = dataclasses.replace(BASE, exe_path=b"/nonexistent-hostcap", argv=[b"x"])
        with pytest.raises(childsetup.SetupError) as raised:
            childsetup.spawn(missing)
        assert raised.value.args == ("exec", errno.ENOENT)
        mount = (0, b"none", b"/nonexistent-hostcap/x", b"tmpfs", 0, None, 0)
        bad_mount = dataclasses.replace(
            BASE, clone_flags=CLONE_NEWPID | CLONE_NEWNS, mounts=[mount]
        )
        with pytest.raises(childsetup.SetupError) as raised:
            childsetup.spawn(bad_mount)
        assert raised.value.args == ("mount", errno.ENOENT)
        status, command = run(BASE)
        assert os.waitstatus_to_exitcode(status) == 3 and command is not None
    finally:
        _childsetup._use_forker(was)


@pytest.mark.parametrize("init", [True, False], ids=["under the init", "without one"])
def test_the_command_runs_with_the_callers_affinity(init: bool) -> None:
    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("one CPU: nothing to pin")
    r, w = os.pipe2(os.O_CLOEXEC)
    try:
        # A child of the command's process (born with its affinity) reads
        # its allowed CPUs (/proc is the host's here: no mount namespace).
        plan = dataclasses.replace(
            BASE,
            argv=[b"sh", b"-c", b"grep Cpus_allowed_list /proc/self/status"],
            stdio=(0, w, 2),
            **({} if init else {"clone_flags": 0, "init": False}),
        )
        if init:
            status, _ = run(plan)
        else:
            _, status = os.waitpid(childsetup.spawn(plan)[0], 0)
        os.close(w)
        out = os.read(r, 4096).decode()
    finally:
        os.close(r)
    assert os.waitstatus_to_exitcode(status) == 0
    cpus = sorted(os.sched_getaffinity(0))
    listed = out.split(":")[1].strip()
    assert listed in (f"{cpus[0]}-{cpus[-1]}", ",".join(map(str, cpus)))


def _anonymous_no_access(pid: int) -> list[str]:
    """pid's mappings with no access that map no file (guard pages, reserved
    malloc arenas)."""
    with open(f"/proc/{pid}/maps") as f:
        return [line for line in f if line.split()[1] == "---p" and line.split()[4] == "0"]


def test_the_forker_keeps_no_guard_pages_of_the_callers_threads() -> None:
    import threading

    # Threads that allocated: a stack with its guard page and a malloc arena
    # each, all mappings a fork of the caller would copy.
    ready, stop = threading.Barrier(5), threading.Event()

    def idle() -> None:
        keep = bytes(100_000).hex()
        ready.wait()
        stop.wait()
        del keep

    threads = [threading.Thread(target=idle) for _ in range(4)]
    for t in threads:
        t.start()
    try:
        ready.wait()
        assert _anonymous_no_access(os.getpid())
        was = _childsetup._forker_trim(True)  # a new forker, started now
        try:
            for _ in range(3):  # its inits run as before
                status, command = run(BASE)
                assert os.waitstatus_to_exitcode(status) == 3 and command is not None
            (forker,) = forkers()
            assert _anonymous_no_access(forker) == []
            _childsetup._forker_trim(False)  # the A/B's other arm: the forker as it was
            (untrimmed,) = forkers()
            assert untrimmed != forker and _anonymous_no_access(untrimmed)
            status, command = run(BASE)
            assert os.waitstatus_to_exitcode(status) == 3 and command is not None
        finally:
            _childsetup._forker_trim(was)
    finally:
        stop.set()
        for t in threads:
            t.join()


def _memory_holds(pid: int, needle: bytes) -> bool:
    """Whether any readable private mapping of `pid` holds `needle`."""
    found = False
    with open(f"/proc/{pid}/maps") as maps, open(f"/proc/{pid}/mem", "rb", buffering=0) as mem:
        for line in maps:
            fields = line.split()
            if fields[1][0] != "r" or (len(fields) > 5 and fields[5].startswith("[v")):
                continue
            start, end = (int(x, 16) for x in fields[0].split("-"))
            try:
                mem.seek(start)
                found = found or needle in mem.read(end - start)
            except OSError:
                continue
    return found


def test_no_init_holds_what_an_earlier_spawn_asked_for() -> None:
    # Every init is a copy of the forker's arena, which each plan overwrites
    # only as far as it reaches: an earlier, longer plan's argv (another
    # tenant's, in the daemon) stayed past the end of a shorter one's.
    run(BASE)  # the forker is started before the secret exists
    secret = os.urandom(16).hex().encode()
    longer = dataclasses.replace(BASE, argv=[b"sh", b"-c", b"exit 3", b"x" * 4096 + secret])
    status, command = run(longer)
    assert os.waitstatus_to_exitcode(status) == 3 and command is not None
    sleeper = dataclasses.replace(BASE, exe_path=b"/bin/sleep", argv=[b"sleep", b"30"])
    pid, report = childsetup.spawn(sleeper)
    try:
        deadline = time.monotonic() + 5  # the command exec'd: the init's memory is its own
        while True:
            assert time.monotonic() < deadline, "the command never ran"
            with open(f"/proc/{pid}/task/{pid}/children") as f:
                child = f.read().split()
            if child:
                with open(f"/proc/{child[0]}/comm") as f:
                    if f.read().strip() == "sleep":
                        break
            time.sleep(0.01)
        assert not _memory_holds(pid, secret)
        assert _memory_holds(os.getpid(), secret)  # the probe finds it where it is
    finally:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        init_report.read_and_close(report)
