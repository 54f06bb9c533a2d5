"""The spawner process: receives spawn orders, clones children through the C
set-up, reaps them with wait4 and reports their exits.

Single-threaded by construction (this module never imports gRPC or starts a
thread), so the vfork-style clone in `childsetup.spawn` is safe. It is a child
subreaper and dies with the front-end (PR_SET_PDEATHSIG); its children in
turn die with it, and a child that is still in set-up when it dies sees the
life pipe hang up and does not exec.
"""

from __future__ import annotations

import contextlib
import errno
import os
import selectors
import signal
import socket
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import prctl
from hostcap_proto.names import Rusage

from hostcapd import childsetup
from hostcapd.childsetup import ChildPlan
from hostcapd.spawner import channel, init_report, messages, netns
from hostcapd.spawner.messages import MalformedMessage, RegisterProfile, WarmOrder
from hostcapd.spawner.mntns import MountNamespacePool, Mounts

CLONE_NEWNS = 0x00020000
CLONE_NEWPID = 0x20000000
#: Seconds between looks at the pools when nothing happens (a pooled mount
#: namespace expires and is made again).
IDLE_RECHECK = 10.0
#: Longest a child waits, right before exec, for the front-end's go (its
#: write-ahead audit record is durable); the spawner is blocked meanwhile.
GO_TIMEOUT_MS = 30_000
SO_SNDBUFFORCE = 32
#: A warm child given its request has GO_TIMEOUT_MS and this long to exec.
GO_MARGIN = 5.0
#: Namespace fds of reaped children kept for an idle moment at most.
MAX_RELEASED = 64
#: Pools are not refilled while a child younger than this runs: making a
#: namespace is ~1.5 ms of kernel work that, beside a child that has just
#: exec'd, delayed the front-end hearing of it by ~0.6 ms (a short command's
#: whole life is in that window). Between spawns, or beside older children,
#: they are made as before.
FILL_QUIET = 0.05


