"""The spawner process: receives spawn orders, clones children through the C
set-up, reaps them with wait4 and reports their exits. A spawn order starts a
fresh child (spawner/fresh.py) or gives its request to a warm one
(spawner/warm.py): two implementations of one `ChildStart`.

Single-threaded by construction (this module never imports gRPC or starts a
thread), so the vfork-style clone in `childsetup.spawn` is safe. It is a child
subreaper and dies with the daemon (PR_SET_PDEATHSIG); its children in
turn die with it, and a child that is still in set-up when it dies sees the
life pipe hang up and does not exec.
"""

from __future__ import annotations

import contextlib
import os
import selectors
import signal
import socket
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import prctl
from hostcap_proto.names import Rusage

from hostcapd import childsetup
from hostcapd.childsetup import ChildPlan
from hostcapd.spawner import channel, environments, init_report, messages, netns
from hostcapd.spawner.fresh import ChildStart, FreshStart, close_fds
from hostcapd.spawner.maker import MAX_ASKS, PoolMaker
from hostcapd.spawner.messages import MalformedMessage, RegisterProfile, WarmOrder
from hostcapd.spawner.mntns import MountNamespacePool, Mounts
from hostcapd.spawner.warm import WarmChildren

CLONE_NEWNS = 0x00020000
CLONE_NEWPID = 0x20000000
#: Seconds between looks at the pools when nothing happens (a pooled mount
#: namespace expires and is made again).
IDLE_RECHECK = 10.0
#: Namespace fds of reaped children kept for an idle moment at most.
MAX_RELEASED = 64
#: Pools are not refilled while a child younger than this runs: making a
#: namespace is ~1.5 ms of kernel work that, beside a child that has just
#: exec'd, delayed the daemon hearing of it by ~0.6 ms (a short command's
#: whole life is in that window). Between spawns, or beside older children,
#: they are made as before.
FILL_QUIET = 0.05
#: An empty pool is asked of the pool maker beside a young child too (see
#: idle_work).
ASK_AT_ONCE = True
#: A spawn ordered after this long without one (no order, no exit: requests
#: spaced out, as an agent's tool calls come) has its idle work after its
#: exit put off for ANSWER_WINDOW: the reaped child's namespaces torn down
#: (the pool maker, a kworker's `cleanup_net`, an expedited RCU grace
#: period), its warm child's successor made, the pools refilled, all of which
#: ran on the two CPUs the answer takes on its way out (the root, its
#: front-end, the client). Back to back, nothing is put off: there is no idle
#: moment to put it in (the next request's way in would pay it), and a warm
#: child made later was not ready for the spawn after the next. A warm child
#: put off and not made before the next spawn came is made beside it
#: (`Spawner.urgent`), not FILL_QUIET later, for the same reason.
SPACED = 0.01
ANSWER_WINDOW = 0.0015


