"""The warm path (decision 0026): children set up ahead of need.

A warm spawn must end in exactly the state of a fresh one: the same probe runs
in a tenant with warm children and in an identical tenant without, and what
it reports of itself (/proc/self/status, limits, mountinfo, fds, cgroup, and
what landlock and seccomp let it do) must match once the values that name the
spawn (pids, ids, the tenant's name) are taken out. A warm child is used once,
is replaced, and dies with its tenant's config.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import signal
import subprocess
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import psutil
import pytest
from hostcapd.config import PROTECTION_NAMES
from support.daemon import Daemon, audit_records, children_of, spawner_pid, waiting_warm_child
from support.process import Client, outcome

#: What both sandboxed programs below start with: an attempt's result is
#: "ok" or the errno's name.
PRELUDE = r"""
import ctypes, errno, json, os, resource, signal, socket, sys

libc = ctypes.CDLL(None, use_errno=True)

def attempt(fn):
    try:
        fn()
        return "ok"
    except OSError as e:
        return errno.errorcode.get(e.errno, str(e.errno))
"""

#: Runs inside the sandbox: what it can see and do of itself, as JSON.
PROBE = (
    PRELUDE
    + r"""

def write(path):
    with open(path, "w") as f:
        f.write("x")

def apart(fn):
    # attempt(fn) in a child of its own: what it changes (a user namespace,
    # a chroot) stays there.
    pid = os.fork()
    if pid == 0:
        result = attempt(fn)
        code = 0 if result == "ok" else getattr(errno, result, 255)
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    code = os.waitstatus_to_exitcode(status)
    return "ok" if code == 0 else errno.errorcode.get(code, str(code))

def read(path, mode="r"):
    try:
        with open(path, mode) as f:
            return f.read()
    except OSError as e:
        return errno.errorcode.get(e.errno, str(e.errno))

def listing(path):
    try:
        return os.listdir(path)
    except OSError as e:
        return []

def sock(family, kind):
    socket.socket(family, kind).close()

def syscall(*args):
    if libc.syscall(*args) != 0:
        raise OSError(ctypes.get_errno(), "syscall")

workspace, reference = sys.argv[1], sys.argv[2]
out = {
    "status": read("/proc/self/status"),
    "limits": read("/proc/self/limits"),
    "mountinfo": read("/proc/self/mountinfo"),
    "cgroup": read("/proc/self/cgroup"),
    "fds": {fd: os.readlink(f"/proc/self/fd/{fd}")
            for fd in listing("/proc/self/fd") if os.path.lexists(f"/proc/self/fd/{fd}")},
    "fd_probe": [fd for fd in range(3, 1024) if attempt(lambda: os.fstat(fd)) == "ok"],
    "cwd": os.getcwd(),
    "umask": os.umask(0o22),
    "env": dict(os.environ),
    "argv": sys.argv[1:],
    "hostname": socket.gethostname(),
    "oom_score_adj": read("/proc/self/oom_score_adj"),
    "loginuid": read("/proc/self/loginuid"),
    "affinity": sorted(os.sched_getaffinity(0)),
    "priority": os.getpriority(os.PRIO_PROCESS, 0),
    # A warm child sets itself up at SCHED_IDLE: the command, and its init,
    # run as a fresh spawn's do (SCHED_OTHER, 0).
    "policy": os.sched_getscheduler(0),
    "init_policy": (lambda t: t.rsplit(")", 1)[1].split()[38] if ")" in t else t)(
        read("/proc/1/stat")),
    "sid_is_pid": os.getsid(0) == os.getpid(),
    "pgid_is_pid": os.getpgid(0) == os.getpid(),
    "pid": os.getpid(),
    "ids": [os.getresuid(), os.getresgid(), os.getgroups()],
    "rlimits": {name: resource.getrlimit(getattr(resource, name))
                for name in dir(resource) if name.startswith("RLIMIT_")},
    "no_new_privs": libc.prctl(39, 0, 0, 0, 0),
    "seccomp_mode": libc.prctl(21, 0, 0, 0, 0),
    "dumpable": libc.prctl(3, 0, 0, 0, 0),
    "init": {
        "cmdline": read("/proc/1/cmdline"),
        "status": [l for l in read("/proc/1/status").splitlines() if l.split(":")[0] in (
            "Uid", "Gid", "Groups", "CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb",
            "NoNewPrivs", "Seccomp", "Seccomp_filters", "SigBlk")],
        "fds": attempt(lambda: os.listdir("/proc/1/fd")),
    },
    # landlock: the roots' tiers and nothing else
    "landlock": {
        "write_workspace": attempt(lambda: write(os.path.join(workspace, "probe-out"))),
        "write_reference": attempt(lambda: write(os.path.join(reference, "probe-out"))),
        "read_reference": attempt(lambda: open(os.path.join(reference, "seed")).read()),
        "write_etc": attempt(lambda: write("/etc/probe-out")),
        "write_usr": attempt(lambda: write("/usr/probe-out")),
        "read_proc_self": attempt(lambda: open("/proc/self/stat").read()),
        "write_tmp": attempt(lambda: write("/tmp/probe-out")),
    },
    # seccomp (and the capability drop): what stays refused
    "seccomp": {
        "unshare_user": apart(lambda: syscall(272, 0x10000000)),
        "ptrace_traceme": apart(lambda: syscall(101, 0, 0, 0, 0)),
        "mount": apart(lambda: syscall(165, b"none", b"/tmp", b"tmpfs", 0, None)),
        "socket_packet": apart(lambda: sock(17, socket.SOCK_RAW)),
        "socket_netlink": apart(lambda: sock(socket.AF_NETLINK, socket.SOCK_RAW)),
        "socket_unix": apart(lambda: sock(socket.AF_UNIX, socket.SOCK_STREAM)),
        "socket_inet": apart(lambda: sock(socket.AF_INET, socket.SOCK_STREAM)),
        "keyctl": apart(lambda: syscall(250, 0, 0, 0, 0, 0)),
        "setuid_root": apart(lambda: os.setuid(0)),
        "chroot": apart(lambda: os.chroot("/tmp")),
    },
}
if out["landlock"]["write_workspace"] == "ok":
    os.unlink(os.path.join(workspace, "probe-out"))
