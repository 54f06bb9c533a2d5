"""The C set-up alone: the least a spawn of the default profile can cost.

`SandboxFloor.true()` runs /bin/true through `childsetup.spawn` in this
process with the `nocg` tenant's prepared profile (pid/net/ipc/uts/mount
namespaces, the new root, landlock, seccomp, rlimits, uid drop, exec by fd)
and both namespace pools, as the spawner does, timed until it is reaped.
No gRPC, no front-end, no audit record, no spawner process: added to a bare
grpc.aio round trip it is the floor of this design (row 1's "design floor"
lines), and what the daemon takes beyond it is the front-end's own cost.
Namespaces are made before the clock starts, and released after it stops,
as a spawner does while idle (where a pool cannot make one, the child makes
its own, as a spawn's does).
"""

from __future__ import annotations

import os
import time
import tomllib
from functools import partial

from hostcapd import childsetup
from hostcapd.config import Tenant, parse_config
from hostcapd.process import environment, limits
from hostcapd.sandbox import identity, rlimits
from hostcapd.sandbox.profile import TenantProfile, prepare, probe_host
from hostcapd.spawner.mntns import MountNamespacePool
from hostcapd.spawner.netns import CLONE_NEWNET, NetnsPool

from bench.daemon import BenchDaemon, to_toml
from bench.native import BenchError

CLONE_NEWNS = 0x00020000
CLONE_NEWIPC = 0x08000000
CLONE_NEWPID = 0x20000000
TRUE = "/bin/true"