@dataclass
class Spawner:
    sock: socket.socket
    life_read: int
    #: A tenant's prepared sandbox values, registered once, used per spawn.
    profiles: dict[str, RegisterProfile] = field(default_factory=dict)
    #: live main processes: pid -> spawn id
    children: dict[int, str] = field(default_factory=dict)
    #: Network namespaces made while idle (root only).
    netns: netns.NetnsPool | None = None
    #: Mount namespaces with each profile's new root assembled (root only).
    mntns: MountNamespacePool | None = None
    #: pid -> the pooled namespace fds its child joined, held until it is reaped
    held: dict[int, tuple[int, int]] = field(default_factory=dict)
    #: pid -> the report pipe of the child that is an init (pid namespace)
    inits: dict[int, int] = field(default_factory=dict)
    #: Namespace fds of reaped children, closed while idle (see `reap`).
    released: list[int] = field(default_factory=list)
    #: Session environments' namespaces, by environment id (issue 30).
    envs: dict[str, environments.Environment] = field(default_factory=dict)
    #: When the latest child was started (time.monotonic).
    last_start: float = 0.0
    #: When the latest spawn was ordered or its exit reported (time.monotonic).
    last_activity: float = 0.0
    #: The latest spawn was ordered after SPACED without one.
    spaced: bool = False
    #: Until when idle work waits for the answer of a spaced spawn whose exit
    #: was reported (time.monotonic; see ANSWER_WINDOW).
    answer_until: float = 0.0
    #: Warm children ordered before the latest spawn came (put off by its
    #: predecessor's ANSWER_WINDOW): made beside it, not after FILL_QUIET.
    urgent: int = 0
    running: bool = True
    #: Where the records of warm children are watched (main's loop).
    selector: selectors.BaseSelector | None = None
    #: Makes the pools' namespaces and tears down released ones, at nice
    #: 19 (spawner/maker.py); None: the spawner does it itself.
    maker: PoolMaker | None = None
    #: Children set up ahead of need (spawner/warm.py).
    warm: WarmChildren = field(init=False)
    #: How an order starts its child: fresh, or by its warm child.
    starts: dict[bool, ChildStart] = field(init=False)
    #: `_pools()`, kept until a profile is added or dropped.
    _pooled: tuple[bool, dict[str, Mounts]] | None = field(default=None, init=False)

    def __post_init__(self) -> None:
        self.warm = WarmChildren(self)
        self.starts = {False: FreshStart(self), True: self.warm}

    # --- orders from the daemon ---

    def handle(self, wire: messages.Wire, fds: list[int]) -> None:
        try:
            try:
                message = messages.to_spawner(wire)
            except MalformedMessage as error:
                # Nothing is done on half a message; a spawn it named fails.
                if error.spawn_id is not None:
                    self.report(messages.Failed(error.spawn_id, "prepare", 0, str(error)))
                else:
                    self.report(messages.OrderRefused(str(error)))
                return
            if isinstance(message, messages.SpawnOrder):
                now = time.monotonic()
                self.spaced = now - self.last_activity >= SPACED
                self.last_activity, self.answer_until = now, 0.0
                self.urgent = len(self.warm.wanted)
                self.starts[message.warm].start(message, fds)
            elif isinstance(message, WarmOrder):
                self.warm.order(message, fds)  # made while idle (idle_work)
            elif isinstance(message, messages.Kill):
                self.kill(message.id, message.pid, message.sig)
            elif isinstance(message, RegisterProfile):
                self.add_profile(message)
            elif isinstance(message, messages.DropProfile):
                self.profiles.pop(message.key, None)
                self._pooled = None
                if self.mntns is not None:
                    self.mntns.drop(message.key)
                self.warm.drop(message.key)
            elif isinstance(message, messages.DropWarm):
                self.warm.drop(warm_id=message.id)
            elif isinstance(message, messages.OpenEnv):
                self.open_env(message, fds)
            elif isinstance(message, messages.CloseEnv):
                env = self.envs.pop(message.id, None)
                if env is not None:
                    env.close()
            else:
                self.running = False  # Shutdown
        finally:
            for fd in fds:
                with contextlib.suppress(OSError):
                    os.close(fd)

    def _pools(self) -> tuple[bool, dict[str, Mounts]]:
        """(uses_netns, poolable_mounts), made again after a profile changed."""
        if self._pooled is None:
            nets = any(p.clone_flags & netns.CLONE_NEWNET for p in self.profiles.values())
            mounts: dict[str, Mounts] = {
                key: p.pooled_mounts
                for key, p in self.profiles.items()
                if p.clone_flags & CLONE_NEWNS
            }
            self._pooled = (nets, mounts)
        return self._pooled

    @property
    def uses_netns(self) -> bool:
        return self._pools()[0]

    @property
    def poolable_mounts(self) -> dict[str, Mounts]:
        """profile key -> the mount steps a pooled namespace is made with."""
        return self._pools()[1]

    def idle_work(self) -> bool:
        """Release the namespaces of reaped children, or make one namespace
        ahead of need; False when there is nothing to do now."""
        # A pool found empty is asked for at once, beside a young child too
        # (ASK_AT_ONCE): a spawn that finds it empty makes its own namespace
        # on its path. A pool only short waits for a quiet moment. What is
        # asked at one time goes to the maker in one message.
        if self.answer_until > time.monotonic():
            return False  # a spaced spawn's answer on its way (ANSWER_WINDOW)
        if self.released:
            self.close_released()
            return True
        if ASK_AT_ONCE and self.ask_maker(empty_only=True):
            return True
        if self.urgent > 0:
            self.urgent -= 1
            if self.warm.make_one():
                return True
        if self.fill_deferred() > 0:
            return False
        if self.warm.make_one():
            return True
        if self.ask_maker():
            return True
        if self.netns is not None and self.netns.wants_more and self.uses_netns:
            self.netns.fill_one()
            return True
        if self.mntns is not None:
            poolable = self.poolable_mounts
            key = self.mntns.wanted(poolable)
            if key is not None:
                self.mntns.fill_one(key, poolable[key])
                return True
        for env in self.envs.values():
            if env.wants_copy:
                env.fill_copy()
                return True
        return False

    def ask_maker(self, empty_only: bool = False) -> bool:
        """Ask the pool maker, in one message, for what the pools want now
        (one for each that is empty, nothing asked for it either, if
        `empty_only`; else up to each pool's size); False if nothing is
        wanted or it cannot be sent (the caller makes them itself)."""
        if self.maker is None:
            return False
        asks: list[tuple[str, str, Mounts]] = []
        nets = 0
        if self.netns is not None and self.uses_netns:
            nets = self.netns.wanted(empty_only)
            asks += [("n", "", ())] * nets
        keys: list[str] = []
        if self.mntns is not None:
            poolable = self.poolable_mounts
            keys = self.mntns.wanted_all(poolable, empty_only)
            asks += [("m", key, poolable[key]) for key in keys]
        asks = asks[:MAX_ASKS]
        if not asks or not self.maker.ask(asks):
            return False
        if self.netns is not None:
            self.netns.pending += min(nets, len(asks))
        if self.mntns is not None:
            for key in keys[: max(0, len(asks) - nets)]:
                self.mntns.asked(key)
        return True

    def close_released(self) -> None:
        """Drop our reference to reaped children's namespaces: the last one,
        so the kernel tears them down now (the pool maker's, if it runs)."""
        if self.maker is not None:
            self.maker.release(self.released)
        close_fds(*self.released)
        self.released.clear()

    def from_maker(self) -> None:
        """The pool maker's namespaces made since (or its end: the spawner
        makes its own from then on)."""
        assert self.maker is not None
        try:
            for kind, key, fd, error, taken, template in self.maker.replies():
                if kind == "n" and self.netns is not None:
                    self.netns.made(fd, error)
                elif kind == "m" and self.mntns is not None:
                    mounts = self.poolable_mounts.get(key, ())
                    self.mntns.made(key, fd, error, taken, template, mounts)
                elif fd >= 0:
                    os.close(fd)
        except EOFError:
            if self.selector is not None:
                with contextlib.suppress(KeyError, ValueError):
                    self.selector.unregister(self.maker.sock)
            self.maker.close()
            self.maker = None
            if self.netns is not None:
                self.netns.pending = 0
            if self.mntns is not None:
                self.mntns.forget_pending()

    def fill_deferred(self) -> float:
        """Seconds until the pools may be refilled (0: now); see FILL_QUIET."""
        if not self.children and not self.warm.going:
            return 0.0
        return max(0.0, self.last_start + FILL_QUIET - time.monotonic())

    def idle_wait(self) -> float:
        """How long an idle spawner sleeps before its next idle_work."""
        answer = self.answer_until - time.monotonic()
        if answer > 0:
            return min(answer, self.warm.overdue())
        wait = self.fill_deferred() or (0.0 if self.warm.wanted else IDLE_RECHECK)
        return min(wait, self.warm.overdue())

    def open_env(self, message: messages.OpenEnv, fds: Sequence[int] = ()) -> None:
        profile = self.profiles.get(message.profile)
        if message.id in self.envs:
            self.report(messages.OrderRefused(f"environment {message.id} is open already"))
            return
        env = (
            environments.make(profile, fds[0] if message.netns and fds else -1)
            if profile is not None
            else environments.Environment(failed="no such profile")
        )
        if env.failed:
            self.report(messages.Failed(message.id, "environment", 0, env.failed))
            return
        self.envs[message.id] = env
        self.report(messages.EnvOpened(message.id))

    def add_profile(self, profile: RegisterProfile) -> None:
        if self.mntns is not None:
            self.mntns.drop(profile.key)  # made from an older registration
        self.profiles[profile.key] = profile
        self._pooled = None

    def env_plan(self, profile: RegisterProfile, env_id: str) -> dict[str, Any]:
        """A child's namespaces in environment `env_id`: the environment's
        network, IPC and (a copy of its) mount namespace, its own pid and UTS
        ones. Its fds stay the environment's (never closed per spawn), but a
        copy of its mount namespace made ahead (`mntns_fd` without
        `mntns_copy`), which is the spawn's to hold and close.
        Raises SetupError("environment", ...) for an environment not open or
        whose namespaces could not be made."""
        env = self.envs.get(env_id)
        if env is None or env.failed:
            raise childsetup.SetupError(
                "environment", 0, env.failed if env is not None else "no such environment"
            )
        flags = profile.clone_flags
        mounts: Sequence[childsetup.Mount] = profile.mounts
        if env.netns >= 0:
            flags &= ~netns.CLONE_NEWNET
        if env.ipcns >= 0:
            flags &= ~environments.CLONE_NEWIPC
        mntns_fd, copy = env.mntns, -1
        if env.mntns >= 0:
            flags &= ~CLONE_NEWNS
            mounts = profile.join_mounts
            copy = env.take_copy()  # made while idle: joined, not made
        return {
            "clone_flags": flags,
            "loopback_up": profile.loopback_up and env.netns < 0,
            "netns_fd": env.netns,
            "ipcns_fd": env.ipcns,
            "mntns_fd": copy if copy >= 0 else mntns_fd,
            "mntns_copy": env.mntns >= 0 and copy < 0,
            "mounts": mounts,
            "init": bool(flags & CLONE_NEWPID),
        }

    def namespaces(
        self, profile: RegisterProfile, key: str, given_netns: int = -1
    ) -> tuple[int, bool, int, Sequence[childsetup.Mount], int, bool, int]:
        """(clone flags, loopback up, netns fd, mounts, mntns fd, init, the
        template to copy or -1) of a child of `profile`: pooled namespaces
        where there are, else its own (a copy of its profile's template if
        one is held); `given_netns`, the order's (the egress proxy's
        listener in it), first."""
        clone_flags, loopback, netns_fd = profile.clone_flags, profile.loopback_up, -1
        if given_netns >= 0:
            netns_fd = given_netns
            clone_flags &= ~netns.CLONE_NEWNET
            loopback = False
        elif clone_flags & netns.CLONE_NEWNET and self.netns is not None:
            netns_fd = self.netns.take()
            if netns_fd >= 0:  # a fresh namespace made while idle, loopback up
                clone_flags &= ~netns.CLONE_NEWNET
                loopback = False
        mounts, mntns_fd, base = profile.mounts, -1, -1
        if clone_flags & CLONE_NEWNS and self.mntns is not None:
            mntns_fd = self.mntns.take(key)
            if mntns_fd >= 0:  # its new root assembled while idle
                clone_flags &= ~CLONE_NEWNS
                mounts = profile.join_mounts
            elif (copy := self.mntns.copy_base(key, profile.pooled_mounts)) is not None:
                # None ready: a copy of its template, made in its own set-up.
                base, steps = copy
                clone_flags &= ~CLONE_NEWNS
                mounts = (*steps, *profile.join_mounts)
        # With a pid namespace the child stays as its pid 1, a minimal init.
        init = bool(clone_flags & CLONE_NEWPID)
        return clone_flags, loopback, netns_fd, mounts, mntns_fd, init, base

    def plan(
        self,
        profile: RegisterProfile,
        key: str,
        *,
        landlock_fd: int,
        cgroup_fds: Sequence[int],
        ids: tuple[int, int] | None,
        loginuid: bytes | None,
        rlimits: Sequence[childsetup.RLimit],
        given_netns: int = -1,
        env: str = "",
        **request: Any,
    ) -> tuple[ChildPlan, int, int]:
        """A child's plan: `profile`'s sandbox with its namespaces (pooled
        where there are: their fds, returned, are the caller's to hold or
        close), the identity, ruleset and cgroups given, and `request`'s
        fields (the executable, argv, stdio, ...: a warm child's are blanks)."""
        namespaces: dict[str, Any]
        if env:
            # The environment's namespaces: not the caller's to hold or close
            # (an egress listener's namespace, if one came, is not used).
            if given_netns >= 0:
                os.close(given_netns)
            namespaces = self.env_plan(profile, env)
            # A copy of its mount namespace, if one was ready, is this spawn's.
            held = (-1, -1 if namespaces["mntns_copy"] else namespaces["mntns_fd"])
        else:
            clone_flags, loopback, netns_fd, mounts, mntns_fd, init, base = self.namespaces(
                profile, key, given_netns
            )
            namespaces = {
                "clone_flags": clone_flags,
                "mounts": mounts,
                "loopback_up": loopback,
                "netns_fd": netns_fd,
                "mntns_fd": mntns_fd if base < 0 else base,  # a template stays the pool's
                "mntns_copy": base >= 0,
                "init": init,
            }
            held = (netns_fd, mntns_fd)
        plan = ChildPlan(
            umask=profile.umask,
            hostname=profile.hostname,
            cgroup_fds=cgroup_fds,
            rlimits=rlimits,
            oom_score_adj=profile.oom_score_adj,
            loginuid=loginuid,
            drop_caps=profile.drop_caps,
            ids=ids,
            no_new_privs=profile.no_new_privs,
            landlock_fd=landlock_fd,
            landlock_rules=[
                *profile.landlock_rules,
                *(profile.tty_landlock_rules if request.get("tty_fd", -1) >= 0 else ()),
            ]
            if landlock_fd >= 0
            else [],
            seccomp_filter=profile.seccomp,
            pdeathsig=profile.pdeathsig,
            life_fd=self.life_read,
            **namespaces,
            **request,
        )
        return plan, *held

    def kill(self, spawn_id: str, pid: int, sig: int) -> None:
        # Only a child we have not reaped yet: its pid cannot have been reused.
        if self.children.get(pid) != spawn_id:
            return
        # An init forwards what it gets to the command (once: not its group too).
        targets = (pid,) if pid in self.inits and sig != signal.SIGKILL else (pid, -pid)
        for target in targets:  # the main process (init of its pid ns) and its group
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(target, sig)

    # --- children ---

    def reap(self, block: bool = False) -> None:
        """Reap every exited child (all of them, waiting, when block is set)."""
        while not block or self.children or self.warm:
            try:
                pid, status, usage = self._wait(block)
            except ChildProcessError:
                return
            if pid == 0:
                return
            was_waiting = self.warm.reaped(pid)
            self.released.extend(fd for fd in self.held.pop(pid, ()) if fd >= 0)
            if was_waiting:
                continue
            spawn_id = self.children.pop(pid, None)
            report_fd = self.inits.pop(pid, -1)
            if spawn_id is None:
                continue  # an orphan reparented to us (no pid namespace): already gone
            command = init_report.read_and_close(report_fd) if report_fd >= 0 else None
            if command is not None:
                # What the command did (an init cannot die by its signal); the
                # times are the whole tree's, the peak the command's own.
                status = command.status
                usage_maxrss = command.maxrss_kib
            else:
                usage_maxrss = usage.ru_maxrss
            rusage = Rusage.from_wait4(
                usage.ru_utime,
                usage.ru_stime,
                usage_maxrss,
                usage.ru_nvcsw,
                usage.ru_nivcsw,
                usage.ru_inblock,
                usage.ru_oublock,
            )
            self.report(messages.Exited(spawn_id, pid, status, rusage))
            self.last_activity = time.monotonic()
            if self.spaced and not self.children:
                self.answer_until = self.last_activity + ANSWER_WINDOW
            if len(self.released) > MAX_RELEASED:  # never idle: do not pile them up
                self.close_released()

    def _wait(self, block: bool) -> tuple[int, int, Any]:
        """wait4 of the next exited child ((0, 0, None): none yet). A spawn's
        main process that is not an init (no pid namespace) has its process
        group killed first, while its zombie still holds the group's id (no
        other process can have it): whatever it left behind in its group dies
        with it before its exit is reported, as in a pid namespace, where the
        kernel does it. (Its cgroup, if it has one, is the root's to kill.)"""
        flags = os.WEXITED | os.WNOWAIT | (0 if block else os.WNOHANG)
        exited = os.waitid(os.P_ALL, 0, flags)
        if exited is None:
            return 0, 0, None
        pid = exited.si_pid
        if pid in self.children and pid not in self.inits:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGKILL)  # its setsid made it the group's leader
        return os.wait4(pid, 0)

    def report(self, message: messages.FromSpawner) -> None:
        try:
            channel.send(self.sock, message.to_wire())
        except OSError:
            self.running = False  # the daemon is gone; we are about to die too

    def kill_all(self) -> None:
        self.warm.kill_all()
        for pid in list(self.children):
            for target in (pid, -pid):
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(target, signal.SIGKILL)


