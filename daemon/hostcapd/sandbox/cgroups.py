"""cgroups: one cgroup per spawn, inside its tenant's, under the daemon's own subtree.

    host = CgroupHost.probe(parent)     # reads /proc/self/mountinfo and /proc/self/cgroup
    host.prepare()                      # once at start-up: make the subtree, enable controllers
    host.sweep_stale()                  # what a crashed instance of this daemon left behind
    tenant = host.for_tenant("dev", pids=4096, memory_bytes=8 << 30)   # the tenant's ceilings
    side = host.frontend("dev", pids=256, memory_bytes=1 << 30)       # its front-end and fs worker
    cg = tenant.create("a1b2", memory_bytes=64 << 20, pids=32)
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
`parent` names: a daemon names its own, `instance_name`); in it each tenant
has `tenant-<name>` (pids.max and a memory limit over all its spawns, which
are `spawn-<id>` and `warm-<id>` inside it) and `frontend-<name>` (its
front-end and fs worker, with limits of their own). Everything here is
blocking file I/O on cgroupfs, short enough for the daemon's event loop; the
only waits are bounded (kill: until the members are gone, remove: until the
kernel lets the directory go).
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
from dataclasses import dataclass, field, replace
from pathlib import Path

from hostcapd.sandbox.cgroupfs import (
    SUBTREE,
    V2_MOUNT,
    CgroupError,
    Mount,
    cgroup_mounts,
    cmdline,
    descendants,
    favor_dynamic_modifications,
    has_cgroup_kill,
    has_file,
    own_paths,
    parent_pid,
    procs,
    read,
    subtree_path,
    within,
    write,
)
from hostcapd.sandbox.spawn_cgroup import CgroupStats, Hierarchy, ParentDirs, SpawnCgroup

__all__ = [
    "SUBTREE",
    "V2_MOUNT",
    "CgroupError",
    "CgroupHost",
    "CgroupStats",
    "CgroupSupport",
    "Hierarchy",
    "SpawnCgroup",
    "favor_dynamic_modifications",
]

SPAWN_PREFIX = "spawn-"
#: A warm child's cgroup, and its spawn's once one takes it (cgroup v2
#: cannot rename a cgroup: the name says how the child was made).
WARM_PREFIX = "warm-"
#: A cgroup made ahead for a fresh spawn (process/cgroup_pool.py), empty
#: until a spawn takes it, and that spawn's until it ends.
READY_PREFIX = "ready-"
#: On v2 the daemon lives in this leaf of its subtree: a cgroup with
#: controllers enabled for its children may hold no processes itself.
DAEMON_LEAF = "daemon"
#: A tenant's cgroup (its ceilings over all its spawns), which holds them.
TENANT_PREFIX = "tenant-"
#: A tenant's front-end and fs worker, beside its tenant cgroup.
FRONTEND_PREFIX = "frontend-"
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")


@dataclass(frozen=True)
class CgroupSupport:
    #: "v2", "v1" (hybrid host: memory/pids on v1), or "" when unusable.
    version: str
    controllers: tuple[str, ...]
    reason: str


@dataclass
class CgroupHost:
    """The cgroup layout of this host and the daemon's subtree in it."""

    support: CgroupSupport
    hierarchies: tuple[Hierarchy, ...] = ()
    _prepared: bool = field(default=False, repr=False)
    #: Its subtrees' fds, opened at its first `create` (each view its own).
    _parents: ParentDirs | None = field(default=None, repr=False, compare=False)

    @classmethod
    def probe(cls, parent: str = "", *, unified_kill: bool = True) -> CgroupHost:
        """Detect pure v2 or the v1 hybrid from /proc/self/mountinfo and
        /proc/self/cgroup. `parent`: where spawn cgroups go, in every hierarchy:
        empty for `<own cgroup>/hostcapd`, a relative path for `<own cgroup>/<parent>`,
        an absolute one for that path from the hierarchy's root.
        `unified_kill`: on a hybrid host, kill through the unified hierarchy's
        cgroup.kill when it has one (else the v1 freezer)."""
        try:
            mounts = cgroup_mounts(read(Path("/proc/self/mountinfo")))
            own = own_paths(read(Path("/proc/self/cgroup")))
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
    def _probe_v2(cls, mount: Mount, own: dict[frozenset[str], str], parent: str) -> CgroupHost:
        path = own.get(frozenset())
        own_dir = within(mount, path) if path is not None else None
        if own_dir is None:
            return cls(
                CgroupSupport("", (), "the daemon's cgroup is not visible under /sys/fs/cgroup")
            )
        try:
            available = set(read(own_dir / "cgroup.controllers").split())
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
        subtree = subtree_path(own_dir, mount.point, parent)
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
        cls, mounts: list[Mount], own: dict[frozenset[str], str], parent: str, unified_kill: bool
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
                own_dir = within(mount, path) if path is not None else None
                if own_dir is None or not os.access(own_dir, os.W_OK):
                    continue
                if version == 2 and not has_cgroup_kill(own_dir, mount.point):
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
                        subtree_path(own_dir, mount.point, parent),
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
        while not wanted <= set(read(chain[-1] / "cgroup.controllers").split()):
            if chain[-1] == h.mount:
                raise CgroupError(f"controllers {sorted(wanted)} are not available on this host")
            chain.append(chain[-1].parent)
        leaf = h.subtree / DAEMON_LEAF
        for cgroup in reversed(chain):
            enabled = set(read(cgroup / "cgroup.subtree_control").split())
            if wanted <= enabled:
                continue
            if cgroup != h.mount:
                self._evacuate(cgroup, leaf)
            try:
                write(
                    cgroup / "cgroup.subtree_control",
                    " ".join(f"+{c}" for c in sorted(wanted - enabled)),
                )
            except OSError as error:
                others = procs(cgroup)
                hint = f" (it still holds processes {others[:8]})" if others else ""
                raise CgroupError(
                    f"cannot enable {sorted(wanted)} in {cgroup}: {error.strerror}{hint}"
                ) from None

    @staticmethod
    def _evacuate(cgroup: Path, leaf: Path) -> None:
        # Only the daemon's own processes are moved; anyone else's stay and
        # make enabling fail with a message naming them.
        members = procs(cgroup)
        if not members:
            return
        ours = descendants(os.getpid()) & set(members)
        leaf.mkdir(exist_ok=True)
        for pid in sorted(ours):
            with contextlib.suppress(ProcessLookupError):
                write(leaf / "cgroup.procs", str(pid))

    def release(self) -> None:
        """On a clean stop: remove the (now empty) tenant cgroups and the
        subtree where possible."""
        for h in self.hierarchies:
            with contextlib.suppress(OSError):
                for entry in os.scandir(h.subtree):
                    if entry.is_dir(follow_symlinks=False) and entry.name.startswith(
                        (TENANT_PREFIX, FRONTEND_PREFIX)
                    ):
                        with contextlib.suppress(OSError):
                            os.rmdir(entry.path)
            with contextlib.suppress(OSError):
                h.subtree.rmdir()

    def sweep_stale(self) -> int:
        """Kill and remove what a previous instance of this daemon left in its
        subtree (it crashed): every spawn and warm cgroup, its tenants' and
        their front-ends'. Run before this instance makes its own; the
        subtree is this daemon's alone (a name derived from its config:
        `instance_name`), so another daemon's are never touched. Returns how
        many spawns were swept. Raises CgroupError, touching nothing, if a
        live daemon other than this process serves from the subtree (an
        explicit `cgroup_parent` given to two daemons)."""
        owner = self._live_owner()
        if owner is not None:
            raise CgroupError(
                f"the cgroup subtree {self.hierarchies[0].subtree} is in use by another live "
                f"hostcapd (pid {owner}): give each daemon a cgroup_parent of its own "
                "(or leave it unset)"
            )
        found: set[tuple[str, str, str]] = set()  # (tenant dir, prefix, name)
        for h in self.hierarchies:
            for parent, entry in _entries(h.subtree):
                for prefix in (SPAWN_PREFIX, WARM_PREFIX, READY_PREFIX, FRONTEND_PREFIX):
                    if entry.startswith(prefix):
                        found.add((parent, prefix, entry[len(prefix) :]))
        for parent, prefix, name in sorted(found):
            stale = self._in(parent)._spawn(name, prefix)
            stale.kill()
            stale.remove()
        for h in self.hierarchies:
            for parent, name in _entries(h.subtree):
                if not parent and name.startswith(TENANT_PREFIX):
                    with contextlib.suppress(OSError):
                        os.rmdir(h.subtree / name)
        return sum(1 for _, prefix, _ in found if prefix != FRONTEND_PREFIX)

    def _live_owner(self) -> int | None:
        """The pid of another live daemon whose front-ends or fs workers are
        in the subtree's front-end cgroups (each a child of its daemon; a
        crashed daemon's die with it, by their parent-death signal)."""
        for h in self.hierarchies:
            for parent, name in _entries(h.subtree):
                if parent or not name.startswith(FRONTEND_PREFIX):
                    continue
                for pid in procs(h.subtree / name):
                    ppid = parent_pid(pid)
                    if ppid not in (None, 0, 1, os.getpid()) and b"hostcapd" in cmdline(ppid):
                        return ppid
        return None

    def _in(self, directory: str) -> CgroupHost:
        """The same host with its spawn cgroups in `directory` of the subtree."""
        if not directory:
            return self
        return replace(
            self,
            hierarchies=tuple(replace(h, subtree=h.subtree / directory) for h in self.hierarchies),
            _parents=None,
        )

    # -- per tenant ----------------------------------------------------------

    def for_tenant(self, name: str, *, pids: int, memory_bytes: int) -> CgroupHost:
        """Make (or update) `tenant-<name>` in every hierarchy with the tenant's
        own ceilings: `pids.max` over all its spawns' tasks together, and a
        memory limit over all their memory (swap 0). The view returned makes
        the tenant's spawn cgroups inside it. Raises CgroupError."""
        self._check_prepared()
        if not _NAME.fullmatch(name):
            raise CgroupError(f"invalid tenant cgroup name {name!r}")
        view = self._in(f"{TENANT_PREFIX}{name}")
        group = SpawnCgroup(
            f"{TENANT_PREFIX}{name}", tuple((h, h.subtree) for h in view.hierarchies)
        )
        try:
            for h in view.hierarchies:
                h.subtree.mkdir(exist_ok=True)
                wanted = [r for r in h.roles if r in ("memory", "pids", "cpu")]
                if h.version == 2 and wanted:
                    # The tenant's spawns are its children: they need the
                    # controllers too (no process lives in tenant-<name>).
                    write(h.subtree / "cgroup.subtree_control", " ".join(f"+{r}" for r in wanted))
            self._limit(group, memory_bytes, pids)
        except OSError as error:
            raise CgroupError(f"tenant cgroup {name}: {error.strerror}: {error.filename}") from None
        return view

    def frontend(self, name: str, *, pids: int, memory_bytes: int) -> SpawnCgroup:
        """Make (or update) `frontend-<name>`: the cgroup of a tenant's
        front-end and fs worker, the daemon's work on that tenant's behalf,
        with its own limits (beside the tenant's spawns, so they cannot take
        its pids). Raises CgroupError."""
        self._check_prepared()
        if not _NAME.fullmatch(name):
            raise CgroupError(f"invalid tenant cgroup name {name!r}")
        group = self._spawn(name, FRONTEND_PREFIX)
        try:
            for directory in group.directories:
                directory.mkdir(exist_ok=True)
            self._limit(group, memory_bytes, pids)
        except OSError as error:
            raise CgroupError(
                f"front-end cgroup {name}: {error.strerror}: {error.filename}"
            ) from None
        return group

    # -- per spawn ---------------------------------------------------------

    def _spawn(
        self, name: str, prefix: str = SPAWN_PREFIX, parents: ParentDirs | None = None
    ) -> SpawnCgroup:
        return SpawnCgroup(
            name, tuple((h, f"{h.subtree}/{prefix}{name}") for h in self.hierarchies), parents
        )

    def close(self) -> None:
        """Let go of the subtrees' fds: closed once no cgroup made through
        this view is left (a `create` after it opens them again)."""
        self._parents = None

    def _parent_dirs(self) -> ParentDirs:
        """The subtrees' fds, which this view's spawn cgroups are made in."""
        if self._parents is None:
            try:
                self._parents = ParentDirs(tuple(os.fspath(h.subtree) for h in self.hierarchies))
            except OSError as error:
                raise CgroupError(
                    f"cannot open the spawn cgroups' parent {error.filename}: {error.strerror}"
                ) from None
        return self._parents

    def create(
        self,
        name: str,
        memory_bytes: int | None,
        pids: int | None,
        *,
        warm: bool = False,
        ahead: bool = False,
    ) -> SpawnCgroup:
        """Make `spawn-<name>` (`warm-<name>` for a warm child, `ready-<name>`
        made ahead for a fresh spawn) in every hierarchy with its limits set
        (memory_bytes: memory limit, swap 0; pids: pids.max). On any error
        nothing is left behind and CgroupError says what failed."""
        self._check_prepared()
        if not _NAME.fullmatch(name):
            raise CgroupError(f"invalid spawn cgroup name {name!r}")
        if memory_bytes is not None and memory_bytes <= 0:
            raise CgroupError(f"memory limit must be positive, not {memory_bytes}")
        if pids is not None and pids <= 0:
            raise CgroupError(f"pids limit must be positive, not {pids}")
        prefix = WARM_PREFIX if warm else READY_PREFIX if ahead else SPAWN_PREFIX
        cgroup = self._spawn(name, prefix, self._parent_dirs())
        made: list[tuple[int | None, str]] = []
        try:
            for (dir_fd, directory), path in zip(cgroup.at, cgroup.paths, strict=True):
                try:
                    os.mkdir(directory, dir_fd=dir_fd)
                except FileExistsError:
                    raise CgroupError(f"cgroup {path} already exists") from None
                except OSError as error:
                    raise CgroupError(f"cgroup {name}: {error.strerror}: {path}") from None
                made.append((dir_fd, directory))
            self.set_limits(cgroup, memory_bytes, pids)  # from none: what differs is written
        except BaseException as error:
            for dir_fd, directory in reversed(made):
                with contextlib.suppress(OSError):
                    os.rmdir(directory, dir_fd=dir_fd)
            if isinstance(error, OSError):
                raise CgroupError(f"cgroup {name}: {error.strerror}: {error.filename}") from None
            raise
        return cgroup

    def _check_prepared(self) -> None:
        if not self._prepared:
            raise CgroupError(
                "cgroups: prepare() has not run"
                if self.support.version
                else f"cgroups unavailable: {self.support.reason}"
            )

    def set_limits(self, cgroup: SpawnCgroup, memory_bytes: int | None, pids: int | None) -> None:
        """Set a made cgroup's limits (a warm child's or one made ahead, once
        its spawn is known; one recycled, whose last spawn's limits are
        there), None being unlimited. Only a limit that differs from the
        one written is written. CgroupError if the kernel refused one (the
        cgroup is then never recycled: its limits are unknown)."""
        memory_now, pids_now = cgroup.limits
        try:
            if memory_bytes != memory_now:
                self._limit_memory(cgroup, memory_bytes, memory_now)
            if pids != pids_now:
                pids_at = cgroup.role_at("pids")
                if pids_at is not None:
                    value = "max" if pids is None else str(pids)
                    write(f"{pids_at[2]}/pids.max", value, dir_fd=pids_at[1])
        except OSError as error:
            cgroup.reusable = False
            raise CgroupError(f"cgroup {cgroup.name}: {error.strerror}: {error.filename}") from None
        cgroup.limits = (memory_bytes, pids)

    @staticmethod
    def _limit_memory(cgroup: SpawnCgroup, memory_bytes: int | None, now: int | None) -> None:
        """A spawn cgroup's memory limit, None: none; swap 0 with a limit
        (written when it had none), unlimited without one. `now`: the one
        there. On v1 a raised limit writes memory + swap first (the kernel
        keeps the limit below it), a lowered one after."""
        memory = cgroup.role_at("memory")
        if memory is None:
            return
        version, dir_fd, directory, absolute = memory
        if version == 2:
            value = "max" if memory_bytes is None else str(memory_bytes)
            write(f"{directory}/memory.max", value, dir_fd=dir_fd)
            if (now is None or memory_bytes is None) and has_file(absolute, "memory.swap.max"):
                swap = "max" if memory_bytes is None else "0"
                write(f"{directory}/memory.swap.max", swap, dir_fd=dir_fd)
            return
        limit = -1 if memory_bytes is None else memory_bytes
        raised = memory_bytes is None or (now is not None and memory_bytes > now)
        if raised and has_file(absolute, _MEMSW):
            write(f"{directory}/{_MEMSW}", str(limit), dir_fd=dir_fd)
            write(f"{directory}/memory.limit_in_bytes", str(limit), dir_fd=dir_fd)
        else:
            _memory_v1(directory, limit, dir_fd, has_file(absolute, _MEMSW))

    @staticmethod
    def _limit(cgroup: SpawnCgroup, memory_bytes: int | None, pids: int | None) -> None:
        """A tenant's (or front-end's) cgroup's limits, made or updated (a
        reload): each one given is written (a spawn cgroup's: `set_limits`)."""
        memory = cgroup.role_at("memory")
        if memory is not None and memory_bytes is not None:
            version, dir_fd, directory, absolute = memory
            if version == 2:
                write(f"{directory}/memory.max", str(memory_bytes), dir_fd=dir_fd)
                if has_file(absolute, "memory.swap.max"):
                    write(f"{directory}/memory.swap.max", "0", dir_fd=dir_fd)
            else:
                _memory_v1(directory, memory_bytes, dir_fd, has_file(absolute, _MEMSW))
        pids_at = cgroup.role_at("pids")
        if pids_at is not None and pids is not None:
            write(f"{pids_at[2]}/pids.max", str(pids), dir_fd=pids_at[1])


