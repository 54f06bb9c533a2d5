"""The confinement of a tenant's front-end, the process that parses its
clients' bytes.

    applied = confine(Confinement(".", interpreter_paths(), parent_pid, uid=uid, gid=gid))

Root started the front-end (`hostcapd.frontend.server`) as a fresh
interpreter; it imported all it needs and calls this before any thread
exists (landlock and seccomp confine the calling thread and the threads it
makes later). Every step is required, in this order; one that cannot be
applied raises Unavailable:

0. the landlock ruleset is built (its read paths opened with the identity
   it was started with: the interpreter may live where the front-end user
   cannot read, such as a pyenv under /root);
1. the identity: started as root, it first empties its capability bounding
   set (PR_CAPBSET_DROP needs CAP_SETPCAP, which only root has here), then
   takes `uid`/`gid` with no supplementary groups (the kernel clears every
   capability then), and root cannot be regained; then never root: no uid
   or gid 0 (real, effective, saved), no group 0, one thread;
2. the parent-death signal, and a check that the root side is the parent;
3. not dumpable, no core files: no process of its uid may ptrace it or
   read its memory;
4. no_new_privs;
5. no capabilities (CapInh, CapPrm, CapEff, CapAmb zero, else refused), and
   an empty bounding set when it was started as root (else refused; one
   started as another user could not drop it, and is told so);
6. landlock, ABI >= 6: read and execute beneath `read_paths` (the
   interpreter and its packages), read /dev/urandom, and in `bind_dir`
   create and remove a socket file; no other file, no TCP, and no abstract
   unix socket or signal outside its own domain. The kernel also refuses a
   landlocked process ptrace of any process outside its domain;
7. seccomp (`seccomp.build_frontend_filter`): no connect but of its own
   inner gRPC socket's address length, no chdir, exec, identity change,
   namespace, mount, tracing, or hold on another process's limits and
   scheduling; AF_UNIX stream and seqpacket sockets only.

With `own_netns` (a front-end that records its callers, decision 0033) it
first unshares a network namespace of its own, while still root: its gRPC
server's abstract socket is then out of every other process's reach.

The front-ends of all tenants share a uid: so confined, one tenant's can
neither read, signal, ptrace nor impersonate another's, nor reach the audit
log, the config or the spawner. It keeps its listening socket, the
connections it accepts and its channel to the root side, which trusts
nothing that comes over it.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import importlib.util
import os
import resource
import signal
import stat
import sys
from dataclasses import dataclass
from pathlib import Path

import prctl

from hostcapd import linux
from hostcapd.applied import Applied, Unavailable
from hostcapd.sandbox import landlock, seccomp
from hostcapd.sandbox.x86_64 import CLONE_NEWNET

#: Landlock's scopes (signals, abstract unix sockets) came with ABI 6.
MIN_LANDLOCK_ABI = 6
#: What binding a socket file in the bind directory, and unlinking it, needs.
BIND_DIR_RIGHTS = landlock.FS_MAKE_SOCK | landlock.FS_REMOVE_FILE | landlock.FS_READ_DIR
#: Files beyond the read paths a front-end reads: grpc's abseil seeds its
#: random generators from /dev/urandom, and aborts the process without it.
READ_FILES = ("/dev/urandom",)
#: What the egress proxy's resolver reads (glibc's getaddrinfo).
RESOLVER_FILES = (
    "/etc/hosts",
    "/etc/resolv.conf",
    "/etc/nsswitch.conf",
    "/etc/host.conf",
    "/etc/gai.conf",
    "/etc/services",
)
#: Packages whose own directory a front-end reads.
_OWN_PACKAGES = ("hostcapd", "hostcap_proto")
#: Packages whose holding directory (site-packages) a front-end reads.
_THIRD_PARTY = ("grpc", "google.protobuf", "msgspec")
_CAPABILITY_SETS = ("CapInh", "CapPrm", "CapEff", "CapAmb")


@dataclass(frozen=True)
class Confinement:
    #: The one directory where it may create (and remove) a unix socket file.
    bind_dir: str
    #: Read and execute beneath these (the interpreter, the packages): nothing else is readable.
    read_paths: tuple[str, ...]
    #: The root side's pid: the parent-death signal, and a check it is still the parent.
    parent_pid: int
    #: The identity to take when started as root (the front-end user); None
    #: keeps the one it was started with, which must not be root.
    uid: int | None = None
    gid: int | None = None
    #: None for a front-end (no TCP at all, no connect). The egress proxy's
    #: (hostcapd.egress.proxy): the TCP ports it may connect to (0: any),
    #: the resolver's files readable, and its own seccomp filter, which
    #: allows connect and IP sockets.
    egress_ports: tuple[int, ...] | None = None
    #: A network namespace of its own, made while it is still root (a front-end
    #: that takes over the accept: its gRPC server's abstract socket is then
    #: out of every other process's reach, decision 0033).
    own_netns: bool = False


def interpreter_paths() -> tuple[str, ...]:
    """What a front-end must read to run: the interpreter's prefixes (the
    standard library), the hostcapd and hostcap_proto packages, and the
    directories holding grpc, protobuf and msgspec; resolved, without
    repeats. Raises ModuleNotFoundError if one of those is not installed."""
    found = [sys.prefix, sys.exec_prefix, sys.base_prefix, sys.base_exec_prefix]
    found += [str(_package_dir(name)) for name in _OWN_PACKAGES]
    for name in _THIRD_PARTY:
        holder = _package_dir(name)
        for _ in name.split("."):
            holder = holder.parent
        found.append(str(holder))
    return tuple(dict.fromkeys(os.path.realpath(p) for p in found))


def _package_dir(name: str) -> Path:
    spec = importlib.util.find_spec(name)
    if spec is None or spec.origin is None:
        raise ModuleNotFoundError(f"a front-end needs {name}, which is not installed", name=name)
    return Path(spec.origin).parent


def confine(c: Confinement) -> list[Applied]:
    """The confinement of the module docstring, applied to this process;
    what was applied, each with why. Raises Unavailable naming the step
    that could not be."""
    # Built first: the read paths are opened with the identity it starts
    # with (root's, when the interpreter lives where its user cannot read).
    ruleset = _landlock_ruleset(c)
    try:
        if c.own_netns:
            _own_netns()
        applied = [_identity(c)]
        _parent_death(c.parent_pid)
        applied.append(_not_dumpable())
        applied.append(_no_new_privs())
        applied.append(_no_capabilities())
        applied.append(_landlock(ruleset))
    finally:
        os.close(ruleset)
    applied.append(_seccomp(egress=c.egress_ports is not None))
    return applied


def _status() -> dict[str, str]:
    try:
        with open("/proc/self/status", "rb") as status:
            lines = status.read().decode("ascii", "replace").splitlines()
    except OSError as error:
        raise Unavailable(f"/proc/self/status cannot be read: {error.strerror}") from None
    return {key: value.strip() for key, _, value in (line.partition(":") for line in lines)}


def _last_capability() -> int:
    try:
        with open("/proc/sys/kernel/cap_last_cap", encoding="ascii") as last:
            return int(last.read())
    except (OSError, ValueError) as error:
        raise Unavailable(f"/proc/sys/kernel/cap_last_cap cannot be read: {error}") from None


def _drop_bounding_set() -> None:
    """Every capability out of the bounding set, while still root (it takes
    CAP_SETPCAP); checked in /proc. Nothing of a front-end execs, so nothing
    would draw on the set: it is emptied as it is for spawns, so that no
    later mistake can give a capability back."""
    for cap in range(_last_capability() + 1):
        try:
            prctl.capbset_drop(cap)
        except OSError as error:
            if error.errno == errno.EINVAL:  # a capability this kernel lacks
                continue
            raise Unavailable(
                f"the bounding set cannot be dropped (capability {cap}): {error.strerror}"
            ) from None
    bounding = _status().get("CapBnd")
    if bounding is None or int(bounding, 16) != 0:
        raise Unavailable(f"the bounding set was dropped and is still {bounding}")


def _take_identity(uid: int, gid: int) -> None:
    """Root to the front-end user: no supplementary groups, every id, and no
    way back (the kernel clears every capability with the uid change)."""
    if uid == 0 or gid == 0:
        raise Unavailable("a front-end never runs as root, and it was told to take uid or gid 0")
    os.setgroups([])
    os.setresgid(gid, gid, gid)
    os.setresuid(uid, uid, uid)
    try:
        os.setuid(0)
    except PermissionError:
        return
    raise Unavailable("root could be regained after the identity change")


def _own_netns() -> None:
    """A network namespace of its own: abstract unix sockets are scoped by
    it, and a front-end needs no network (it serves unix sockets and talks to
    the root side over an inherited socketpair)."""
    if os.geteuid() != 0:
        raise Unavailable(
            "a front-end that records its callers needs a network namespace of its own, "
            "which only a daemon run as root can make (or set daemon.record_callers = false)"
        )
    try:
        linux.unshare(CLONE_NEWNET)
    except OSError as error:
        raise Unavailable(
            f"a network namespace of its own cannot be made: {error.strerror}"
        ) from None


def _identity(c: Confinement) -> Applied:
    if os.geteuid() == 0 and c.uid is not None and c.gid is not None:
        _drop_bounding_set()
        _take_identity(c.uid, c.gid)
    uids, gids, groups = os.getresuid(), os.getresgid(), os.getgroups()
    if 0 in uids or 0 in gids or 0 in groups:
        raise Unavailable(
            f"a front-end never runs as root: uids {uids}, gids {gids}, groups {groups}"
        )
    threads = _status().get("Threads")
    if threads != "1":
        raise Unavailable(
            f"a front-end confines itself before any thread exists: {threads} threads run, "
            "and landlock and seccomp would not cover the others"
        )
    shown = ", ".join(map(str, groups)) if groups else "no supplementary groups"
    return Applied("uid_drop", True, f"uid {uids[0]} gid {gids[0]}, {shown}", True)


def _parent_death(parent_pid: int) -> None:
    try:
        prctl.set_pdeathsig(signal.SIGKILL)
    except OSError as error:
        raise Unavailable(f"the parent-death signal cannot be set: {error.strerror}") from None
    # Set after the root side may have gone: then the parent is init, or a subreaper.
    if os.getppid() != parent_pid:
        raise Unavailable(
            f"the root side (pid {parent_pid}) went away during start-up: "
            f"the parent is pid {os.getppid()}"
        )


def _not_dumpable() -> Applied:
    try:
        prctl.set_dumpable(False)
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    except (OSError, ValueError) as error:
        raise Unavailable(f"not_dumpable cannot be applied: {error}") from None
    if prctl.get_dumpable():
        raise Unavailable("not_dumpable did not take effect")
    return Applied(
        "not_dumpable",
        True,
        "no core files; no process of its uid may ptrace it or read its /proc memory",
        True,
    )


def _no_new_privs() -> Applied:
    try:
        prctl.set_no_new_privs(1)
    except OSError as error:
        raise Unavailable(f"no_new_privs cannot be set: {error.strerror}") from None
    if prctl.get_no_new_privs() != 1:
        raise Unavailable("no_new_privs did not take effect")
    return Applied("no_new_privs", True, "no exec could grant privileges", True)


def _no_capabilities() -> Applied:
    status = _status()
    held = {name: status.get(name) for name in _CAPABILITY_SETS}
    if any(value is None or int(value, 16) != 0 for value in held.values()):
        shown = ", ".join(f"{name} {value}" for name, value in held.items())
        raise Unavailable(f"a front-end holds no capabilities, and this one has {shown}")
    # Emptied in _identity when it started as root; otherwise it could not be.
    bounding = status.get("CapBnd")
    if bounding is not None and int(bounding, 16) == 0:
        shown = "the bounding set is empty"
    else:
        shown = f"the bounding set is kept ({bounding}: started unprivileged, it cannot drop it)"
    return Applied(
        "no_capabilities",
        True,
        f"no inheritable, permitted, effective or ambient capability; {shown}",
        True,
    )


def _landlock_ruleset(c: Confinement) -> int:
    support = landlock.probe()
    if support.abi < MIN_LANDLOCK_ABI:
        raise Unavailable(
            f"landlock ABI >= {MIN_LANDLOCK_ABI} is required (to scope signals and abstract "
            f"unix sockets), and this host has {support.reason}"
        )
    try:
        bind_mode = os.stat(c.bind_dir or ".").st_mode
    except OSError as error:
        raise Unavailable(
            f"landlock: the bind directory {c.bind_dir} cannot be opened: {error.strerror}"
        ) from None
    if not stat.S_ISDIR(bind_mode):
        raise Unavailable(f"landlock: the bind directory {c.bind_dir} is not a directory")
    # glibc loads libgcc_s when a thread first exits through pthread_exit (as
    # Python's threads do); once landlocked it could not. Usually loaded already.
    with contextlib.suppress(OSError):
        ctypes.CDLL("libgcc_s.so.1")
    ports = c.egress_ports
    rules = landlock.LandlockRules(
        read_write=(),
        read_only=tuple(
            Path(p) for p in READ_FILES + (RESOLVER_FILES if ports is not None else ())
        ),
        read_exec=tuple(Path(p) for p in c.read_paths),
        dev_files=(),
        # A front-end: handled with no port rule, no TCP bind or connect at all.
        # The egress proxy: connect to its rules' ports only (0: any port).
        restrict_tcp=ports is None or 0 not in ports,
        scope=True,
        connect_ports=tuple(p for p in ports or () if p),
    )
    try:
        ruleset = landlock.build_ruleset(rules, support.abi)
    except landlock.LandlockError as error:
        raise Unavailable(f"landlock is required but could not be built: {error}") from None
    try:
        if c.bind_dir and not landlock.add_path_rule(ruleset, c.bind_dir, BIND_DIR_RIGHTS):
            raise Unavailable(f"landlock: the bind directory {c.bind_dir} went away")
    except BaseException as error:
        os.close(ruleset)
        if isinstance(error, (OSError, landlock.LandlockError)):
            raise Unavailable(f"landlock is required but could not be built: {error}") from None
        raise
    return ruleset


def _landlock(ruleset: int) -> Applied:
    try:
        linux.landlock_restrict_self(ruleset)
    except OSError as error:
        raise Unavailable(f"landlock is required but could not be applied: {error}") from None
    return Applied(
        "landlock",
        True,
        f"ABI {landlock.probe().abi}: reads only the interpreter and its packages, creates only "
        "its socket; no TCP, no abstract unix socket, signal or ptrace outside its domain",
        True,
    )


def _seccomp(egress: bool = False) -> Applied:
    support = seccomp.probe()
    if not support.available:
        raise Unavailable(f"seccomp is required but unavailable: {support.reason}")
    if egress:
        program = seccomp.build_egress_filter()
        linux.seccomp_set_filter(program)
        if not prctl.get_seccomp():
            raise Unavailable("seccomp did not take effect")
        return Applied(
            "seccomp",
            True,
            f"egress proxy filter, {len(program) // 8} instructions: no exec, identity change, "
            "namespace, mount or tracing; AF_UNIX, AF_INET and AF_INET6 sockets only",
            True,
        )
    try:
        program = seccomp.build_frontend_filter()
        linux.seccomp_set_filter(program)
    except (OSError, seccomp.SeccompError) as error:
        raise Unavailable(f"seccomp is required but could not be applied: {error}") from None
    if not prctl.get_seccomp():  # python-prctl says whether a mode is set
        raise Unavailable("seccomp did not take effect")
    return Applied(
        "seccomp",
        True,
        f"front-end filter, {len(program) // 8} instructions: no connect, exec, identity "
        "change, namespace, mount or tracing; AF_UNIX stream and seqpacket sockets only",
        True,
    )