class SandboxFloor:
    def __init__(self, daemon: BenchDaemon, tenant: str = "nocg") -> None:
        config = parse_config(tomllib.loads(to_toml(daemon.config)))
        self.tenant: Tenant = next(t for t in config.tenants if t.name == tenant)
        self.profile: TenantProfile = prepare(self.tenant, probe_host(config.daemon.cgroup_parent))
        if "cgroup" in self.profile.applied:
            raise BenchError(f"sandbox floor: tenant {tenant} must have no cgroup")
        self.message = self.profile.spawner_message(tenant)
        self.pooled = list(self.profile.ns.pooled_mounts)
        self.join = list(self.profile.ns.join_mounts)
        self.mntns = MountNamespacePool(size=1)
        self.netns = NetnsPool(size=1)
        #: Of the latest `true()`: seconds from clone until spawn returned (exec'd).
        self.until_exec = 0.0
        self.ident = identity.plan(self.tenant.uid, self.tenant.gid, set(self.profile.applied))
        self.envp = environment.encode(dict(self.tenant.env))
        self.rlimits = (
            rlimits.plan(limits.apply({}, self.tenant.limits), False, False)
            if self.profile.has("rlimits")
            else []
        )

    def plan(
        self,
        *,
        exe: int,
        null: int,
        ruleset: int,
        netns_fd: int,
        mntns_fd: int,
        ipcns_fd: int = -1,
        go_fd: int = -1,
        warm_channel: int = -1,
        init: bool | None = None,
    ) -> childsetup.ChildPlan:
        """The plan of one sandboxed /bin/true (or, given `warm_channel`, of a
        warm child waiting for its request), joining the namespaces given;
        `init`: under the init as pid 1 (None: when the profile has a pid
        namespace, as the spawner does)."""
        m = self.message
        flags = m.clone_flags
        if mntns_fd >= 0:
            flags &= ~CLONE_NEWNS
        if netns_fd >= 0:
            flags &= ~CLONE_NEWNET
        if ipcns_fd >= 0:
            flags &= ~CLONE_NEWIPC
        warm = warm_channel >= 0
        root = str(self.tenant.primary_root.path).encode()
        return childsetup.ChildPlan(
            exe_fd=-1 if warm else exe,
            exe_path=None if warm else TRUE.encode(),
            argv=[] if warm else [TRUE.encode()],
            envp=[] if warm else self.envp,
            stdio=(0, 1, 2) if warm else (null, null, null),
            cwd_root=None if warm else root,
            cwd=None if warm else b".",
            umask=m.umask,
            clone_flags=flags,
            mounts=self.join if mntns_fd >= 0 else list(self.profile.ns.mounts),
            hostname=m.hostname,
            loopback_up=m.loopback_up and netns_fd < 0,
            cgroup_fds=[],
            rlimits=self.rlimits,
            oom_score_adj=m.oom_score_adj,
            loginuid=self.ident.loginuid,
            drop_caps=m.drop_caps,
            ids=self.ident.ids,
            no_new_privs=m.no_new_privs,
            landlock_fd=ruleset,
            landlock_rules=list(m.landlock_rules) if ruleset >= 0 else [],
            seccomp_filter=m.seccomp,
            pdeathsig=m.pdeathsig,
            cancel_fd=-1,
            life_fd=-1,
            go_fd=-1 if warm else go_fd,
            go_timeout_ms=5000,
            netns_fd=netns_fd,
            mntns_fd=mntns_fd,
            ipcns_fd=ipcns_fd,
            init=bool(m.clone_flags & CLONE_NEWPID) if init is None else init,
            warm_channel=warm_channel,
            roots=(root,) if warm else (),
        )

    def _pooled_namespaces(self) -> tuple[int, int]:
        """As the spawner does: pooled mount and net namespaces (fds, -1 for
        none) for a profile that has them (one the pool could not make is
        made by the child)."""
        mntns_fd = netns_fd = -1
        if self.message.clone_flags & CLONE_NEWNS:
            self.mntns.fill_one("floor", self.pooled)
            mntns_fd = self.mntns.take("floor")
        if self.message.clone_flags & CLONE_NEWNET:
            self.netns.fill_one()
            netns_fd = self.netns.take()
        return mntns_fd, netns_fd

    def true(self, init: bool = True) -> float:
        """Seconds from clone to reaped of one sandboxed /bin/true; with
        `init` (as the spawner does with a pid namespace) under its minimal
        init as pid 1, without it as pid 1 itself (decision 0023's A/B)."""
        mntns_fd, netns_fd = self._pooled_namespaces()
        exe = os.open(TRUE, os.O_RDONLY | os.O_CLOEXEC)
        null = os.open("/dev/null", os.O_RDWR | os.O_CLOEXEC)
        ruleset = self.profile.new_ruleset()
        report = -1
        try:
            start = time.perf_counter()
            plan = self.plan(
                exe=exe, null=null, ruleset=ruleset, netns_fd=netns_fd, mntns_fd=mntns_fd, init=init
            )
            pid, report = childsetup.spawn(plan)
            self.until_exec = time.perf_counter() - start
            _, status = os.waitpid(pid, 0)
            seconds = time.perf_counter() - start
        finally:
            for fd in (exe, null, mntns_fd, netns_fd, ruleset, report):
                if fd >= 0:
                    os.close(fd)
        if os.waitstatus_to_exitcode(status) != 0:
            raise BenchError(f"sandbox floor: /bin/true ended with status {status:#x}")
        return seconds

    def warm_true(self) -> float:
        """Seconds from the request to reaped of one sandboxed /bin/true run
        by a warm child (decision 0026) made ahead, as the spawner does: its
        set-up done and its ready record read before the clock starts, then
        the request given with `go` (the go fd already readable), its exec
        record read (`until_exec`) and the init reaped. The request is timed
        after the child waited 5 ms (a spawner's warm child waits longer)."""
        import socket

        mntns_fd, netns_fd = self._pooled_namespaces()
        ours, theirs = socket.socketpair()
        exe = os.open(TRUE, os.O_RDONLY | os.O_CLOEXEC)
        null = os.open("/dev/null", os.O_RDWR | os.O_CLOEXEC)
        cancel = os.eventfd(0, os.EFD_CLOEXEC)
        go = os.eventfd(1, os.EFD_CLOEXEC)
        ruleset = self.profile.new_ruleset()
        report = -1
        try:
            plan = self.plan(
                exe=exe,
                null=null,
                ruleset=ruleset,
                netns_fd=netns_fd,
                mntns_fd=mntns_fd,
                warm_channel=theirs.fileno(),
            )
            pid, report = childsetup.spawn(plan)
            theirs.close()
            if len(os.read(report, 24)) != 24:  # its ready record
                raise BenchError("sandbox floor: the warm child did not get ready")
            time.sleep(0.005)
            payload = childsetup.pack_request(
                by_fd=True,
                root=0,
                cwd=b".",
                exe_path=None,
                rlimits=self.rlimits,
                argv=[TRUE.encode()],
                envp=self.envp,
            )
            start = time.perf_counter()
            childsetup.go(ours.fileno(), payload, [null, null, null, cancel, go, exe])
            os.read(report, 24)  # its exec record
            self.until_exec = time.perf_counter() - start
            _, status = os.waitpid(pid, 0)
            seconds = time.perf_counter() - start
        finally:
            ours.close()
            theirs.close()
            for fd in (exe, null, cancel, go, mntns_fd, netns_fd, ruleset, report):
                if fd >= 0:
                    os.close(fd)
        if os.waitstatus_to_exitcode(status) != 0:
            raise BenchError(f"sandbox floor: /bin/true ended with status {status:#x}")
        return seconds

    def close(self) -> None:
        self.mntns.close()
        self.netns.close()
        self.profile.close()