_MEMSW = "memory.memsw.limit_in_bytes"


def _memory_v1(directory: str, value: int, dir_fd: int | None, has_memsw: bool) -> None:
    """memory.limit_in_bytes and memory.memsw.limit_in_bytes (memory + swap:
    equal to the limit means no swap). The kernel keeps limit <= memsw, so
    raising a limit (a tenant's, at a reload) writes memsw first."""
    limit, memsw = f"{directory}/memory.limit_in_bytes", f"{directory}/{_MEMSW}"
    try:
        write(limit, str(value), dir_fd=dir_fd)
    except OSError as error:
        if error.errno != errno.EINVAL or not has_memsw:
            raise
        write(memsw, str(value), dir_fd=dir_fd)
        write(limit, str(value), dir_fd=dir_fd)
        return
    if has_memsw:
        write(memsw, str(value), dir_fd=dir_fd)


def _entries(subtree: Path) -> list[tuple[str, str]]:
    """(tenant directory or "", name) of every cgroup in `subtree` and in its
    tenant directories (an older layout had spawns in the subtree itself)."""
    found: list[tuple[str, str]] = []
    try:
        top = [e.name for e in os.scandir(subtree) if e.is_dir(follow_symlinks=False)]
    except FileNotFoundError:
        return found
    for name in top:
        found.append(("", name))
        if name.startswith(TENANT_PREFIX):
            with contextlib.suppress(FileNotFoundError):
                found.extend(
                    (name, e.name)
                    for e in os.scandir(subtree / name)
                    if e.is_dir(follow_symlinks=False)
                )
    return found
