"""A child cloned for its spawn order: the fresh implementation of the
spawner's `ChildStart` (the warm one is spawner/warm.py). The C set-up runs
its whole plan, the profile's sandbox and the order's request, and the
spawner knows at once whether it exec'd."""

from __future__ import annotations

import os
import selectors
import time
from collections.abc import Sequence
from typing import Any, Protocol

from hostcapd import childsetup
from hostcapd.childsetup import ChildPlan
from hostcapd.spawner import messages
from hostcapd.spawner.messages import RegisterProfile

#: Longest a child waits, right before exec, for the daemon's go (its
#: write-ahead audit record is durable); the spawner is blocked meanwhile.
GO_TIMEOUT_MS = 30_000


class Parent(Protocol):
    """The spawner (spawner/process.py) as a `ChildStart` sees it: its
    profiles, its tables of children, its plans and its reports."""

    profiles: dict[str, RegisterProfile]
    #: live main processes: pid -> spawn id
    children: dict[int, str]
    #: pid -> the pooled namespace fds its child joined, held until reaped
    held: dict[int, tuple[int, int]]
    #: pid -> the report pipe of the child that is an init
    inits: dict[int, int]
    #: Namespace fds of reaped children, closed while idle.
    released: list[int]
    last_start: float
    selector: selectors.BaseSelector | None

    def report(self, message: messages.FromSpawner) -> None: ...

    def plan(
        self,
        profile: RegisterProfile,
        key: str,
        *,
        landlock_fd: int,
        given_netns: int = -1,
        cgroup_fds: Sequence[int],
        ids: tuple[int, int] | None,
        loginuid: bytes | None,
        rlimits: Sequence[childsetup.RLimit],
        env: str = "",
        **request: Any,
    ) -> tuple[ChildPlan, int, int]: ...


class ChildStart(Protocol):
    """How a spawn order becomes a running child: Started (once the command
    exec'd) or Failed is reported, now or when the child says."""

    def start(self, m: messages.SpawnOrder, fds: list[int]) -> None: ...


class FreshStart:
    def __init__(self, spawner: Parent) -> None:
        self.spawner = spawner

    def start(self, m: messages.SpawnOrder, fds: list[int]) -> None:
        spawner = self.spawner
        spawn_id = m.id
        profile = spawner.profiles.get(m.profile)
        if profile is None or len(fds) < 5:
            spawner.report(messages.Failed(spawn_id, "profile", 0))
            return
        exe_fd, stdin, stdout, stderr, cancel_fd, *rest = fds
        go_fd = rest.pop(0) if m.go else -1
        tty_fd = rest.pop(0) if m.tty is not None and rest else -1
        if m.tty is not None and tty_fd < 0:
            spawner.report(messages.Failed(spawn_id, "tty", 0))
            return
        landlock_fd = rest.pop(0) if m.landlock else -1
        # A copy: the order's fds are closed after it, and this one is held
        # until the child is reaped (as a pooled namespace's is).
        given_netns = os.dup(rest.pop(0)) if m.netns and rest else -1
        try:
            plan, netns_fd, mntns_fd = spawner.plan(
                profile,
                m.profile,
                env=m.env,
                given_netns=given_netns,
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
                tty_fd=tty_fd,
                tty_size=m.tty or (0, 0),
            )
        except childsetup.SetupError as error:  # its environment is not there
            step, err, *detail = error.args
            if given_netns >= 0:
                os.close(given_netns)
            spawner.report(messages.Failed(spawn_id, step, err, str(detail[0]) if detail else ""))
            return
        try:
            pid, report_fd = childsetup.spawn(plan)
        except childsetup.SetupError as error:
            close_fds(netns_fd, mntns_fd)
            step, err = error.args
            spawner.report(messages.Failed(spawn_id, step, err))
            return
        except (OSError, ValueError, TypeError) as error:
            close_fds(netns_fd, mntns_fd)
            spawner.report(
                messages.Failed(spawn_id, "prepare", getattr(error, "errno", 0) or 0, str(error))
            )
            return
        if report_fd >= 0:
            spawner.inits[pid] = report_fd
        # Held until the child is reaped: were ours the last reference, the
        # namespace's teardown (its whole mount tree unmounted) would run in
        # the child's exit, before its parent hears of it: 0.15-0.2 ms of
        # every spawn's wait for its exit status.
        spawner.held[pid] = (netns_fd, mntns_fd)
        spawner.children[pid] = spawn_id
        spawner.last_start = time.monotonic()
        spawner.report(messages.Started(spawn_id, pid))


def close_fds(*fds: int) -> None:
    for fd in fds:
        if fd >= 0:
            os.close(fd)