@dataclass
class WarmChild:
    """A child set up ahead of need (see WarmOrder), waiting for its request."""

    id: str
    pid: int
    profile: str
    #: Our end of its channel: the request goes there.
    channel: socket.socket
    #: Its report pipe: the ready record, then (with an init) the exit record.
    report_fd: int
    init: bool
    #: The pooled namespace fds it joined (see Spawner.held).
    held: tuple[int, int]
    #: The paths a request's cwd_root may be (their fds are open in it).
    roots: tuple[bytes, ...]
    ready: bool = False
    #: Given a request: by when it must have exec'd, and whether it was
    #: killed for missing that.
    deadline: float = 0.0
    killed: bool = False

    def close(self) -> None:
        self.channel.close()
        _close(self.report_fd)
        self.report_fd = -1


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
    #: When the latest child was started (time.monotonic).
    last_start: float = 0.0
    running: bool = True
    #: Warm children waiting, by id; orders for more, made while idle.
    warm: dict[str, WarmChild] = field(default_factory=dict)
    warm_wanted: deque[tuple[WarmOrder, list[int]]] = field(default_factory=deque)
    #: Warm children given their request, by pid (a spawn takes its warm
    #: child's id: `child.id` is the spawn's).
    going: dict[int, WarmChild] = field(default_factory=dict)
    #: Where the records of warm children are watched (main's loop).
    selector: selectors.BaseSelector | None = None

    # --- orders from the front-end ---

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
                if message.warm:
                    self.spawn_warm(message, fds)
                else:
                    self.spawn(message, fds)
            elif isinstance(message, WarmOrder):
                # Made while idle (idle_work); its fds are kept until then.
                self.warm_wanted.append((message, list(fds)))
                fds.clear()
            elif isinstance(message, messages.Kill):
                self.kill(message.id, message.pid, message.sig)
            elif isinstance(message, RegisterProfile):
                self.add_profile(message)
            elif isinstance(message, messages.DropProfile):
                self.profiles.pop(message.key, None)
                if self.mntns is not None:
                    self.mntns.drop(message.key)
                self.drop_warm(message.key)
            elif isinstance(message, messages.DropWarm):
                self.drop_warm(warm_id=message.id)
            else:
                self.running = False  # Shutdown
        finally:
            for fd in fds:
                with contextlib.suppress(OSError):
                    os.close(fd)

    @property
    def uses_netns(self) -> bool:
        return any(p.clone_flags & netns.CLONE_NEWNET for p in self.profiles.values())

    @property
    def poolable_mounts(self) -> dict[str, Mounts]:
        """profile key -> the mount steps a pooled namespace is made with."""
        return {
            key: p.pooled_mounts for key, p in self.profiles.items() if p.clone_flags & CLONE_NEWNS
        }

    def idle_work(self) -> bool:
        """Release the namespaces of reaped children, or make one namespace
        ahead of need; False when there is nothing to do now."""
        if self.released:
            self.close_released()
            return True
        if self.fill_deferred() > 0:
            return False
        if self.warm_wanted:
            self.make_warm(*self.warm_wanted.popleft())
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
        return False

    def close_released(self) -> None:
        """Drop our reference to reaped children's namespaces: the last one,
        so the kernel tears them down now."""
        _close(*self.released)
        self.released.clear()

    def fill_deferred(self) -> float:
        """Seconds until the pools may be refilled (0: now); see FILL_QUIET."""
        if not self.children and not self.going:
            return 0.0
        return max(0.0, self.last_start + FILL_QUIET - time.monotonic())

    def idle_wait(self) -> float:
        """How long an idle spawner sleeps before its next idle_work."""
        wait = self.fill_deferred() or (0.0 if self.warm_wanted else IDLE_RECHECK)
        return min(wait, self.overdue()) if self.going else wait

    def add_profile(self, profile: RegisterProfile) -> None:
        if self.mntns is not None:
            self.mntns.drop(profile.key)  # made from an older registration
        self.profiles[profile.key] = profile

    def spawn(self, m: messages.SpawnOrder, fds: list[int]) -> None:
        spawn_id = m.id
        profile = self.profiles.get(m.profile)
        if profile is None or len(fds) < 5:
            self.report(messages.Failed(spawn_id, "profile", 0))
            return
        exe_fd, stdin, stdout, stderr, cancel_fd, *rest = fds
        go_fd = rest.pop(0) if m.go else -1
        landlock_fd = rest.pop(0) if m.landlock else -1
        plan, netns_fd, mntns_fd = self.plan(
            profile,
            m.profile,
            landlock_fd=landlock_fd,
            cgroup_fds=rest,
            ids=m.ids,
            loginuid=m.loginuid,
            rlimits=m.rlimits,
            exe_fd=exe_fd if m.by_fd else -1,
            exe_path=m.exe_path,
            argv=m.argv,
            envp=m.envp,
            stdio=(stdin, stdout, stderr),
            cwd_root=m.cwd_root,
            cwd=m.cwd,
            cancel_fd=cancel_fd,
            go_fd=go_fd,
            go_timeout_ms=GO_TIMEOUT_MS,
        )
        try:
            pid, report_fd = childsetup.spawn(plan)
        except childsetup.SetupError as error:
            _close(netns_fd, mntns_fd)
            step, err = error.args
            self.report(messages.Failed(spawn_id, step, err))
            return
        except (OSError, ValueError, TypeError) as error:
            _close(netns_fd, mntns_fd)
            self.report(
                messages.Failed(spawn_id, "prepare", getattr(error, "errno", 0) or 0, str(error))
            )
            return
        if report_fd >= 0:
            self.inits[pid] = report_fd
        # Held until the child is reaped: were ours the last reference, the
        # namespace's teardown (its whole mount tree unmounted) would run in
        # the child's exit, before its parent hears of it: 0.15-0.2 ms of
        # every spawn's wait for its exit status.
        self.held[pid] = (netns_fd, mntns_fd)
        self.children[pid] = spawn_id
        self.last_start = time.monotonic()
        self.report(messages.Started(spawn_id, pid))

    def namespaces(
        self, profile: RegisterProfile, key: str
    ) -> tuple[int, bool, int, Sequence[childsetup.Mount], int, bool]:
        """(clone flags, loopback up, netns fd, mounts, mntns fd, init) of a
        child of `profile`: pooled namespaces where there are, else its own."""
        clone_flags, loopback, netns_fd = profile.clone_flags, profile.loopback_up, -1
        if clone_flags & netns.CLONE_NEWNET and self.netns is not None:
            netns_fd = self.netns.take()
            if netns_fd >= 0:  # a fresh namespace made while idle, loopback up
                clone_flags &= ~netns.CLONE_NEWNET
                loopback = False
        mounts, mntns_fd = profile.mounts, -1
        if clone_flags & CLONE_NEWNS and self.mntns is not None:
            mntns_fd = self.mntns.take(key)
            if mntns_fd >= 0:  # its new root assembled while idle
                clone_flags &= ~CLONE_NEWNS
                mounts = profile.join_mounts
        # With a pid namespace the child stays as its pid 1, a minimal init.
        init = bool(clone_flags & CLONE_NEWPID)
        return clone_flags, loopback, netns_fd, mounts, mntns_fd, init

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
        **request: Any,
    ) -> tuple[ChildPlan, int, int]:
        """A child's plan: `profile`'s sandbox with its namespaces (pooled
        where there are: their fds, returned, are the caller's to hold or
        close), the identity, ruleset and cgroups given, and `request`'s
        fields (the executable, argv, stdio, ...: a warm child's are blanks)."""
        clone_flags, loopback, netns_fd, mounts, mntns_fd, init = self.namespaces(profile, key)
        plan = ChildPlan(
            umask=profile.umask,
            clone_flags=clone_flags,
            mounts=mounts,
            hostname=profile.hostname,
            loopback_up=loopback,
            cgroup_fds=cgroup_fds,
            rlimits=rlimits,
            oom_score_adj=profile.oom_score_adj,
            loginuid=loginuid,
            drop_caps=profile.drop_caps,
            ids=ids,
            no_new_privs=profile.no_new_privs,
            landlock_fd=landlock_fd,
            landlock_rules=profile.landlock_rules if landlock_fd >= 0 else [],
            seccomp_filter=profile.seccomp,
            pdeathsig=profile.pdeathsig,
            life_fd=self.life_read,
            netns_fd=netns_fd,
            mntns_fd=mntns_fd,
            init=init,
            **request,
        )
        return plan, netns_fd, mntns_fd

    # --- the warm path ---

    def make_warm(self, m: WarmOrder, fds: list[int]) -> None:
        """Clone the warm child `m` orders; it reports ready (or the step that
        failed) on its report pipe, watched by the main loop (warm_readable)."""
        try:
            profile = self.profiles.get(m.profile)
            if profile is None:
                self.report(messages.Failed(m.id, "profile", 0))
                return
            landlock_fd = fds[0] if m.landlock and fds else -1
            cgroup_fds = fds[1:] if m.landlock else fds
            ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
            # The whole request fits in its buffer: go() never waits on it.
            with contextlib.suppress(OSError):
                ours.setsockopt(socket.SOL_SOCKET, SO_SNDBUFFORCE, childsetup.WARM_BUFFER + 65536)
            # The request's part comes with its spawn order (spawn_warm).
            plan, netns_fd, mntns_fd = self.plan(
                profile,
                m.profile,
                landlock_fd=landlock_fd,
                cgroup_fds=cgroup_fds,
                ids=m.ids,
                loginuid=m.loginuid,
                rlimits=m.rlimits,
                exe_fd=-1,
                exe_path=None,
                argv=[],
                envp=[],
                stdio=(0, 1, 2),
                cwd_root=None,
                cwd=None,
                cancel_fd=-1,
                warm_channel=theirs.fileno(),
                roots=m.roots,
            )
            try:
                pid, report_fd = childsetup.spawn(plan)
            except (OSError, ValueError, TypeError, childsetup.SetupError) as error:
                ours.close()
                _close(netns_fd, mntns_fd)
                step, err = (
                    error.args if isinstance(error, childsetup.SetupError) else ("prepare", 0)
                )
                self.report(messages.Failed(m.id, step, err, str(error)))
                return
            finally:
                theirs.close()
        finally:
            _close(*fds)
        child = WarmChild(
            m.id, pid, m.profile, ours, report_fd, plan.init, (netns_fd, mntns_fd), m.roots
        )
        self.warm[m.id] = child
        if self.selector is not None:
            self.selector.register(report_fd, selectors.EVENT_READ, ("warm", m.id))
        else:
            self.warm_readable(m.id)

    def warm_readable(self, warm_id: str) -> None:
        """A warm child's first record: ready, or the step it failed at."""
        child = self.warm.get(warm_id)
        if child is None or child.ready:
            return
        if self.selector is not None:
            with contextlib.suppress(KeyError, ValueError):
                self.selector.unregister(child.report_fd)
        try:
            data = os.read(child.report_fd, 24)
        except OSError:
            data = b""
        failure = init_report.parse_ready(data)
        if failure is None:
            child.ready = True
            self.report(messages.Warmed(warm_id, child.pid))
            return
        del self.warm[warm_id]
        self._forget(child)
        self.report(messages.Failed(warm_id, failure[0], failure[1], "the warm child failed"))

    def _forget(self, child: WarmChild) -> None:
        """A warm child that failed or is dropped: it exits (or has) and is
        reaped as any child; its namespaces are released then."""
        self.held[child.pid] = child.held
        child.close()

    def spawn_warm(self, m: messages.SpawnOrder, fds: list[int]) -> None:
        """Give spawn order `m` to its warm child, without waiting: Started
        (or Failed) is reported when its report pipe says (go_done)."""
        child = self.warm.pop(m.id, None)
        if child is None or child.profile != m.profile or len(fds) != 6 or not child.ready:
            if child is not None:
                self._kill_warm(child)
            self.report(messages.Failed(m.id, "warm", errno.ENOENT, "no warm child for it"))
            return
        exe_fd, stdin, stdout, stderr, cancel_fd, go_fd = fds
        try:
            if m.cwd_root is not None and m.cwd_root not in child.roots:
                raise ValueError("the cwd's root is not one of the warm child's")
            payload = childsetup.pack_request(
                by_fd=m.by_fd,
                root=-1 if m.cwd_root is None else child.roots.index(m.cwd_root),
                cwd=m.cwd,
                exe_path=None if m.by_fd else m.exe_path,
                rlimits=m.rlimits,
                argv=m.argv,
                envp=m.envp,
            )
            child_fds = [stdin, stdout, stderr, cancel_fd, go_fd]
            if m.by_fd:
                child_fds.append(exe_fd)
            childsetup.go(child.channel.fileno(), payload, child_fds)
        except (OSError, ValueError) as error:
            self._kill_warm(child)
            self.report(messages.Failed(m.id, "warm", getattr(error, "errno", 0) or 0, str(error)))
            return
        # A process of its uid outside any sandbox may have stopped it while
        # it waited (a sandboxed one cannot signal it: landlock's scope).
        with contextlib.suppress(ProcessLookupError):
            os.kill(child.pid, signal.SIGCONT)
        child.channel.close()
        child.deadline = time.monotonic() + GO_TIMEOUT_MS / 1000 + GO_MARGIN
        self.going[child.pid] = child
        if self.selector is not None:
            self.selector.register(child.report_fd, selectors.EVENT_READ, ("go", child.pid))
        self.last_start = time.monotonic()

    def go_done(self, pid: int) -> None:
        """A warm child given its request said what became of it (or died, or
        overran its deadline): Started, or Failed."""
        child = self.going.pop(pid)
        spawn_id = child.id
        if self.selector is not None:
            with contextlib.suppress(KeyError, ValueError):
                self.selector.unregister(child.report_fd)
        try:
            os.set_blocking(child.report_fd, False)
            data = os.read(child.report_fd, 24)  # the set-up record only
        except OSError:
            data = b""
        if child.killed:
            failure: tuple[str, int] | None = ("warm", errno.ETIMEDOUT)
        elif child.init:
            failure = init_report.parse_exec(data)
        else:  # the pipe hung up at the exec, or a record says why not
            failure = None if data == b"" else init_report.parse_exec(data) or ("warm", 0)
        self.held[pid] = child.held  # released once reaped
        if failure is not None:
            child.close()
            self.report(messages.Failed(spawn_id, failure[0], failure[1]))
            return
        if child.init:
            self.inits[pid] = child.report_fd
        else:
            _close(child.report_fd)
        child.report_fd = -1
        self.children[pid] = spawn_id
        self.report(messages.Started(spawn_id, pid))

    def overdue(self) -> float:
        """Kill warm children given a request that did not exec in time; the
        seconds until the next such deadline (IDLE_RECHECK if none)."""
        now, wait = time.monotonic(), IDLE_RECHECK
        for pid, child in self.going.items():
            if child.deadline <= now and not child.killed:
                child.killed = True
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            elif not child.killed:
                wait = min(wait, child.deadline - now)
        return wait

    def _kill_warm(self, child: WarmChild) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(child.pid, signal.SIGKILL)
        self._forget(child)

    def drop_warm(self, profile_key: str | None = None, warm_id: str | None = None) -> None:
        """Kill the warm children (of one profile, or one): they never outlive
        their profile, and one no spawn takes is not left waiting."""
        for key, child in list(self.warm.items()):
            if (profile_key is None or child.profile == profile_key) and (
                warm_id is None or key == warm_id
            ):
                del self.warm[key]
                if self.selector is not None and not child.ready:
                    with contextlib.suppress(KeyError, ValueError):
                        self.selector.unregister(child.report_fd)
                self._kill_warm(child)
        kept: deque[tuple[WarmOrder, list[int]]] = deque()
        for order, fds in self.warm_wanted:
            if (profile_key is None or order.profile == profile_key) and (
                warm_id is None or order.id == warm_id
            ):
                _close(*fds)
            else:
                kept.append((order, fds))
        self.warm_wanted = kept

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
        while not block or self.children or self.warm or self.going:
            try:
                pid, status, usage = os.wait4(-1, 0 if block else os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            if pid in self.going:  # what its report pipe says comes first
                self.go_done(pid)
            self.released.extend(fd for fd in self.held.pop(pid, ()) if fd >= 0)
            waiting = next((c for c in self.warm.values() if c.pid == pid), None)
            if waiting is not None:
                self.warm_reaped(waiting)
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
            if len(self.released) > MAX_RELEASED:  # never idle: do not pile them up
                self.close_released()

    def warm_reaped(self, child: WarmChild) -> None:
        """A warm child died waiting for its request (killed from outside:
        dropped ones are forgotten first): the front-end drops it too."""
        del self.warm[child.id]
        if self.selector is not None and not child.ready:
            with contextlib.suppress(KeyError, ValueError):
                self.selector.unregister(child.report_fd)
        self.released.extend(fd for fd in child.held if fd >= 0)
        child.close()
        self.report(messages.WarmLost(child.id))

    def report(self, message: messages.FromSpawner) -> None:
        try:
            channel.send(self.sock, message.to_wire())
        except OSError:
            self.running = False  # the front-end is gone; we are about to die too

    def kill_all(self) -> None:
        self.drop_warm()
        for pid in self.going:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        for pid in list(self.children):
            for target in (pid, -pid):
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(target, signal.SIGKILL)


def main(argv: list[str]) -> int:
    fd, parent = int(argv[0]), int(argv[1])
    # Dies with the front-end; terminal signals are the front-end's to handle.
    prctl.set_pdeathsig(signal.SIGKILL)
    if os.getppid() != parent:
        return 1
    prctl.set_child_subreaper(True)
    prctl.set_name("hostcapd-spawn")
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGPIPE):
        signal.signal(sig, signal.SIG_IGN)

    sock = socket.socket(fileno=fd)
    sock.setblocking(True)
    # The life pipe: we hold the write end for as long as we live; a child
    # still in set-up when we die sees the read end hang up and does not exec.
    life_read, life_write = os.pipe2(os.O_CLOEXEC)
    wake_read, wake_write = os.pipe2(os.O_CLOEXEC | os.O_NONBLOCK)
    signal.set_wakeup_fd(wake_write, warn_on_full_buffer=False)
    signal.signal(signal.SIGCHLD, lambda *_: None)

    root = os.geteuid() == 0
    selector = selectors.DefaultSelector()
    spawner = Spawner(
        sock,
        life_read,
        netns=netns.NetnsPool() if root else None,
        mntns=MountNamespacePool() if root else None,
        selector=selector,
    )
    selector.register(sock, selectors.EVENT_READ, "sock")
    selector.register(wake_read, selectors.EVENT_READ, "wake")
    channel.send(sock, messages.Hello(os.getpid()).to_wire())
    busy = True
    try:
        while spawner.running:
            if spawner.going:
                spawner.overdue()
            # Idle (nothing to read at once): make namespaces ahead of need.
            events = selector.select(timeout=0 if busy else spawner.idle_wait())
            if not events:
                busy = spawner.idle_work()
                continue
            busy = True
            for key, _ in events:
                if type(key.data) is tuple:  # a warm child's record
                    kind, which = key.data
                    if kind == "warm":
                        spawner.warm_readable(which)
                    elif which in spawner.going:
                        spawner.go_done(which)
                elif key.data == "wake":
                    try:
                        while os.read(wake_read, 4096):
                            pass
                    except BlockingIOError:
                        pass
                    spawner.reap()
                else:
                    received = channel.receive(sock)
                    if received is None:
                        spawner.running = False
                        break
                    spawner.handle(*received)
            spawner.reap()
    finally:
        spawner.kill_all()
        spawner.reap(block=True)
        os.close(life_write)
    return 0


def _close(*fds: int) -> None:
    for fd in fds:
        if fd >= 0:
            os.close(fd)
