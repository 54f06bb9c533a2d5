"""The spawner's warm children (decision 0026): cloned ahead of need from a
WarmOrder, each waits after its filters for the request's part; a spawn order
with `warm` gives it that part (`start`, the warm implementation of the
spawner's `ChildStart`), and its report pipe says when the command exec'd.

    warm = WarmChildren(spawner)
    warm.make(order, fds)        # while idle: clone it; "ready" comes on its pipe
    warm.start(spawn_order, fds) # give it the request; Started/Failed follow
    warm.reaped(pid)             # True if it was a waiting one (WarmLost sent)

A warm child with an init has cloned its command's process ahead, and that
process waits for the request in its own session (childsetup_c/warm.c). A
process of its uid outside any sandbox may have stopped either while they
waited: a warm child that has not said what became of its request
NUDGE_AFTER after it is resumed (both processes; see `overdue`).
"""

from __future__ import annotations

import contextlib
import errno
import math
import os
import selectors
import signal
import socket
import time
from collections import deque
from dataclasses import dataclass
from functools import partial

from hostcapd import childsetup
from hostcapd.spawner import init_report, messages
from hostcapd.spawner.fresh import GO_TIMEOUT_MS, Parent, close_fds
from hostcapd.spawner.messages import WarmOrder

SO_SNDBUFFORCE = 32
#: A warm child given its request has GO_TIMEOUT_MS and this long to exec.
GO_MARGIN = 5.0
#: A warm child that has not said what became of its request this long
#: after it is resumed, in case it was stopped (see overdue).
NUDGE_AFTER = 0.1


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
    #: Given a request: when it is resumed if it has not said by then (once).
    nudge: float = math.inf

    def close(self) -> None:
        self.channel.close()
        close_fds(self.report_fd)
        self.report_fd = -1


def _exited(pid: int) -> bool:
    """Has our child `pid` exited (a zombie not reaped yet)? It stays to be
    reaped as any child (WNOWAIT)."""
    try:
        return os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
    except ChildProcessError:
        return True  # reaped already


def resume_command(pid: int) -> None:
    """SIGCONT to the command's process warm init `pid` cloned ahead (its one
    child: a process of its uid outside any sandbox may have stopped it while
    it waited; the init, waiting for its exec, cannot resume it). A live
    init's child is not reaped before the init ends, so its pid is its own."""
    try:
        fd = os.open(f"/proc/{pid}/task/{pid}/children", os.O_RDONLY | os.O_CLOEXEC)
        try:
            children = os.read(fd, 64).split()
        finally:
            os.close(fd)
        if len(children) == 1 and not _exited(pid):
            os.kill(int(children[0]), signal.SIGCONT)
    except (OSError, ValueError):
        pass