print(json.dumps(out))
"""
)

#: /proc/self/status fields that name this process or measure its memory
#: and scheduling, not its state.
VOLATILE_STATUS = re.compile(
    r"^(Pid|PPid|Tgid|Ngid|NStgid|NSpid|NSpgid|NSsid|Vm\w+|Rss\w+|HugetlbPages|"
    r"voluntary_ctxt_switches|nonvoluntary_ctxt_switches|State|Kthread|Untag\w*):"
)


def _normalize(report: dict[str, Any], tenant: str, state: Path) -> dict[str, Any]:
    """Take out what names the spawn: pids, mount and pipe ids, the spawn's
    cgroup, the tenant's name in its paths."""

    def text(value: str) -> str:
        value = value.replace(str(state / tenant), str(state / "TENANT"))
        value = value.replace(f"/tenant-{tenant}", "/tenant-TENANT")  # its cpu share
        value = re.sub(r"(spawn|warm|ready)-[0-9a-f]{32}", "spawn-ID", value)
        value = re.sub(r"(pipe|socket|anon_inode:\[?\w+\]?):\[\d+\]", r"\1:[N]", value)
        return value

    status = report["status"].splitlines()
    # SigQ's count is the signals queued for the uid across the machine (any
    # process of it: read 0 and 1 in turns under load); its limit is the process's.
    report["status"] = [
        re.sub(r"^SigQ:\t\d+/", "SigQ:\tN/", s) for s in status if not VOLATILE_STATUS.match(s)
    ]
    # NSpid's depth (one namespace below the host's) is state; its values are not.
    report["ns_depth"] = [len(s.split()) for s in status if s.startswith("NSpid:")]
    # Mount ids, parent ids and the device numbers of anonymous mounts (each
    # tmpfs and proc its own) are the spawn's; the rest is the mount's state,
    # in no order (a copy of a profile's template lists the trees it cloned
    # from the host first: unit/spawner/test_mntns_pool.py compares parents).
    report["mountinfo"] = sorted(
        text(re.sub(r"^0:\d+ ", "0:N ", " ".join(line.split()[2:])))
        for line in report["mountinfo"].splitlines()
    )
    report["cgroup"] = text(report["cgroup"])
    report["fds"] = {fd: text(target) for fd, target in report["fds"].items()}
    report["cwd"] = text(report["cwd"])
    report["env"] = {k: text(v) for k, v in report["env"].items()}
    report["argv"] = [text(a) for a in report["argv"]]
    return report