#: A/B variants of the C set-up for `python -m bench.sandbox_floor`: a name,
#: whether the command runs under the init, and the `_childsetup` switches
#: (`_use_forker` and the like) set for it; a switch not named is at its
#: default (read once, before the first round).
VARIANTS: dict[str, tuple[bool, dict[str, bool]]] = {
    "no init": (False, {}),
    "init": (True, {}),
    "init (caller clones)": (True, {"_use_forker": False}),
    "init (its own session)": (True, {"_init_setsid": True}),
    # The forker started without trimming its copy of the caller (forker.c):
    # the switch starts a new forker, so a spawn after it is not timed.
    "init (forker untrimmed)": (True, {"_forker_trim": False}),
    # A warm child given its request (timed from the request: not comparable
    # with the lines above), its command's process cloned ahead (the init
    # waits on a futex), the same waiting in the vfork wait (uninterruptible:
    # the old way), or cloned after the request.
    "warm": (True, {}),
    "warm (vfork wait)": (True, {"_preclone_vfork": True}),
    "warm (cloned after)": (True, {"_warm_preclone": False}),
}
#: the variants `SandboxFloor.warm_true` runs
WARM = frozenset(name for name in VARIANTS if name.startswith("warm"))


def _switch(switches: dict[str, bool], defaults: dict[str, bool]) -> bool:
    """Set every switch for a variant (a `_forker_trim` in `defaults`
    starts a new forker each time, whatever its value: every variant's
    spawn then comes from a forker of the same age); whether it did."""
    from hostcapd import _childsetup  # type: ignore[attr-defined]

    restarted = False
    for name in defaults:
        value = switches.get(name, defaults[name])
        getattr(_childsetup, name)(value)
        restarted = restarted or name == "_forker_trim"
    return restarted


def _busy_threads(n: int) -> None:
    """`n` idle threads that allocated once (each a stack with its guard
    page and a malloc arena, as the bench's gRPC threads have): a caller
    like the bench's process."""
    import threading

    ready, stop = threading.Barrier(n + 1), threading.Event()

    def idle() -> None:
        keep = bytes(100_000).hex()  # malloc'd: the thread's own arena
        ready.wait()
        stop.wait()
        del keep

    for _ in range(n):
        threading.Thread(target=idle, daemon=True).start()
    ready.wait()


def main() -> None:
    """python -m bench.sandbox_floor [--rounds N] [--variants a,b,...]:
    the C set-up's variants interleaved in this process, rotating order,
    their p50 and p95 and each one's p50 over the first's."""
    import argparse
    import statistics
    import tempfile
    from pathlib import Path

    from hostcapd import _childsetup  # type: ignore[attr-defined]

    parser = argparse.ArgumentParser(prog="python -m bench.sandbox_floor")
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--variants", default=",".join(n for n in VARIANTS if n not in WARM))
    parser.add_argument("--tenant", default="nocg", help="a bench tenant without a cgroup")
    parser.add_argument("--threads", type=int, default=0, help="idle threads in this process")
    args = parser.parse_args()
    if args.threads:
        _busy_threads(args.threads)
    names = [n.strip() for n in args.variants.split(",")]
    # Each switch's default (a switch returns the previous setting).
    defaults = {}
    for n in {n for _, sw in VARIANTS.values() for n in sw if hasattr(_childsetup, n)}:
        if n == "_forker_trim" and not any(n in VARIANTS[v][1] for v in names):
            continue  # its setter starts a new forker: only for its A/B
        defaults[n] = getattr(_childsetup, n)(True)
        getattr(_childsetup, n)(defaults[n])
    times: dict[str, list[float]] = {n: [] for n in names}
    execs: dict[str, list[float]] = {n: [] for n in names}
    with tempfile.TemporaryDirectory(prefix="hostcap-floor-") as tmp:
        os.chmod(tmp, 0o711)
        daemon = BenchDaemon(Path(tmp) / "bd", (args.tenant,))
        daemon.write_config()
        floor = SandboxFloor(daemon, args.tenant)
        try:
            for name in names:  # warm-up (the forker starts, the pools fill)
                init, switches = VARIANTS[name]
                _switch(switches, defaults)
                for _ in range(5):
                    floor.warm_true() if name in WARM else floor.true(init)
            for r in range(args.rounds):
                for i in range(len(names)):
                    name = names[(r + i) % len(names)]
                    init, switches = VARIANTS[name]
                    run = floor.warm_true if name in WARM else partial(floor.true, init)
                    if _switch(switches, defaults) and init:
                        floor.true(True)  # the new forker's first init, not timed
                    times[name].append(run())
                    execs[name].append(floor.until_exec)
        finally:
            _switch({}, defaults)
            floor.close()
    first = statistics.median(times[names[0]])
    first_exec = statistics.median(execs[names[0]])
    print(f"{args.tenant}, {args.rounds} rounds, load {os.getloadavg()[0]:.1f}; until reaped,")
    print("and until spawn returned (the command exec'd); ratios over the first line's")
    for name in names:
        t = sorted(times[name])
        p50, p95 = statistics.median(t), t[int(len(t) * 0.95) - 1]
        e50 = statistics.median(execs[name])
        print(
            f"{name:32s} reaped p50 {p50 * 1e3:6.3f} ms p95 {p95 * 1e3:6.3f} ms {p50 / first:5.2f}x"
            f" | exec p50 {e50 * 1e3:6.3f} ms {e50 / first_exec:5.2f}x"
        )


if __name__ == "__main__":
    main()
