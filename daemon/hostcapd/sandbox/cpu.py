"""CPU fairness: one cpu cgroup per tenant, which all of its spawns join.

    cpu = CpuHost.probe(parent)              # finds the cpu hierarchy (v1 "cpu")
    share = cpu.tenant("dev", weight=100, max_cores=1.5)   # makes and sets tenant-dev
    fds = share.procs_fds()                  # the child writes "0" into each, like its own cgroups

A tenant's spawns together get one CPU share (`cpu.shares` on v1, scaled
from the cgroup v2 weight: 100 -> 1024) and, optionally, a hard quota in
cores (`cpu.cfs_quota_us` over a 100 ms period): one tenant's busy loops then
compete as ONE entity against the other tenants', however many it runs.
The tenant cgroups live in `<the daemon's own cpu cgroup>/<subtree>`, so
the daemon's own processes (the daemon, its spawner, the fs workers) stay
outside them: each of its threads weighs as much as a whole tenant, and
tenant work never starves the daemon.

No per-spawn cpu cgroup is made (no extra mkdir and rmdir per spawn): the
tenant's directory is joined as is, alongside the spawn's own memory/pids
cgroups. Killing and accounting stay with those.

Only the v1 cpu hierarchy is used here. On a pure cgroup v2 host, a tenant
share needs the spawn cgroups nested under a tenant cgroup, which the v2
layout of `cgroups.py` does not do yet: there the share is reported not
applied, and a tenant that requires a quota is refused (decision 0024).
"""

from __future__ import annotations

import contextlib
import functools
import os
from dataclasses import dataclass
from pathlib import Path

from hostcapd.sandbox.cgroupfs import (
    V2_MOUNT,
    CgroupError,
    cgroup_mounts,
    own_paths,
    read,
    subtree_path,
    within,
    write,
)

TENANT_PREFIX = "tenant-"
#: The kernel's default weight (cgroup v2 cpu.weight); 1024 v1 shares.
DEFAULT_WEIGHT = 100
V1_SHARES_PER_WEIGHT = 1024 / 100
#: The CFS period a quota is set over, microseconds.
PERIOD_US = 100_000


@dataclass(frozen=True)
class TenantShare:
    """A tenant's cpu cgroup, as applied."""

    directory: Path
    weight: int
    #: None: no hard quota.
    max_cores: float | None

    def place(self, pid: int) -> None:
        """Move process `pid` into the tenant's cpu cgroup; OSError if refused."""
        write(self.directory / "cgroup.procs", str(pid))

    @functools.cached_property
    def _procs(self) -> _KeptFd:
        """Its cgroup.procs, opened once (O_WRONLY|O_CLOEXEC), closed with it."""
        try:
            return _KeptFd(os.open(self.directory / "cgroup.procs", os.O_WRONLY | os.O_CLOEXEC))
        except OSError as error:
            raise CgroupError(
                f"cpu cgroup {self.directory}: cannot open cgroup.procs: {error.strerror}"
            ) from None

    def procs_fds(self) -> list[int]:
        """An O_WRONLY|O_CLOEXEC fd of the tenant cgroup's cgroup.procs, the
        caller's to close: a dup of the one opened once (every spawn joins
        this one cgroup; a dup is one syscall where an open was a lookup of
        each of nine path components)."""
        return [os.dup(self._procs.fd)]

    def lent_procs_fds(self) -> list[int]:
        """The fd `procs_fds` dups, lent (as SpawnCgroup.lent_procs_fds):
        the caller never closes it, and uses it before anything else runs."""
        return [self._procs.fd]


class _KeptFd:
    """An fd closed when the last holder lets go of it (never while a
    caller may still dup it)."""

    __slots__ = ("fd",)

    def __init__(self, fd: int) -> None:
        self.fd = fd

    def __del__(self) -> None:
        with contextlib.suppress(OSError):
            os.close(self.fd)


@dataclass
class CpuHost:
    """Where tenant cpu cgroups go on this host, or why they cannot."""

    #: The cpu subtree (v1), None when unusable.
    subtree: Path | None
    reason: str
    quota: bool = False

    @classmethod
    def probe(cls, parent: str = "") -> CpuHost:
        if os.geteuid() != 0:
            return cls(None, "daemon is not root")
        try:
            mounts = cgroup_mounts(read(Path("/proc/self/mountinfo")))
            own = own_paths(read(Path("/proc/self/cgroup")))
        except OSError as error:
            return cls(None, f"cannot read the process's cgroups: {error.strerror}")
        if any(m.fstype == "cgroup2" and m.point == V2_MOUNT for m in mounts):
            return cls(
                None,
                "pure cgroup v2 host: tenant cpu cgroups are not implemented for v2 yet",
            )
        for mount in mounts:
            if mount.fstype != "cgroup" or "cpu" not in mount.options:
                continue
            key = next((k for k in own if "cpu" in k), None)
            path = own.get(key) if key is not None else None
            own_dir = within(mount, path) if path is not None else None
            if own_dir is None or not os.access(own_dir, os.W_OK):
                continue
            try:
                subtree = subtree_path(own_dir, mount.point, parent)
            except CgroupError as error:
                return cls(None, str(error))
            quota = (own_dir / "cpu.cfs_quota_us").exists()
            return cls(subtree, f"cgroup v1 cpu: tenant shares under {subtree}", quota=quota)
        return cls(None, "no writable v1 cpu hierarchy")

    def tenant(self, name: str, weight: int, max_cores: float | None) -> TenantShare:
        """Make (or update) `tenant-<name>` with its share and quota. Raises
        CgroupError when the host cannot apply them."""
        if self.subtree is None:
            raise CgroupError(f"no cpu controller: {self.reason}")
        if max_cores is not None and not self.quota:
            raise CgroupError("the cpu hierarchy has no CFS bandwidth control (cpu.cfs_quota_us)")
        directory = self.subtree / f"{TENANT_PREFIX}{name}"
        try:
            directory.mkdir(parents=True, exist_ok=True)
            write(directory / "cpu.shares", str(max(2, round(weight * V1_SHARES_PER_WEIGHT))))
            if self.quota:
                if max_cores is None:
                    write(directory / "cpu.cfs_quota_us", "-1")
                else:
                    write(directory / "cpu.cfs_period_us", str(PERIOD_US))
                    write(
                        directory / "cpu.cfs_quota_us", str(max(1000, round(max_cores * PERIOD_US)))
                    )
        except OSError as error:
            raise CgroupError(
                f"cpu cgroup {directory}: {error.strerror}: {error.filename}"
            ) from None
        return TenantShare(directory, weight, max_cores)

    def release(self) -> None:
        """On a clean stop: remove the (empty) tenant cgroups and the subtree."""
        if self.subtree is None:
            return
        with contextlib.suppress(OSError):
            for entry in os.scandir(self.subtree):
                if entry.is_dir(follow_symlinks=False) and entry.name.startswith(TENANT_PREFIX):
                    with contextlib.suppress(OSError):
                        os.rmdir(entry.path)
        with contextlib.suppress(OSError):
            self.subtree.rmdir()