def main(argv: list[str]) -> int:
    fd, parent = int(argv[0]), int(argv[1])
    # Dies with the daemon; terminal signals are the daemon's to handle.
    prctl.set_pdeathsig(signal.SIGKILL)
    if os.getppid() != parent:
        return 1
    prctl.set_child_subreaper(True)
    prctl.set_name("hostcapd-spawn")
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGPIPE):
        signal.signal(sig, signal.SIG_IGN)

    root = os.geteuid() == 0
    # Before any child or pipe of ours: it holds nothing but its socket.
    maker = PoolMaker.start(close_in_child=[fd]) if root else None
    sock = socket.socket(fileno=fd)
    sock.setblocking(True)
    # The life pipe: we hold the write end for as long as we live; a child
    # still in set-up when we die sees the read end hang up and does not exec.
    life_read, life_write = os.pipe2(os.O_CLOEXEC)
    wake_read, wake_write = os.pipe2(os.O_CLOEXEC | os.O_NONBLOCK)
    signal.set_wakeup_fd(wake_write, warn_on_full_buffer=False)
    signal.signal(signal.SIGCHLD, lambda *_: None)

    selector = selectors.DefaultSelector()
    spawner = Spawner(
        sock,
        life_read,
        netns=netns.NetnsPool() if root else None,
        mntns=MountNamespacePool() if root else None,
        selector=selector,
        maker=maker,
    )
    if maker is not None:
        selector.register(maker.sock, selectors.EVENT_READ, spawner.from_maker)
    selector.register(sock, selectors.EVENT_READ, "sock")
    selector.register(wake_read, selectors.EVENT_READ, "wake")
    channel.send(sock, messages.Hello(os.getpid()).to_wire())
    busy = True
    try:
        while spawner.running:
            spawner.warm.overdue()
            # Idle (nothing to read at once): make namespaces ahead of need.
            events = selector.select(timeout=0 if busy else spawner.idle_wait())
            if not events:
                busy = spawner.idle_work()
                continue
            busy = True
            for key, _ in events:
                if callable(key.data):  # a child's record (see spawner/warm.py)
                    key.data()
                elif key.data == "wake":
                    # One read: a byte per SIGCHLD, far fewer than 4096 come
                    # between two selects (any left wake the next one).
                    with contextlib.suppress(BlockingIOError):
                        os.read(wake_read, 4096)
                    spawner.reap()  # every exit comes with its SIGCHLD's byte
                else:
                    received = channel.receive(sock)
                    if received is None:
                        spawner.running = False
                        break
                    spawner.handle(*received)
    finally:
        spawner.kill_all()
        spawner.reap(block=True)
        os.close(life_write)
    return 0