#: What the minimal profile keeps: the identity and its limits.
MINIMAL_KEEPS = ("rlimits", "uid_drop", "exec_by_fd")
#: The profiles the comparison runs on: the default; without the spawn cgroup
#: (a warm child joins none); without a pid namespace (no init: the warm
#: child is the command); every protection off but the identity.
PROFILES: dict[str, dict[str, str]] = {
    "default": {},
    "no_cgroup": {"cgroup": "off"},
    "no_pid_namespace": {"pid_namespace": "off"},
    # As the bench's `minimal` tenant (bench/daemon.py).
    "minimal": {name: "off" for name in PROTECTION_NAMES if name not in MINIMAL_KEEPS},
}


def _start(start_daemon: Callable[..., Daemon], sandbox: dict[str, str]) -> Daemon:
    daemon = start_daemon(
        tenants={
            "warm": {"warm_spawns": 2, "sandbox": sandbox},
            "fresh": {"warm_spawns": 0, "sandbox": sandbox},
        }
    )
    for name in ("warm", "fresh"):
        (daemon.root(name, 1) / "seed").write_text("seed\n")
    return daemon


@pytest.fixture
async def tenants(
    start_daemon: Callable[..., Daemon],
) -> AsyncIterator[tuple[Daemon, Client, Client]]:
    daemon = _start(start_daemon, {})
    warm, fresh = Client(daemon.socket_of("warm")), Client(daemon.socket_of("fresh"))
    await _wait_warm(daemon, 2)
    yield daemon, warm, fresh
    await warm.close()
    await fresh.close()


def _set_up(pid: int) -> bool:
    """Whether a child of the spawner has dropped root (the spawner is root;
    a child just cloned is too, until its set-up changes its identity)."""
    try:
        return 0 not in psutil.Process(pid).uids()
    except psutil.NoSuchProcess:
        return False


def _waiting(daemon: Daemon) -> list[int]:
    """The spawner's children while nothing runs, once set up: the warm ones."""
    return sorted(pid for pid in children_of(spawner_pid(daemon)) if _set_up(pid))


async def _wait_warm(
    daemon: Daemon, n: int, timeout: float = 10.0, exactly: bool = False
) -> list[int]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        waiting = _waiting(daemon)
        if len(waiting) == n or (len(waiting) > n and not exactly):
            return waiting
        await asyncio.sleep(0.02)
    raise AssertionError(f"{n} warm children were not made within {timeout} s: {_waiting(daemon)}")


