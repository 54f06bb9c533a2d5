"""cgroups: one cgroup per spawn under the daemon's own subtree.

    host = CgroupHost.probe()           # reads /proc/self/mountinfo and /proc/self/cgroup
    host.prepare()                      # once at start-up: make the subtree, enable controllers
    host.sweep_stale()                  # spawn cgroups a crashed daemon left behind
    cg = host.create("a1b2", memory_bytes=64 << 20, pids=32)
    fds = cg.procs_fds()                # the child writes "0" into each, then the caller closes them
    ...
    cg.kill(); stats = cg.stats(); cg.remove()

Two layouts are supported, detected at start-up:

- **pure v2** (cgroup2 mounted at /sys/fs/cgroup, modern systemd hosts): one
  hierarchy with the memory and pids controllers (and cpu where delegated).
  Killing writes cgroup.kill.
- **v1 hybrid** (memory and pids mounted as v1 hierarchies, cpu and freezer
  where present, plus maybe a cgroup2 "unified" mount without controllers):
  a spawn gets a cgroup in each v1 hierarchy it uses. Where the unified
  hierarchy offers cgroup.kill, the spawn gets a cgroup there too, only to be
  killed atomically; otherwise killing freezes it (freezer), SIGKILLs every
  member and thaws, until it is empty.

The subtree is `<the daemon's own cgroup>/hostcapd` in each hierarchy (or what
`parent` names), spawn cgroups are `spawn-<name>` in it. Everything here is
blocking file I/O on cgroupfs, short enough for the daemon's event loop; the
only waits are bounded (kill: until the members are gone, remove: until the
kernel lets the directory go).
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import signal
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from hostcapd import linux

SUBTREE = "hostcapd"
SPAWN_PREFIX = "spawn-"
#: A warm child's cgroup, and its spawn's once one takes it (cgroup v2
#: cannot rename a cgroup: the name says how the child was made).
WARM_PREFIX = "warm-"
#: On v2 the daemon lives in this leaf of its subtree: a cgroup with
#: controllers enabled for its children may hold no processes itself.
DAEMON_LEAF = "daemon"
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
_PARENT_PART = re.compile(r"[A-Za-z0-9_.@:-]+")
V2_MOUNT = Path("/sys/fs/cgroup")
KILL_TIMEOUT = 2.0
REMOVE_TIMEOUT = 1.0


class CgroupError(Exception):
    """A cgroup could not be made, limited, killed or removed; says which and why."""


@dataclass(frozen=True)
class CgroupSupport:
    #: "v2", "v1" (hybrid host: memory/pids on v1), or "" when unusable.
    version: str
    controllers: tuple[str, ...]
    reason: str


@dataclass(frozen=True)
class CgroupStats:
    peak_memory_bytes: int | None
    oom_kills: int
    #: Forks the pids controller refused.
    pids_refused: int


@dataclass(frozen=True)
class Hierarchy:
    """One mounted hierarchy the daemon uses and the roles it plays."""

    version: int
    #: What this hierarchy is used for: "memory", "pids", "cpu", "freezer", "kill".
    roles: tuple[str, ...]
    mount: Path
    #: The daemon's own cgroup in it.
    own: Path
    #: Where spawn cgroups go.
    subtree: Path


# ---- reading the host --------------------------------------------------------


def _unescape(field_: str) -> str:
    # mountinfo escapes space, tab, newline and backslash as octal.
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field_)


@dataclass(frozen=True)
class _Mount:
    root: str
    point: Path
    fstype: str
    options: frozenset[str]


def _cgroup_mounts(mountinfo: str) -> list[_Mount]:
    mounts = []
    for line in mountinfo.splitlines():
        left, sep, right = line.partition(" - ")
        if not sep:
            continue
        fields, tail = left.split(), right.split()
        if len(fields) < 6 or len(tail) < 3 or tail[0] not in ("cgroup", "cgroup2"):
            continue
        options = frozenset(tail[2].split(",")) | frozenset(fields[5].split(","))
        mounts.append(_Mount(_unescape(fields[3]), Path(_unescape(fields[4])), tail[0], options))
    return mounts


def _own_paths(proc_cgroup: str) -> dict[frozenset[str], str]:
    """controllers of each hierarchy (frozenset(), for v2) -> this process's path in it."""
    paths = {}
    for line in proc_cgroup.splitlines():
        parts = line.split(":", 2)
        if len(parts) == 3:
            paths[frozenset(c for c in parts[1].split(",") if c)] = parts[2]
    return paths