class WarmChildren:
    """The warm children of one spawner: ordered, waiting, and given a request."""

    def __init__(self, spawner: Parent) -> None:
        self.spawner = spawner
        #: Warm children waiting, by id; orders for more, made while idle.
        self.waiting: dict[str, WarmChild] = {}
        self.wanted: deque[tuple[WarmOrder, list[int]]] = deque()
        #: Warm children given their request, by pid (a spawn takes its warm
        #: child's id: `child.id` is the spawn's).
        self.going: dict[int, WarmChild] = {}

    def __bool__(self) -> bool:
        """Children of ours alive (waiting or given a request)."""
        return bool(self.waiting or self.going)

    def order(self, m: WarmOrder, fds: list[int]) -> None:
        """Made while idle (`make_one`); its fds are kept until then."""
        self.wanted.append((m, list(fds)))
        fds.clear()

    def make_one(self) -> bool:
        """Make one ordered warm child; False if none is wanted."""
        if not self.wanted:
            return False
        self.make(*self.wanted.popleft())
        return True

    def _watch(self, fd: int, on_readable: partial[None]) -> None:
        if self.spawner.selector is not None:
            self.spawner.selector.register(fd, selectors.EVENT_READ, on_readable)
        else:
            on_readable()

    def _unwatch(self, fd: int) -> None:
        if self.spawner.selector is not None:
            with contextlib.suppress(KeyError, ValueError):
                self.spawner.selector.unregister(fd)

    def make(self, m: WarmOrder, fds: list[int]) -> None:
        """Clone the warm child `m` orders; it reports ready (or the step that
        failed) on its report pipe, watched by the main loop (`readable`)."""
        spawner = self.spawner
        try:
            profile = spawner.profiles.get(m.profile)
            if profile is None:
                spawner.report(messages.Failed(m.id, "profile", 0))
                return
            landlock_fd = fds[0] if m.landlock and fds else -1
            cgroup_fds = fds[1:] if m.landlock else fds
            if m.netns and cgroup_fds:  # the last: its network namespace
                *cgroup_fds, given = cgroup_fds
                given_netns = os.dup(given)  # held as a pooled one is
            else:
                given_netns = -1
            ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
            # The whole request fits in its buffer: go() never waits on it.
            with contextlib.suppress(OSError):
                ours.setsockopt(socket.SOL_SOCKET, SO_SNDBUFFORCE, childsetup.WARM_BUFFER + 65536)
            # The request's part comes with its spawn order (start).
            try:
                planned = spawner.plan(
                    profile,
                    m.profile,
                    landlock_fd=landlock_fd,
                    given_netns=given_netns,
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
            except BaseException:
                close_fds(given_netns)
                theirs.close()
                ours.close()
                raise
            plan, netns_fd, mntns_fd = planned
            try:
                pid, report_fd = childsetup.spawn(plan)
            except (OSError, ValueError, TypeError, childsetup.SetupError) as error:
                ours.close()
                close_fds(netns_fd, mntns_fd)
                step, err = (
                    error.args if isinstance(error, childsetup.SetupError) else ("prepare", 0)
                )
                spawner.report(messages.Failed(m.id, step, err, str(error)))
                return
            finally:
                theirs.close()
        finally:
            close_fds(*fds)
        child = WarmChild(
            m.id, pid, m.profile, ours, report_fd, plan.init, (netns_fd, mntns_fd), m.roots
        )
        self.waiting[m.id] = child
        self._watch(report_fd, partial(self.readable, m.id))

    def readable(self, warm_id: str) -> None:
        """A warm child's first record: ready, or the step it failed at."""
        child = self.waiting.get(warm_id)
        if child is None or child.ready:
            return
        self._unwatch(child.report_fd)
        try:
            data = os.read(child.report_fd, 24)
        except OSError:
            data = b""
        failure = init_report.parse_ready(data)
        if failure is None:
            child.ready = True
            self.spawner.report(messages.Warmed(warm_id, child.pid))
            return
        del self.waiting[warm_id]
        self._forget(child)
        self.spawner.report(
            messages.Failed(warm_id, failure[0], failure[1], "the warm child failed")
        )

    def _forget(self, child: WarmChild) -> None:
        """A warm child that failed or is dropped: it exits (or has) and is
        reaped as any child; its namespaces are released then."""
        self.spawner.held[child.pid] = child.held
        child.close()

    def start(self, m: messages.SpawnOrder, fds: list[int]) -> None:
        """Give spawn order `m` to its warm child, without waiting: Started
        (or Failed) is reported when its report pipe says (`went`)."""
        spawner = self.spawner
        child = self.waiting.pop(m.id, None)
        if child is None or child.profile != m.profile or len(fds) != 6 or not child.ready:
            if child is not None:
                self._kill(child)
            spawner.report(messages.Failed(m.id, "warm", errno.ENOENT, "no warm child for it"))
            return
        if _exited(child.pid):
            # Killed from outside while it waited, not reaped yet: given the
            # request, it would fail at step "init" (no fallback); so the
            # spawn starts fresh instead (the reap reports nothing: forgotten).
            self._forget(child)
            spawner.report(
                messages.Failed(m.id, "warm", errno.ESRCH, "the warm child died waiting")
            )
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
            self._kill(child)
            spawner.report(
                messages.Failed(m.id, "warm", getattr(error, "errno", 0) or 0, str(error))
            )
            return
        child.channel.close()
        now = time.monotonic()
        child.deadline = now + GO_TIMEOUT_MS / 1000 + GO_MARGIN
        # Stopped while it waited? Resumed if it has not said soon (overdue):
        # no signal on the request's path, none the command would get.
        child.nudge = now + NUDGE_AFTER
        self.going[child.pid] = child
        self._watch(child.report_fd, partial(self.went, child.pid))
        spawner.last_start = time.monotonic()

    def went(self, pid: int) -> None:
        """A warm child given its request said what became of it (or died, or
        overran its deadline): Started, or Failed."""
        child = self.going.pop(pid, None)
        if child is None:
            return
        spawner = self.spawner
        spawn_id = child.id
        self._unwatch(child.report_fd)
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
        spawner.held[pid] = child.held  # released once reaped
        if failure is not None:
            child.close()
            spawner.report(messages.Failed(spawn_id, failure[0], failure[1]))
            return
        if child.init:
            spawner.inits[pid] = child.report_fd
        else:
            close_fds(child.report_fd)
        child.report_fd = -1
        spawner.children[pid] = spawn_id
        spawner.report(messages.Started(spawn_id, pid))

    def overdue(self) -> float:
        """Kill warm children given a request that did not exec in time, and
        resume those that have not said what became of it NUDGE_AFTER after
        it (a process of its uid outside any sandbox may have stopped them
        while they waited; a sandboxed one cannot signal them: landlock's
        scope); the seconds until the next such moment (inf if none)."""
        now, wait = time.monotonic(), math.inf
        for pid, child in self.going.items():
            if child.deadline <= now and not child.killed:
                child.killed = True
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            elif not child.killed:
                if child.nudge <= now:
                    child.nudge = math.inf
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGCONT)
                    if child.init:
                        resume_command(pid)
                wait = min(wait, child.deadline - now, child.nudge - now)
        return wait

    def _kill(self, child: WarmChild) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(child.pid, signal.SIGKILL)
        self._forget(child)

    def drop(self, profile_key: str | None = None, warm_id: str | None = None) -> None:
        """Kill the warm children (of one profile, or one): they never outlive
        their profile, and one no spawn takes is not left waiting."""
        for key, child in list(self.waiting.items()):
            if (profile_key is None or child.profile == profile_key) and (
                warm_id is None or key == warm_id
            ):
                del self.waiting[key]
                if not child.ready:
                    self._unwatch(child.report_fd)
                self._kill(child)
        kept: deque[tuple[WarmOrder, list[int]]] = deque()
        for order, fds in self.wanted:
            if (profile_key is None or order.profile == profile_key) and (
                warm_id is None or order.id == warm_id
            ):
                close_fds(*fds)
            else:
                kept.append((order, fds))
        self.wanted = kept

    def reaped(self, pid: int) -> bool:
        """A child was reaped: what its report pipe says comes first if it was
        given a request; True if it died waiting for one (killed from
        outside: dropped ones are forgotten first), and the daemon drops
        it too."""
        if pid in self.going:
            self.went(pid)
        child = next((c for c in self.waiting.values() if c.pid == pid), None)
        if child is None:
            return False
        del self.waiting[child.id]
        if not child.ready:
            self._unwatch(child.report_fd)
        self.spawner.released.extend(fd for fd in child.held if fd >= 0)
        child.close()
        self.spawner.report(messages.WarmLost(child.id))
        return True

    def kill_all(self) -> None:
        self.drop()
        for pid in self.going:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
