"""The spawner holds the pooled namespaces a child joined until it has reaped
that child and sent its exit report, then closes them while idle: their
teardown is not part of the child's exit. Nothing is kept past that. The
pools are not refilled beside a child that has only just started. After a
spawn that came after a pause, that idle work waits for its answer to be on
its way (ANSWER_WINDOW)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="namespaces need root")

PROBE = textwrap.dedent(
    """
    import json, os, select, socket, tempfile, time
    from pathlib import Path
    from hostcapd.sandbox import namespaces
    from hostcapd.spawner import channel, messages, netns
    from hostcapd.spawner.mntns import MountNamespacePool
    from hostcapd.spawner.process import ANSWER_WINDOW, FILL_QUIET, Spawner

    def is_open(fd):
        try:
            os.fstat(fd)
            return True
        except OSError:
            return False

    root = Path(tempfile.mkdtemp(prefix="hostcap-release-"))
    os.chmod(root, 0o755)
    plan = namespaces.plan(
        {"mount_namespace", "pid_namespace", "net_namespace"}, 1 << 20, "",
        roots=((root, True),),
        system_dirs=tuple(Path(d) for d in ("/usr", "/bin", "/lib", "/lib64", "/etc")),
    )
    ours, theirs = channel.socketpair()
    life_read, life_write = os.pipe2(os.O_CLOEXEC)
    spawner = Spawner(theirs, life_read, netns=netns.NetnsPool(size=1),
                      mntns=MountNamespacePool(size=1))
    spawner.add_profile(messages.RegisterProfile(
        key="t", clone_flags=plan.clone_flags, mounts=plan.mounts,
        join_mounts=plan.join_mounts, hostname=None, loopback_up=plan.loopback_up,
        umask=0o022, landlock_rules=(), seccomp=b"", drop_caps=False,
        no_new_privs=True, oom_score_adj=None, pdeathsig=9,
    ))
    while spawner.idle_work():  # both pools filled, as an idle spawner does
        pass
    fds_before = sorted(int(n) for n in os.listdir("/proc/self/fd"))

    r, w = os.pipe2(os.O_CLOEXEC)
    order = messages.SpawnOrder(
        id="s1", profile="t", by_fd=True, exe_path=b"/bin/sh",
        argv=[b"sh", b"-c", b"read x"], envp=[b"PATH=/usr/bin:/bin"],
        cwd_root=None, cwd=None, rlimits=[], ids=None, loginuid=None, landlock=False,
    ).to_wire()
    fds = [os.open("/bin/sh", os.O_RDONLY | os.O_CLOEXEC), r,
           os.open("/dev/null", os.O_WRONLY | os.O_CLOEXEC),
           os.open("/dev/null", os.O_WRONLY | os.O_CLOEXEC),
           os.eventfd(0, os.EFD_CLOEXEC)]
    spawner.handle(order, fds)  # closes the fds it was given, as for a real order
    started = messages.from_spawner(channel.receive(ours)[0])
    pid = started.pid
    held = list(spawner.held[pid])
    used_both_pools = all(fd >= 0 for fd in held)
    open_while_running = all(is_open(fd) for fd in held)
    # Beside a child that has just started, the pools wait (FILL_QUIET) ...
    assert time.monotonic() - spawner.last_start < 10  # set by the spawn
    spawner.last_start = time.monotonic()  # "just": however slow this machine is
    deferred = (not spawner.idle_work() and not spawner.netns._fds
                and 0 < spawner.idle_wait() <= FILL_QUIET)
    # ... and beside an older one they are made whole again.
    spawner.last_start -= FILL_QUIET
    refilled = spawner.idle_work() and len(spawner.netns._fds) == 1

    os.close(w)  # the child's `read` ends: it exits
    while not spawner.released:
        select.select([], [], [], 0.01)
        spawner.reap()
    exited = messages.from_spawner(channel.receive(ours)[0])
    open_once_reaped = all(is_open(fd) for fd in held)
    released = sorted(spawner.released)
    # The first spawn came after a pause: its idle work waits for its answer.
    window = spawner.spaced and spawner.answer_until == spawner.last_activity + ANSWER_WINDOW
    spawner.answer_until = time.monotonic() + 60  # "now": however slow this machine is
    put_off = (not spawner.idle_work() and all(is_open(fd) for fd in held)
               and 0 < spawner.idle_wait() <= 60)
    spawner.answer_until -= 60
    spawner.idle_work()  # the idle turn that follows closes them
    closed_when_idle = not any(is_open(fd) for fd in held)
    while spawner.idle_work():  # and the pools are made whole again
        pass

    # A spawn ordered at once after the last one's exit (back to back): its
    # idle work is not put off (there is no pause to put it in).
    spawner.last_activity = time.monotonic()
    order2 = messages.SpawnOrder(
        id="s2", profile="t", by_fd=True, exe_path=b"/bin/true", argv=[b"true"],
        envp=[], cwd_root=None, cwd=None, rlimits=[], ids=None, loginuid=None,
        landlock=False,
    ).to_wire()
    spawner.handle(order2, [os.open("/bin/true", os.O_RDONLY | os.O_CLOEXEC),
                            os.open("/dev/null", os.O_RDONLY | os.O_CLOEXEC),
                            os.open("/dev/null", os.O_WRONLY | os.O_CLOEXEC),
                            os.open("/dev/null", os.O_WRONLY | os.O_CLOEXEC),
                            os.eventfd(0, os.EFD_CLOEXEC)])
    back_to_back = not spawner.spaced and spawner.answer_until == 0.0
    channel.receive(ours)  # Started
    while spawner.children:
        select.select([], [], [], 0.01)
        spawner.reap()
    exited2 = messages.from_spawner(channel.receive(ours)[0])
    not_put_off = exited2.OP == "exited" and spawner.answer_until == 0.0 and spawner.idle_work()
    while spawner.idle_work():
        pass
    print(json.dumps({
        "started": started.OP, "exited": exited.OP, "exited_pid": exited.pid,
        "pid": pid, "held": sorted(held), "used_both_pools": used_both_pools,
        "open_while_running": open_while_running, "deferred": deferred, "refilled": refilled, "open_once_reaped": open_once_reaped,
        "released": released, "closed_when_idle": closed_when_idle,
        "window": window, "put_off": put_off,
        "back_to_back": back_to_back, "not_put_off": not_put_off,
        "left_held": len(spawner.held), "left_released": len(spawner.released),
        "fds": [len(fds_before), len(os.listdir("/proc/self/fd"))],
    }))
    """
)


@needs_root
def test_pooled_namespaces_are_released_after_the_exit_report_while_idle() -> None:
    done = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["started"] == "started" and result["exited"] == "exited"
    assert result["exited_pid"] == result["pid"]
    assert result["used_both_pools"]  # it joined a pooled network and mount namespace
    assert result["open_while_running"]
    assert result["deferred"]  # no namespace is made beside a child that has just started
    assert result["refilled"]
    # The exit report went out while the spawner still held both namespaces.
    assert result["open_once_reaped"]
    assert result["released"] == result["held"]
    # A spawn after a pause: closed once its answer is on its way, not at once.
    assert result["window"] and result["put_off"]
    assert result["closed_when_idle"]
    # Back to back: nothing put off.
    assert result["back_to_back"] and result["not_put_off"]
    assert result["left_held"] == result["left_released"] == 0
    # Refilled pools aside, nothing is left open: same fd count as before the spawn.
    assert result["fds"][1] == result["fds"][0]
