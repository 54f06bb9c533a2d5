"""The C child set-up (`_childsetup`) as Python calls it: one ChildPlan value,
one call.

    plan = ChildPlan(exe_fd=fd, exe_path=None, argv=[b"true"], envp=[], ...)
    pid = childsetup.spawn(plan)        # SetupError(step, errno) if a step failed
    fd = childsetup.mount_namespace(profile.pooled_mounts)

The warm path: a plan with `warm_channel` (and the `roots` a cwd may be
beneath) makes a child that stops after its filters and waits; `go` gives it
the request's part, laid out by `pack_request`; its report pipe says when it
is ready, and then whether it exec'd (spawner/init_report.py reads both):

    pid, report = childsetup.spawn(warm_plan)   # its set-up runs; "ready" on report
    payload = childsetup.pack_request(by_fd=True, root=0, cwd=b"src", ...)
    childsetup.go(channel, payload, [stdin, out, err, cancel, go, exe])

The spawner builds the plan from a tenant's registered profile and a spawn
order; the tests and the bench build theirs directly, through the same
`spawn`. Every field but the last ones (from go_fd) must be given: a plan that forgets
one (the identity, the seccomp filter) is a TypeError, not a weaker child.
What each field means is the C's docstring (`_childsetup.spawn.__doc__`).
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass

from hostcapd import _childsetup  # type: ignore[attr-defined]

#: (kind, source, target, fstype, flags, data, clear): one step of the
#: child's mounts (kinds in sandbox/namespaces.py).
Mount = tuple[int, bytes | None, bytes | None, bytes | None, int, bytes | None, int]
#: (resource, soft, hard)
RLimit = tuple[int, int, int]
#: (path, access) added to the landlock ruleset after the child's mounts.
LandlockRule = tuple[bytes, int]

#: A set-up step failed in the child: args are (step, errno); nothing ran.
SetupError: type[Exception] = _childsetup.SetupError


@dataclass(frozen=True, slots=True, kw_only=True)
class ChildPlan:
    """Everything one child's set-up needs, prepared: the C only applies it."""

    #: >= 0: execveat(exe_fd, "", AT_EMPTY_PATH); else execve(exe_path).
    exe_fd: int
    exe_path: bytes | None
    argv: Sequence[bytes]
    envp: Sequence[bytes]
    #: The fds that become 0, 1 and 2.
    stdio: tuple[int, int, int]
    #: cwd is opened beneath cwd_root (RESOLVE_BENEATH), entered after the uid switch.
    cwd_root: bytes | None
    cwd: bytes | None
    #: -1: inherit.
    umask: int
    clone_flags: int
    mounts: Sequence[Mount]
    #: Needs CLONE_NEWUTS (refused otherwise: it would rename the host).
    hostname: bytes | None
    #: Needs CLONE_NEWNET.
    loopback_up: bool
    #: cgroup.procs fds the child writes "0" to.
    cgroup_fds: Sequence[int]
    rlimits: Sequence[RLimit]
    oom_score_adj: bytes | None
    loginuid: bytes | None
    drop_caps: bool
    #: (uid, gid) to switch to (supplementary groups cleared), or None.
    ids: tuple[int, int] | None
    no_new_privs: bool
    landlock_fd: int
    landlock_rules: Sequence[LandlockRule]
    #: struct sock_filter[] as bytes; empty: no filter.
    seccomp_filter: bytes
    pdeathsig: int
    #: Readable before exec: the spawn was cancelled, nothing runs.
    cancel_fd: int
    #: Hung up before exec: the spawner is gone, nothing runs.
    life_fd: int
    #: >= 0: wait (up to go_timeout_ms) for it to be readable right before exec.
    go_fd: int = -1
    go_timeout_ms: int = 30_000
    #: >= 0: join this fresh network namespace (instead of CLONE_NEWNET).
    netns_fd: int = -1
    #: >= 0: join this mount namespace (made by mount_namespace) before the mounts.
    mntns_fd: int = -1
    #: With mntns_fd: work in a copy of it (an environment's, shared).
    mntns_copy: bool = False
    #: >= 0: join this IPC namespace (an environment's; instead of CLONE_NEWIPC).
    ipcns_fd: int = -1
    #: With a pid namespace: the child stays as its pid 1, a minimal init, and
    #: the command runs as pid 2 (decision 0023).
    init: bool = False
    #: >= 0: a warm child, waiting on this socket (its end) for its request
    #: after the filters; exe, argv, envp, stdio, cwd, rlimits, cancel and go
    #: then come with the request (`go`), and the plan's are ignored.
    warm_channel: int = -1
    #: A warm child's roots (its namespace's view), opened as root after the
    #: mounts; a request's cwd is beneath one of them.
    roots: Sequence[bytes] = ()
    #: >= 0: the command runs on a terminal (childsetup_c/pty.c): a devpts
    #: instance mounted in its mount namespace, the slave its controlling
    #: terminal and 0/1/2 in a new session, the master sent on this socket.
    tty_fd: int = -1
    #: (rows, cols) of that terminal.
    tty_size: tuple[int, int] = (0, 0)