def _within(mount: _Mount, path: str) -> Path | None:
    """The directory of cgroup `path` under `mount`, None if the mount does not show it."""
    root = mount.root.rstrip("/")
    if path != root and not path.startswith(root + "/"):
        return None
    rel = path[len(root) :].lstrip("/")
    return mount.point / rel if rel else mount.point


def _subtree(own: Path, mount: Path, parent: str) -> Path:
    if not parent:
        return own / SUBTREE
    parts = [p for p in parent.split("/") if p]
    if not parts or any(p in (".", "..") or not _PARENT_PART.fullmatch(p) for p in parts):
        raise CgroupError(f"cgroup parent {parent!r} is not a plain cgroup path")
    base = mount if parent.startswith("/") else own
    return base.joinpath(*parts)


def _read(path: Path) -> str:
    # os-level reads: a text-mode open() costs several times the read itself,
    # and a spawn reads a handful of these files on its way out.
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        chunks = []
        while chunk := os.read(fd, 65536):
            chunks.append(chunk)
    finally:
        os.close(fd)
    return b"".join(chunks).decode()


def _write(path: Path, value: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
    try:
        os.write(fd, value.encode())
    finally:
        os.close(fd)


#: (parent, file name) -> whether a new cgroup under that parent has the file
#: (swap accounting is fixed at boot): one stat per daemon, not per spawn.
_HAS_FILE: dict[tuple[Path, str], bool] = {}


def _has_file(directory: Path, name: str) -> bool:
    key = (directory.parent, name)
    if key not in _HAS_FILE:
        _HAS_FILE[key] = (directory / name).exists()
    return _HAS_FILE[key]


def _keyed(path: Path, key: str) -> int:
    """The value of `key` in a flat-keyed cgroup file ("oom_kill 3"), 0 when absent."""
    try:
        text = _read(path)
    except FileNotFoundError:
        return 0
    for line in text.splitlines():
        name, _, value = line.partition(" ")
        if name == key:
            return int(value)
    return 0


def _procs(directory: Path) -> list[int]:
    try:
        return [int(p) for p in _read(directory / "cgroup.procs").split()]
    except FileNotFoundError:
        return []


def _has_cgroup_kill(own_dir: Path, root: Path) -> bool:
    """Whether v2 cgroups below `own_dir` offer cgroup.kill (Linux >= 5.14).
    The root cgroup has no cgroup.kill file, so there the kernel release decides."""
    if (own_dir / "cgroup.kill").exists():
        return True
    if own_dir != root:
        return False
    release = re.match(r"(\d+)\.(\d+)", os.uname().release)
    return release is not None and (int(release[1]), int(release[2])) >= (5, 14)


def _descendants(pid: int) -> set[int]:
    """`pid` and every process below it (by /proc's parent links)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = _read(Path("/proc", entry, "stat"))
        except OSError:
            continue
        ppid = int(stat.rpartition(")")[2].split()[1])
        children.setdefault(ppid, []).append(int(entry))
    found, todo = set(), [pid]
    while todo:
        current = todo.pop()
        found.add(current)
        todo.extend(children.get(current, ()))
    return found


# ---- one spawn's cgroup ------------------------------------------------------


class SpawnCgroup:
    """The cgroup of one spawn, one directory per hierarchy; owned by that spawn."""

    def __init__(self, name: str, members: tuple[tuple[Hierarchy, Path], ...]) -> None:
        self.name = name
        self._members = members
        #: Every directory, in the order the child joins them.
        self.directories = tuple(directory for _, directory in members)

    def _role(self, role: str) -> tuple[int, Path] | None:
        """(cgroup version, directory) of the hierarchy playing `role`."""
        for h, directory in self._members:
            if role in h.roles:
                return h.version, directory
        return None

    def procs_fds(self) -> list[int]:
        """Fresh O_WRONLY|O_CLOEXEC fds of each cgroup.procs, for the child to write "0"
        into; the caller closes them once the child is placed."""
        fds: list[int] = []
        try:
            for directory in self.directories:
                fds.append(os.open(directory / "cgroup.procs", os.O_WRONLY | os.O_CLOEXEC))
        except OSError as error:
            for fd in fds:
                os.close(fd)
            raise CgroupError(
                f"cgroup {self.name}: cannot open cgroup.procs: {error.strerror}"
            ) from None
        return fds

    def pids(self) -> list[int]:
        """Every process in the spawn's cgroup, in any of its hierarchies."""
        members: set[int] = set()
        for directory in self.directories:
            for sub in _tree(directory):
                members.update(_procs(sub))
        return sorted(members)

    def kill(self, timeout: float = KILL_TIMEOUT, *, wait: bool = True) -> None:
        """SIGKILL every process in the cgroup; with `wait`, return once none is left.

        v2 / unified: cgroup.kill (the kernel kills atomically, racing forks
        included). v1: freeze (so nothing forks meanwhile) where the freezer is
        mounted, SIGKILL each member, thaw; repeated until empty. Raises
        CgroupError if processes are still there after `timeout` seconds. A
        cgroup already removed has nothing to kill.
        """
        deadline = time.monotonic() + timeout
        pause = 0.0002
        while True:
            members = self.pids()
            if not members:
                return
            if time.monotonic() > deadline:
                raise CgroupError(f"cgroup {self.name}: processes {members[:8]} survived SIGKILL")
            self._kill_round(members)
            if not wait:
                return
            # Killed members stay listed until they have exited; a round again
            # covers a fork that raced the previous one.
            time.sleep(pause)
            pause = min(pause * 2, 0.01)

    def _kill_round(self, members: list[int]) -> None:
        kill_role, freezer_role = self._role("kill"), self._role("freezer")
        try:
            if kill_role is not None:
                _write(kill_role[1] / "cgroup.kill", "1")
            elif freezer_role is not None:
                with _frozen(freezer_role[1]):
                    self._signal_members(members)
            else:
                self._signal_members(members)
        except FileNotFoundError:
            pass  # removed meanwhile: its members are gone

    def _signal_members(self, members: list[int]) -> None:
        # pidfds first, membership checked after: a pid that exited and was
        # reused by a process outside the cgroup is never signalled.
        pidfds: dict[int, int] = {}
        try:
            for pid in members:
                with contextlib.suppress(ProcessLookupError):
                    pidfds[pid] = os.pidfd_open(pid)
            still = set(self.pids())
            for pid, pidfd in pidfds.items():
                if pid in still:
                    with contextlib.suppress(ProcessLookupError):
                        signal.pidfd_send_signal(pidfd, signal.SIGKILL)
        finally:
            for pidfd in pidfds.values():
                os.close(pidfd)

    def stats(self) -> CgroupStats:
        """Peak memory, OOM kills and refused forks so far (read them after the spawn ends)."""
        memory = self._role("memory")
        peak: int | None = None
        oom_kills = 0
        if memory is not None:
            version, memory_dir = memory
            if version == 2:
                peak = _read_int(memory_dir / "memory.peak")
                oom_kills = _keyed(memory_dir / "memory.events", "oom_kill")
            else:
                peak = _read_int(memory_dir / "memory.max_usage_in_bytes")
                oom_kills = _keyed(memory_dir / "memory.oom_control", "oom_kill")
        pids = self._role("pids")
        refused = _keyed(pids[1] / "pids.events", "max") if pids is not None else 0
        return CgroupStats(peak, oom_kills, refused)

    def remove(self, timeout: float = REMOVE_TIMEOUT) -> None:
        """Remove every directory of the cgroup (nested ones first), retrying
        briefly while the kernel finishes with exited members. Raises CgroupError
        naming what is left if it cannot; idempotent."""
        # The common case: no nested cgroups, nothing left inside.
        try:
            for directory in self.directories:
                with contextlib.suppress(FileNotFoundError):
                    os.rmdir(directory)
            return
        except OSError:
            pass
        deadline = time.monotonic() + timeout
        pause = 0.0002
        left: list[Path] = []
        while True:
            left = []
            for directory in self.directories:
                for sub in reversed(list(_tree(directory))):
                    try:
                        os.rmdir(sub)
                    except FileNotFoundError:
                        pass
                    except OSError as error:
                        if error.errno != errno.EBUSY:
                            raise CgroupError(
                                f"cgroup {self.name}: cannot remove {sub}: {error.strerror}"
                            ) from None
                        left.append(sub)
            if not left:
                return
            if time.monotonic() > deadline:
                raise CgroupError(f"cgroup {self.name}: still busy after {timeout} s: {left}")
            time.sleep(pause)
            pause = min(pause * 2, 0.01)


def _read_int(path: Path) -> int | None:
    try:
        return int(_read(path))
    except (FileNotFoundError, ValueError):
        return None


def _tree(directory: Path) -> Iterator[Path]:
    """`directory` and the cgroups nested in it, parents first."""
    if not directory.is_dir():
        return
    yield directory
    try:
        entries = list(os.scandir(directory))
    except FileNotFoundError:
        return
    for entry in entries:
        if entry.is_dir(follow_symlinks=False):
            yield from _tree(Path(entry.path))


@contextlib.contextmanager
def _frozen(freezer: Path) -> Iterator[None]:
    _write(freezer / "freezer.state", "FROZEN")
    try:
        yield
    finally:
        _write(freezer / "freezer.state", "THAWED")


# ---- the host ----------------------------------------------------------------


_MS_REMOUNT = 32


def favor_dynamic_modifications() -> str | None:
    """Remount the cgroup2 hierarchy with `favordynmods`, unless it has it.

    Moving a process into a cgroup takes the global threadgroup rwsem for
    writing; unless a hierarchy favours dynamic modifications, that waits for
    an RCU grace period whenever no migration happened recently: about 10-15
    ms for a spawn after an idle moment, against 0.3 ms back to back (measured
    here). `favordynmods` keeps the fast path at the cost of slightly dearer
    fork and exit. Returns what was done, or None when nothing was needed.
    Raises CgroupError if the remount is refused."""
    try:
        mounts = _cgroup_mounts(_read(Path("/proc/self/mountinfo")))
    except OSError as error:
        raise CgroupError(f"cannot read mountinfo: {error.strerror}") from None
    v2 = [m for m in mounts if m.fstype == "cgroup2"]
    if not v2 or any("favordynmods" in m.options for m in v2):
        return None
    target = v2[0].point
    try:
        linux.mount(None, bytes(target), None, _MS_REMOUNT, b"favordynmods")
    except OSError as error:
        raise CgroupError(f"cannot remount {target} with favordynmods: {error.strerror}") from None
    return f"remounted {target} with favordynmods (cheap cgroup migration for every spawn)"


@dataclass
class CgroupHost:
    """The cgroup layout of this host and the daemon's subtree in it."""

    support: CgroupSupport
    hierarchies: tuple[Hierarchy, ...] = ()
    _prepared: bool = field(default=False, repr=False)

    @classmethod
    def probe(cls, parent: str = "", *, unified_kill: bool = True) -> CgroupHost:
        """Detect pure v2 or the v1 hybrid from /proc/self/mountinfo and
        /proc/self/cgroup. `parent`: where spawn cgroups go, in every hierarchy:
        empty for `<own cgroup>/hostcapd`, a relative path for `<own cgroup>/<parent>`,
        an absolute one for that path from the hierarchy's root.
        `unified_kill`: on a hybrid host, kill through the unified hierarchy's
        cgroup.kill when it has one (else the v1 freezer)."""
        try:
            mounts = _cgroup_mounts(_read(Path("/proc/self/mountinfo")))
            own = _own_paths(_read(Path("/proc/self/cgroup")))
        except OSError as error:
            return cls(
                CgroupSupport("", (), f"cannot read the process's cgroups: {error.strerror}")
            )
        if os.geteuid() != 0:
            return cls(
                CgroupSupport("", (), "daemon is not root (cgroup delegation is not supported yet)")
            )
        v2 = [m for m in mounts if m.fstype == "cgroup2"]
        pure = next((m for m in v2 if m.point == V2_MOUNT), None)
        if pure is not None:
            return cls._probe_v2(pure, own, parent)
        return cls._probe_v1(mounts, own, parent, unified_kill)

    @classmethod
    def _probe_v2(cls, mount: _Mount, own: dict[frozenset[str], str], parent: str) -> CgroupHost:
        path = own.get(frozenset())
        own_dir = _within(mount, path) if path is not None else None
        if own_dir is None:
            return cls(
                CgroupSupport("", (), "the daemon's cgroup is not visible under /sys/fs/cgroup")
            )
        try:
            available = set(_read(own_dir / "cgroup.controllers").split())
        except OSError as error:
            return cls(
                CgroupSupport("", (), f"cannot read {own_dir}/cgroup.controllers: {error.strerror}")
            )
        missing = {"memory", "pids"} - available
        if missing:
            return cls(
                CgroupSupport(
                    "",
                    (),
                    f"controllers {', '.join(sorted(missing))} are not delegated to {own_dir} "
                    "(run hostcapd as a service with Delegate=yes)",
                )
            )
        if not os.access(own_dir, os.W_OK) or not os.access(own_dir / "cgroup.procs", os.W_OK):
            return cls(CgroupSupport("", (), f"{own_dir} is not writable"))
        roles = ["memory", "pids"] + (["cpu"] if "cpu" in available else []) + ["kill"]
        subtree = _subtree(own_dir, mount.point, parent)
        hierarchy = Hierarchy(2, tuple(roles), mount.point, own_dir, subtree)
        controllers = tuple(r for r in roles if r != "kill")
        return cls(
            CgroupSupport(
                "v2", controllers, f"cgroup v2: {', '.join(controllers)}; spawns under {subtree}"
            ),
            (hierarchy,),
        )

    @classmethod
    def _probe_v1(
        cls, mounts: list[_Mount], own: dict[frozenset[str], str], parent: str, unified_kill: bool
    ) -> CgroupHost:
        hierarchies: list[Hierarchy] = []

        def add(role: str, version: int) -> bool:
            for mount in mounts:
                if version == 1 and (mount.fstype != "cgroup" or role not in mount.options):
                    continue
                if version == 2 and mount.fstype != "cgroup2":
                    continue
                key = frozenset() if version == 2 else next((k for k in own if role in k), None)
                path = own.get(key) if key is not None else None
                own_dir = _within(mount, path) if path is not None else None
                if own_dir is None or not os.access(own_dir, os.W_OK):
                    continue
                if version == 2 and not _has_cgroup_kill(own_dir, mount.point):
                    continue
                for i, h in enumerate(hierarchies):
                    if h.mount == mount.point:  # co-mounted controllers (cpu,cpuacct,memory...)
                        hierarchies[i] = Hierarchy(
                            h.version, (*h.roles, role), h.mount, h.own, h.subtree
                        )
                        return True
                hierarchies.append(
                    Hierarchy(
                        version,
                        (role,),
                        mount.point,
                        own_dir,
                        _subtree(own_dir, mount.point, parent),
                    )
                )
                return True
            return False

        kill = unified_kill and add("kill", 2)
        for needed in ("memory", "pids"):
            if not add(needed, 1):
                return cls(
                    CgroupSupport(
                        "",
                        (),
                        f"no usable {needed} cgroup hierarchy "
                        f"(neither cgroup v2 at /sys/fs/cgroup nor v1 {needed})",
                    )
                )
        # The cpu hierarchy is not one of a spawn's own cgroups (on v1 every
        # hierarchy joined is one more mkdir, open, join and rmdir per spawn):
        # spawns join their tenant's cpu cgroup instead (hostcapd.sandbox.cpu).
        freezer = not kill and add("freezer", 1)
        controllers: tuple[str, ...] = ("memory", "pids")
        how = (
            "cgroup.kill on the unified hierarchy"
            if kill
            else "freezer, SIGKILL, thaw"
            if freezer
            else "SIGKILL each member until empty"
        )
        return cls(
            CgroupSupport(
                "v1", controllers, f"cgroup v1 hybrid: {', '.join(controllers)} (v1); kill by {how}"
            ),
            tuple(hierarchies),
        )

    # -- start-up ----------------------------------------------------------

    def prepare(self) -> None:
        """Make the subtree in every hierarchy. On v2 also move this process
        (and its descendants) into `<subtree>/daemon` and enable the controllers
        down to the subtree, as the no-internal-processes rule requires.
        Idempotent; raises CgroupError saying what is in the way."""
        if not self.support.version:
            raise CgroupError(f"cgroups unavailable: {self.support.reason}")
        for h in self.hierarchies:
            try:
                h.subtree.mkdir(parents=True, exist_ok=True)
            except OSError as error:
                raise CgroupError(f"cannot create {h.subtree}: {error.strerror}") from None
            if h.version == 2 and any(r in h.roles for r in ("memory", "pids", "cpu")):
                self._enable_v2(h)
        self._prepared = True

    def _enable_v2(self, h: Hierarchy) -> None:
        wanted = {r for r in h.roles if r in ("memory", "pids", "cpu")}
        # The chain of cgroups whose subtree_control must list `wanted`:
        # from the subtree up to the first that already has them available.
        chain = [h.subtree]
        while not wanted <= set(_read(chain[-1] / "cgroup.controllers").split()):
            if chain[-1] == h.mount:
                raise CgroupError(f"controllers {sorted(wanted)} are not available on this host")
            chain.append(chain[-1].parent)
        leaf = h.subtree / DAEMON_LEAF
        for cgroup in reversed(chain):
            enabled = set(_read(cgroup / "cgroup.subtree_control").split())
            if wanted <= enabled:
                continue
            if cgroup != h.mount:
                self._evacuate(cgroup, leaf)
            try:
                _write(
                    cgroup / "cgroup.subtree_control",
                    " ".join(f"+{c}" for c in sorted(wanted - enabled)),
                )
            except OSError as error:
                others = _procs(cgroup)
                hint = f" (it still holds processes {others[:8]})" if others else ""
                raise CgroupError(
                    f"cannot enable {sorted(wanted)} in {cgroup}: {error.strerror}{hint}"
                ) from None

    @staticmethod
    def _evacuate(cgroup: Path, leaf: Path) -> None:
        # Only the daemon's own processes are moved; anyone else's stay and
        # make enabling fail with a message naming them.
        members = _procs(cgroup)
        if not members:
            return
        ours = _descendants(os.getpid()) & set(members)
        leaf.mkdir(exist_ok=True)
        for pid in sorted(ours):
            with contextlib.suppress(ProcessLookupError):
                _write(leaf / "cgroup.procs", str(pid))

    def release(self) -> None:
        """On a clean stop: remove the (now empty) subtree where possible."""
        for h in self.hierarchies:
            with contextlib.suppress(OSError):
                h.subtree.rmdir()

    def sweep_stale(self) -> int:
        """Kill and remove spawn cgroups left in the subtree (by a crashed
        daemon); returns how many spawns were swept."""
        names: set[str] = set()
        for h in self.hierarchies:
            try:
                names.update(
                    e.name
                    for e in os.scandir(h.subtree)
                    if e.is_dir(follow_symlinks=False)
                    and e.name.startswith((SPAWN_PREFIX, WARM_PREFIX))
                )
            except FileNotFoundError:
                continue
        for name in sorted(names):
            prefix = SPAWN_PREFIX if name.startswith(SPAWN_PREFIX) else WARM_PREFIX
            stale = self._spawn(name[len(prefix) :], prefix)
            stale.kill()
            stale.remove()
        return len(names)

    # -- per spawn ---------------------------------------------------------

    def _spawn(self, name: str, prefix: str = SPAWN_PREFIX) -> SpawnCgroup:
        return SpawnCgroup(
            name, tuple((h, h.subtree / f"{prefix}{name}") for h in self.hierarchies)
        )

    def create(
        self, name: str, memory_bytes: int | None, pids: int | None, *, warm: bool = False
    ) -> SpawnCgroup:
        """Make `spawn-<name>` (`warm-<name>` for a warm child) in every
        hierarchy with its limits set
        (memory_bytes: memory limit, swap 0; pids: pids.max). On any error
        nothing is left behind and CgroupError says what failed."""
        if not self._prepared:
            raise CgroupError(
                "cgroups: prepare() has not run"
                if self.support.version
                else f"cgroups unavailable: {self.support.reason}"
            )
        if not _NAME.fullmatch(name):
            raise CgroupError(f"invalid spawn cgroup name {name!r}")
        if memory_bytes is not None and memory_bytes <= 0:
            raise CgroupError(f"memory limit must be positive, not {memory_bytes}")
        if pids is not None and pids <= 0:
            raise CgroupError(f"pids limit must be positive, not {pids}")
        cgroup = self._spawn(name, WARM_PREFIX if warm else SPAWN_PREFIX)
        made: list[Path] = []
        try:
            for directory in cgroup.directories:
                try:
                    directory.mkdir()
                except FileExistsError:
                    raise CgroupError(f"cgroup {directory} already exists") from None
                made.append(directory)
            self._limit(cgroup, memory_bytes, pids)
        except BaseException as error:
            for directory in reversed(made):
                with contextlib.suppress(OSError):
                    directory.rmdir()
            if isinstance(error, OSError):
                raise CgroupError(f"cgroup {name}: {error.strerror}: {error.filename}") from None
            raise
        return cgroup

    def set_limits(self, cgroup: SpawnCgroup, memory_bytes: int | None, pids: int | None) -> None:
        """Set a made cgroup's limits (a warm child's, made unlimited, once
        its spawn is known); CgroupError if the kernel refused one."""
        try:
            self._limit(cgroup, memory_bytes, pids)
        except OSError as error:
            raise CgroupError(f"cgroup {cgroup.name}: {error.strerror}: {error.filename}") from None

    @staticmethod
    def _limit(cgroup: SpawnCgroup, memory_bytes: int | None, pids: int | None) -> None:
        memory = cgroup._role("memory")
        if memory is not None and memory_bytes is not None:
            version, directory = memory
            if version == 2:
                _write(directory / "memory.max", str(memory_bytes))
                if _has_file(directory, "memory.swap.max"):
                    _write(directory / "memory.swap.max", "0")
            else:
                _write(directory / "memory.limit_in_bytes", str(memory_bytes))
                # memsw is memory + swap: equal to the limit means no swap.
                if _has_file(directory, "memory.memsw.limit_in_bytes"):
                    _write(directory / "memory.memsw.limit_in_bytes", str(memory_bytes))
        pids_role = cgroup._role("pids")
        if pids_role is not None and pids is not None:
            _write(pids_role[1] / "pids.max", str(pids))