def _asleep(pid: int, in_epoll: bool = False) -> bool:
    """Whether process (or main thread) `pid` sleeps, in epoll_wait if asked."""
    try:
        state = Path(f"/proc/{pid}/task/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        wchan = Path(f"/proc/{pid}/task/{pid}/wchan").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state == "S" and (not in_epoll or wchan == "do_epoll_wait")


async def _known_ready(daemon: Daemon, waiting: list[int], timeout: float = 10.0) -> None:
    """Until the root side holds `waiting` as ready: each warm child sleeps
    (waiting for its request, its ready report written), then the spawner sleeps in
    epoll_wait (it read the reports and sent them on), then the root's loop
    does (it took them in), each seen twice 50 ms apart. A child seen set up
    (its uid dropped) may not be ready yet for the root: its landlock and
    seccomp come after, and under load the two reports lag."""
    spawner = spawner_pid(daemon)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for _ in range(2):
            if not (
                # an init's command process waits (the init, for its exec)
                all(_asleep(w) for pid in waiting for w in children_of(pid) or [pid])
                and _asleep(spawner, in_epoll=True)
                and _asleep(daemon.pid, in_epoll=True)
            ):
                break
            await asyncio.sleep(0.05)
        else:
            return
        await asyncio.sleep(0.02)
    raise AssertionError(f"the root side did not settle within {timeout} s")


def _boot_ticks() -> float:
    """Now, in clock ticks since boot (a process's starttime's unit)."""
    return float(Path("/proc/uptime").read_text().split()[0]) * os.sysconf("SC_CLK_TCK")


async def _probe(client: Client, daemon: Daemon, tenant: str) -> dict[str, Any]:
    result = await client.run(
        "python3",
        "-c",
        PROBE,
        str(daemon.root(tenant, 0)),
        str(daemon.root(tenant, 1)),
        limits={"open_files": 256, "cpu_seconds": 30},
    )
    assert outcome(result) == "EXITED", (result.stderr, result.exited.message)
    assert result.exited.exit_code == 0, result.stderr
    return json.loads(result.stdout)


@pytest.mark.parametrize("profile", sorted(PROFILES))
async def test_a_warm_spawn_ends_in_the_state_of_a_fresh_one(
    start_daemon: Callable[..., Daemon], profile: str
) -> None:
    daemon = _start(start_daemon, PROFILES[profile])
    warm, fresh = Client(daemon.socket_of("warm")), Client(daemon.socket_of("fresh"))
    waiting = set(await _wait_warm(daemon, 2))
    try:
        warm_report = await _probe(warm, daemon, "warm")
        fresh_report = await _probe(fresh, daemon, "fresh")
    finally:
        await warm.close()
        await fresh.close()
    # The warm probe ran in one of the children that waited.
    assert len([pid for pid in waiting if not Path(f"/proc/{pid}").exists()]) == 1
    a = _normalize(warm_report, "warm", daemon.state)
    b = _normalize(fresh_report, "fresh", daemon.state)
    for key in sorted(set(a) | set(b)):
        if key != "pid":
            assert a.get(key) == b.get(key), (
                f"{key} differs between a warm and a fresh spawn: {a.get(key)!r} {b.get(key)!r}"
            )
    # Not vacuous: what the profile applies is there in both.
    assert a["fd_probe"] == []  # nothing open but stdio
    assert a["policy"] == os.SCHED_OTHER
    if "pid_namespace" not in PROFILES[profile]:  # its init is the warm child
        assert a["init_policy"] == str(os.SCHED_OTHER)
    assert a["ids"] == [[65534] * 3, [65534] * 3, []]
    assert a["landlock"]["write_workspace"] == "ok"
    if profile != "minimal":
        assert a["no_new_privs"] == 1 and a["seccomp_mode"] == 2
        assert a["landlock"]["write_reference"] in ("EROFS", "EACCES")
        assert a["seccomp"]["unshare_user"] == "EPERM"
    assert (warm_report["pid"] == 2) == ("pid_namespace" not in PROFILES[profile])


async def test_the_warm_child_is_made_before_the_request_and_used_once(
    tenants: tuple[Daemon, Client, Client],
) -> None:
    daemon, warm, _ = tenants
    program = "print(open('/proc/1/stat').read().rsplit(')', 1)[1].split()[19])"
    used: set[int] = set()
    for _ in range(3):
        waiting = set(await _wait_warm(daemon, 2, exactly=True))
        assert not waiting & used, "a warm child that ran a request waits again"
        await asyncio.sleep(0.05)  # clock ticks are 10 ms
        before = _boot_ticks()
        result = await warm.run("python3", "-c", program)
        assert outcome(result) == "EXITED", result.stderr
        # Its init (pid 1 of its namespace) existed before the request was
        # sent: 50 ms (5 ticks) at least, 3 ticks leave room for rounding.
        started = int(result.stdout)
        assert started <= before - 3, (started, before)
        # One of the waiting children ran it, and is gone with it.
        gone = {pid for pid in waiting if not Path(f"/proc/{pid}").exists()}
        assert len(gone) == 1, (waiting, gone)
        used |= gone


async def test_a_warm_spawn_that_runs_on_has_its_child_replaced_while_it_runs(
    tenants: tuple[Daemon, Client, Client],
) -> None:
    """A spawn orders the next warm child once it has answered, or 50 ms
    after its command started if it runs on: the pool is whole again while
    it runs, not only after it ended."""
    daemon, warm, _ = tenants
    before = set(await _wait_warm(daemon, 2, exactly=True))
    task = asyncio.ensure_future(warm.run("sleep", "30"))
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            waiting = {
                pid
                for pid in children_of(spawner_pid(daemon))
                if waiting_warm_child(pid) and _set_up(pid)
            }
            if len(waiting) == 2 and waiting - before and not before <= waiting:
                break
            await asyncio.sleep(0.02)
        else:
            raise AssertionError(f"no warm child replaced the taken one: {before} {waiting}")
        assert not task.done(), "the spawn ended before its warm child was replaced"
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def test_a_warm_child_killed_while_waiting_is_replaced_and_spawns_still_run(
    tenants: tuple[Daemon, Client, Client],
) -> None:
    daemon, warm, _ = tenants
    killed = await _wait_warm(daemon, 2)
    for pid in killed:
        os.kill(pid, signal.SIGKILL)
    result = await warm.run("echo", "still")
    assert outcome(result) == "EXITED" and result.stdout == b"still\n", (
        result.exited.message,
        result.exited.failed_step,
        result.exited.errno,
    )
    # Two again (the pool's size), none of them the killed ones.
    replaced = await _wait_warm(daemon, 2, exactly=True)
    assert not set(replaced) & set(killed)


def _descendants(pid: int) -> list[int]:
    out = [pid]
    for child in children_of(pid):
        out += _descendants(child)
    return out


async def test_an_idle_daemon_with_warm_children_has_no_process_in_d_state(
    tenants: tuple[Daemon, Client, Client],
) -> None:
    """A waiting warm child's init (whose command's process is cloned ahead)
    sleeps interruptibly: no process of an idle daemon stays in "D"
    (uninterruptible: each would count 1 in the host's load average for as
    long as it waits, and look hung to its operators). Sampled while it
    idles: the warm children never, the daemon's other processes not in most
    samples (the pool maker may wait a moment for the kernel, e.g. for RCU
    in a namespace's teardown)."""
    daemon, warm, _ = tenants
    await warm.run("true")  # one used and replaced: the steady state
    inits = await _wait_warm(daemon, 2, exactly=True)
    await _known_ready(daemon, inits)
    # Not vacuous: each init has its command's process, waiting.
    commands = [c for pid in inits for c in children_of(pid)]
    assert len(commands) == len(inits), (inits, commands)
    assert daemon.proc is not None
    samples = 20
    in_d: dict[int, int] = {}
    for _ in range(samples):
        for pid in _descendants(daemon.proc.pid):
            with contextlib.suppress(OSError):
                in_d[pid] = in_d.get(pid, 0) + (_state(pid) == "D")
        await asyncio.sleep(0.025)
    assert set(inits + commands) <= set(in_d)
    assert not [pid for pid in inits + commands if in_d[pid]], in_d
    assert not [pid for pid, n in in_d.items() if n > samples // 2], in_d


async def test_warm_children_die_with_their_tenants_config(
    tenants: tuple[Daemon, Client, Client],
) -> None:
    daemon, warm, _ = tenants
    old = set(await _wait_warm(daemon, 2))
    daemon.config["tenants"]["warm"]["env"]["GREETING"] = "changed"
    daemon.write_config()
    assert daemon.proc is not None
    daemon.proc.send_signal(signal.SIGHUP)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and old & set(_waiting(daemon)):
        await asyncio.sleep(0.02)
    assert not old & set(_waiting(daemon)), "a warm child outlived the config it was made for"
    result = await warm.run("sh", "-c", "echo $GREETING")
    assert result.stdout == b"changed\n"


async def test_stopping_the_daemon_leaves_no_warm_child_nor_its_cgroup(
    tenants: tuple[Daemon, Client, Client],
) -> None:
    daemon, _, _ = tenants
    waiting = await _wait_warm(daemon, 2)
    cgroups = {Path(f"/proc/{pid}/cgroup").read_text() for pid in waiting}
    assert daemon.stop() == 0
    for pid in waiting:
        assert not Path(f"/proc/{pid}").exists(), f"warm child {pid} outlived the daemon"
    for line in "".join(cgroups).splitlines():
        path = line.split(":", 2)[2]
        if "warm-" in path:
            # os.walk skips what vanishes under it (other daemons' cgroups
            # on a shared machine); rglob raised FileNotFoundError there.
            name = Path(path).name
            leftovers = [
                os.path.join(top, name)
                for top, dirs, _ in os.walk("/sys/fs/cgroup")
                if name in dirs
            ]
            assert not leftovers, f"a warm child's cgroup is left: {leftovers}"


#: Runs inside the sandbox, given the pids of its tenant's waiting warm
#: children (its own uid's): it tries to stop, kill, trace and read each.
ATTACK = (
    PRELUDE
    + r"""
def ptrace_attach(pid):
    if libc.ptrace(16, pid, None, None) != 0:
        raise OSError(ctypes.get_errno(), "ptrace")

out = {}
for pid in map(int, sys.argv[1:]):
    if pid == os.getpid():
        continue  # the one that runs this
    out[pid] = {
        "stop": attempt(lambda: os.kill(pid, signal.SIGSTOP)),
        "kill": attempt(lambda: os.kill(pid, signal.SIGKILL)),
        "ptrace": attempt(lambda: ptrace_attach(pid)),
        "environ": attempt(lambda: open(f"/proc/{pid}/environ", "rb").read()),
        "mem": attempt(lambda: open(f"/proc/{pid}/mem", "rb").read(1)),
    }
print(json.dumps(out))
"""
)


def _state(pid: int) -> str:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]


async def test_a_sandboxed_command_cannot_stop_kill_trace_or_read_its_tenants_warm_children(
    start_daemon: Callable[..., Daemon],
) -> None:
    # Without a pid namespace the command could name them; they run as its uid.
    daemon = start_daemon(tenants={"dev": {"warm_spawns": 2, "sandbox": {"pid_namespace": "off"}}})
    client = Client(daemon.socket)
    try:
        waiting = await _wait_warm(daemon, 2)
        assert all(Path(f"/proc/{pid}/status").read_text().count("65534") >= 4 for pid in waiting)
        # The attack runs in one of them; the other (and the one made to
        # replace it, not in the list) is its target.
        result = await client.run("python3", "-c", ATTACK, *map(str, waiting))
        assert outcome(result) == "EXITED", result.stderr
        report = json.loads(result.stdout)
        targets = {int(pid): r for pid, r in report.items() if Path(f"/proc/{pid}").exists()}
        assert targets, "no warm child was left to attack"
        for pid, r in targets.items():
            assert r == {
                "stop": "EPERM",  # landlock scopes its signals to its own domain
                "kill": "EPERM",
                "ptrace": "EPERM",
                "environ": "EACCES",
                "mem": "EACCES",
            }, (pid, r)
            assert _state(pid) == "S", "the warm child was stopped"
        # And it still runs a request.
        result = await client.run("echo", "ok")
        assert (outcome(result), result.stdout) == ("EXITED", b"ok\n")
    finally:
        await client.close()


async def test_a_warm_child_stopped_from_outside_the_sandbox_still_runs_its_request(
    tenants: tuple[Daemon, Client, Client],
) -> None:
    daemon, warm, fresh = tenants
    inits = await _wait_warm(daemon, 2, exactly=True)
    # With an init, the command's process it cloned ahead waits for the
    # request; the init waits for its exec (and stops only after it).
    commands = [c for pid in inits for c in children_of(pid)]
    waiting = commands or inits
    # A process of the tenant's uid that no sandbox confines stops them all.
    subprocess.run(
        ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "kill", "-STOP"]
        + [str(pid) for pid in inits + commands],
        check=True,
    )
    # A stop takes effect when the stopped process next runs: on a loaded
    # machine that can be a moment after kill returned.
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and not all(_state(pid) == "T" for pid in waiting):
        await asyncio.sleep(0.01)
    assert all(_state(pid) == "T" for pid in waiting)
    started = time.monotonic()
    results = await asyncio.gather(
        warm.run("echo", "a"), warm.run("echo", "b"), fresh.run("echo", "c")
    )
    assert [r.stdout for r in results] == [b"a\n", b"b\n", b"c\n"]
    # Resumed by the spawner, not after its deadline (GO_TIMEOUT_MS + 5 s).
    assert time.monotonic() - started < 10


async def test_a_spawn_whose_warm_child_died_unreported_runs_fresh_once(
    tenants: tuple[Daemon, Client, Client],
) -> None:
    daemon, warm, _ = tenants
    waiting = await _wait_warm(daemon, 2, exactly=True)
    await _known_ready(daemon, waiting)
    spawner = spawner_pid(daemon)
    # The spawner cannot report the deaths: the front-end still holds both
    # as ready, and gives the next request to one of them.
    os.kill(spawner, signal.SIGSTOP)
    try:
        for pid in waiting:
            os.kill(pid, signal.SIGKILL)
        run = asyncio.ensure_future(warm.run("sh", "-c", "echo once >> ran.txt; cat ran.txt"))
        await asyncio.sleep(0.3)
    finally:
        os.kill(spawner, signal.SIGCONT)
    result = await run
    assert (outcome(result), result.stdout) == ("EXITED", b"once\n"), result.exited.message
    log = (daemon.state / "daemon.log").read_text()
    assert "its warm child was gone; spawning fresh" in log
    records = [r for r in audit_records(daemon.audit_path) if r["event"] == "process.exec"]
    assert [r["spawn_id"] for r in records].count(result.started.spawn_id) == 1