def spawn(plan: ChildPlan) -> tuple[int, int]:
    """Clone a child that applies `plan` in order and execs; (its pid once the
    command has exec'd, the init's report fd or -1 without an init). A warm
    plan returns once the child waits for its request: (its pid, its report
    fd). Raises SetupError(step, errno) if a step failed (the child is
    reaped), ValueError or TypeError for a plan the C refuses before cloning."""
    started = _childsetup.spawn(
        exe_fd=plan.exe_fd,
        exe_path=plan.exe_path,
        argv=plan.argv,
        envp=plan.envp,
        stdio=plan.stdio,
        cwd_root=plan.cwd_root,
        cwd=plan.cwd,
        umask=plan.umask,
        clone_flags=plan.clone_flags,
        mounts=plan.mounts,
        hostname=plan.hostname,
        loopback_up=plan.loopback_up,
        cgroup_fds=plan.cgroup_fds,
        rlimits=plan.rlimits,
        oom_score_adj=plan.oom_score_adj,
        loginuid=plan.loginuid,
        drop_caps=plan.drop_caps,
        ids=plan.ids,
        no_new_privs=plan.no_new_privs,
        landlock_fd=plan.landlock_fd,
        landlock_rules=plan.landlock_rules,
        seccomp_filter=plan.seccomp_filter,
        pdeathsig=plan.pdeathsig,
        cancel_fd=plan.cancel_fd,
        life_fd=plan.life_fd,
        go_fd=plan.go_fd,
        go_timeout_ms=plan.go_timeout_ms,
        netns_fd=plan.netns_fd,
        mntns_fd=plan.mntns_fd,
        init=plan.init,
        warm_channel=plan.warm_channel,
        roots=plan.roots,
        ipcns_fd=plan.ipcns_fd,
        mntns_copy=plan.mntns_copy,
        tty_fd=plan.tty_fd,
        tty_size=plan.tty_size,
    )
    if plan.init or plan.warm_channel >= 0:
        pid, report = started
        return int(pid), int(report)
    return int(started), -1


def mount_namespace(mounts: Sequence[Mount], base_fd: int = -1, here: bool = False) -> int:
    """A new mount namespace with `mounts` made in it (by a short-lived
    child), as an O_CLOEXEC fd for one spawn's `mntns_fd`: a copy of the
    caller's, or of `base_fd`'s (an environment's, a profile's template:
    `mounts`' tree clones are then made first, in the caller's namespace).
    `here`, with `base_fd`: by the calling thread, in a process with no other
    thread (see _childsetup.mount_namespace). Raises SetupError."""
    fd: int = _childsetup.mount_namespace(mounts=mounts, base_fd=base_fd, here=here)
    return fd


#: The largest payload a warm child takes (a larger request spawns fresh).
WARM_BUFFER: int = _childsetup.WARM_BUFFER
_WORD = 8


def pack_request(
    *,
    by_fd: bool,
    root: int,
    cwd: bytes | None,
    exe_path: bytes | None,
    rlimits: Sequence[RLimit],
    argv: Sequence[bytes],
    envp: Sequence[bytes],
) -> bytes:
    """The request's part of a warm spawn in the layout its child reads (see
    warm_wait in childsetup_c/warm.c): native int64 words, the offsets of the
    strings after them, then the NUL-terminated strings. `root` indexes the
    warm plan's roots (-1: no cwd). Raises ValueError for a string with a NUL."""
    strings = bytearray()
    words = 7 + 3 * len(rlimits) + len(argv) + 1 + len(envp) + 1
    base = words * _WORD

    def at(value: bytes | None) -> int:
        if value is None:
            return -1
        if b"\0" in value:
            raise ValueError("a string of the request contains a NUL byte")
        offset = base + len(strings)
        strings.extend(value)
        strings.append(0)
        return offset

    head = [int(by_fd), root, at(cwd), at(exe_path), len(rlimits), len(argv), len(envp)]
    for resource, soft, hard in rlimits:
        head += (resource, soft, hard)
    head += [at(a) for a in argv] + [-1]
    head += [at(e) for e in envp] + [-1]
    strings.append(0)
    strings.extend(bytes(-(base + len(strings)) % _WORD))
    return struct.pack(f"={len(head)}q", *head) + bytes(strings)


def go(channel_fd: int, payload: bytes, fds: Sequence[int]) -> None:
    """Give a warm child its request (`pack_request`'s payload; fds: stdin,
    stdout, stderr, cancel, go[, the executable when by_fd]) without blocking;
    OSError (EAGAIN: the channel's buffer could not hold it). What became of
    it comes on the child's report pipe (see _childsetup.go)."""
    _childsetup.go(channel_fd=channel_fd, payload=payload, fds=list(fds))
