"""The spawner's pool maker (spawner/maker.py): it makes the pooled network
and mount namespaces at nice 19 while the spawner only asks, each
namespace it sends is a new one (loopback up), the reaped children's
namespaces handed to it are closed there (none stays open in the spawner),
one asked for a profile since dropped is closed when it comes, never pooled,
and once the maker is gone the spawner makes its own again."""

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
    import fcntl, json, os, select, socket, struct, tempfile, time
    from pathlib import Path
    from hostcapd import linux
    from hostcapd.sandbox import namespaces
    from hostcapd.spawner import channel, messages, netns
    from hostcapd.spawner.maker import PoolMaker
    from hostcapd.spawner.mntns import MountNamespacePool
    from hostcapd.spawner.process import Spawner

    def open_fds(pid="self"):
        return sorted(int(n) for n in os.listdir(f"/proc/{pid}/fd"))

    def until(cond, what):
        deadline = time.monotonic() + 60
        while not cond():
            assert time.monotonic() < deadline, what
            if select.select([spawner.maker.sock], [], [], 0.05)[0]:
                spawner.from_maker()

    def loopback_up(fd):
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                linux.setns(fd, netns.CLONE_NEWNET)
                with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
                    got = fcntl.ioctl(s, 0x8913, struct.pack("16sH14x", b"lo", 0))
                code = 0 if struct.unpack("16sH14x", got)[1] & 1 else 2
            finally:
                os._exit(code)
        return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 0

    maker = PoolMaker.start()
    root = Path(tempfile.mkdtemp(prefix="hostcap-maker-"))
    os.chmod(root, 0o755)
    plan = namespaces.plan(
        {"mount_namespace", "pid_namespace", "net_namespace"}, 1 << 20, "",
        roots=((root, True),),
        system_dirs=tuple(Path(d) for d in ("/usr", "/bin", "/lib", "/lib64", "/etc")),
    )
    ours, theirs = channel.socketpair()
    life_read, life_write = os.pipe2(os.O_CLOEXEC)
    spawner = Spawner(theirs, life_read, netns=netns.NetnsPool(size=2),
                      mntns=MountNamespacePool(size=1), maker=maker)
    spawner.add_profile(messages.RegisterProfile(
        key="t", clone_flags=plan.clone_flags, mounts=plan.mounts,
        join_mounts=plan.join_mounts, hostname=None, loopback_up=plan.loopback_up,
        umask=0o022, landlock_rules=(), seccomp=b"", drop_caps=False,
        no_new_privs=True, oom_score_adj=None, pdeathsig=9,
    ))
    deadline = time.monotonic() + 60  # its name and policy are its first steps
    while (os.getpriority(os.PRIO_PROCESS, maker.pid) != 19
           and time.monotonic() < deadline):
        time.sleep(0.01)
    out = {
        "maker_name": Path(f"/proc/{maker.pid}/comm").read_text().strip(),
        "maker_policy": [os.sched_getscheduler(maker.pid),
                         os.getpriority(os.PRIO_PROCESS, maker.pid)],
        "maker_fds": open_fds(maker.pid),
    }
    asks = 0
    while spawner.idle_work():  # only asks: nothing is made here
        asks += 1
    out["asks"] = asks
    out["pending"] = [spawner.netns.pending, spawner.mntns.pending.get("t", 0)]
    until(lambda: len(spawner.netns._fds) == 2 and spawner.mntns._ready.get("t"), "pools filled")
    out["pending_after"] = [spawner.netns.pending, spawner.mntns.pending.get("t", 0)]
    home = os.readlink("/proc/self/ns/net")
    nets = [os.readlink(f"/proc/self/fd/{fd}") for fd in spawner.netns._fds]
    out["nets_new"] = len(set(nets)) == 2 and home not in nets
    out["loopback_up"] = all(loopback_up(fd) for fd in spawner.netns._fds)
    mnt_fd = spawner.mntns._ready["t"][0][1]
    out["mnt_new"] = os.readlink(f"/proc/self/fd/{mnt_fd}") != os.readlink("/proc/self/ns/mnt")

    # A reaped child's namespaces: handed to the maker, closed there.
    given = [spawner.netns.take(), spawner.mntns.take("t")]
    given_names = {os.readlink(f"/proc/self/fd/{fd}") for fd in given}
    spawner.released.extend(given)
    spawner.idle_work()
    def is_open(fd):
        try:
            os.fstat(fd)
            return True
        except OSError:
            return False
    out["ours_closed"] = not any(is_open(fd) for fd in given)
    def maker_holds():  # of the given namespaces (it holds its templates too)
        names = set()
        for fd in open_fds(maker.pid):
            try:
                names.add(os.readlink(f"/proc/{maker.pid}/fd/{fd}"))
            except OSError:
                pass
        return names & given_names
    deadline = time.monotonic() + 60  # at nice 19: a loaded machine may keep it waiting
    while maker_holds() and time.monotonic() < deadline:
        time.sleep(0.01)
    out["maker_closed_them"] = not maker_holds() and len(given_names) == 2

    # One asked for a profile dropped since is closed when it comes.
    until(lambda: not spawner.idle_work() and not spawner.netns.pending
          and not spawner.mntns.pending.get("t"), "refilled")
    os.close(spawner.mntns.take("t"))
    spawner.idle_work()  # asks for another
    out["asked_again"] = spawner.mntns.pending.get("t", 0)
    spawner.mntns.drop("t")
    fds_then = open_fds()
    until(lambda: not spawner.mntns._stale.get("t"), "the stale reply")
    out["stale_pooled"] = len(spawner.mntns._ready.get("t", ()))
    out["stale_left_open"] = len(open_fds()) - len(fds_then)

    # The maker stopped, the pools empty, the asks out: a spawn does not
    # wait for them; its child makes its own namespaces.
    os.kill(maker.pid, 19)  # SIGSTOP
    for fd in [*spawner.netns._fds, *(f for _, f in spawner.mntns._ready.get("t", ()))]:
        os.close(fd)
    spawner.netns._fds.clear()
    spawner.mntns._ready.clear()
    while spawner.idle_work():
        pass
    out["asked_while_stopped"] = [spawner.netns.pending, spawner.mntns.pending.get("t", 0)]
    order = messages.SpawnOrder(
        id="s1", profile="t", by_fd=True, exe_path=b"/bin/true", argv=[b"true"],
        envp=[], cwd_root=None, cwd=None, rlimits=[], ids=None, loginuid=None,
        landlock=False,
    ).to_wire()
    spawner.handle(order, [os.open("/bin/true", os.O_RDONLY | os.O_CLOEXEC),
                           os.open("/dev/null", os.O_RDONLY | os.O_CLOEXEC),
                           os.open("/dev/null", os.O_WRONLY | os.O_CLOEXEC),
                           os.open("/dev/null", os.O_WRONLY | os.O_CLOEXEC),
                           os.eventfd(0, os.EFD_CLOEXEC)])
    started = messages.from_spawner(channel.receive(ours)[0])
    out["started_without_pools"] = [started.OP, list(spawner.held.get(started.pid, ()))]
    os.kill(maker.pid, 18)  # SIGCONT

    # The maker gone: the spawner makes its own again.
    os.kill(maker.pid, 9)
    os.waitpid(maker.pid, 0)
    old_maker = maker
    deadline = time.monotonic() + 10
    while spawner.maker is not None and time.monotonic() < deadline:
        select.select([old_maker.sock], [], [], 0.05)
        spawner.from_maker()
    out["maker_dropped"] = spawner.maker is None
    while (fd := spawner.netns.take()) >= 0:
        os.close(fd)
    while spawner.children:  # the spawn above ends (and no young child defers the pools)
        select.select([], [], [], 0.01)
        spawner.reap()
    time.sleep(max(0.0, spawner.answer_until - time.monotonic()))  # its answer's window
    while not spawner.netns._fds and spawner.idle_work():
        pass
    out["made_itself"] = len(spawner.netns._fds)
    print(json.dumps(out))
    """
)


@needs_root
def test_the_pool_maker_makes_the_namespaces_at_nice_19_and_tears_them_down() -> None:
    done = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=90)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["maker_name"] == "hostcapd-pools"
    assert result["maker_policy"] == [os.SCHED_OTHER, 19]
    # The spawner only asked (two network namespaces, one mount namespace):
    # one message for the empty pools, one for the rest of what they want.
    assert result["asks"] == 2 and result["pending"] == [2, 1]
    assert result["pending_after"] == [0, 0]
    assert result["nets_new"] and result["loopback_up"] and result["mnt_new"]
    assert result["ours_closed"] and result["maker_closed_them"]
    assert result["asked_again"] == 1
    assert result["stale_pooled"] == 0 and result["stale_left_open"] == 0
    assert result["asked_while_stopped"] == [2, 1]
    assert result["started_without_pools"] == ["started", [-1, -1]]
    assert result["maker_dropped"]
    assert result["made_itself"] == 1
