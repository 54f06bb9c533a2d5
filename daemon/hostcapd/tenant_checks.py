"""The checks that compare tenants with each other and with the host's own
directories, and the audit log's permissions: what would let one tenant
reach another's files or socket, or anyone rewrite the audit history.
`hostcapd.checks.check_config` runs them with the rest.

- roots: two tenants' roots may overlap (one the same as, or inside, the
  other) only when both are read-only; `/`, a system directory, or a
  directory holding one is never a root, nor anything under /proc, /sys,
  /dev or /boot;
- run-as: two tenants may share a run-as uid only when both say
  `shared_run_as = true` (their spawns can then reach each other's
  processes and files: one security domain);
- socket group: a tenant's socket group must not be a group its run-as
  identity belongs to (its spawns could connect to the socket);
- audit: neither `audit.file_mode` nor the audit directory is group- or
  world-writable (the hash chain has no key: a writer can rewrite it).
"""

from __future__ import annotations

import grp
import os
import pwd
import stat
from collections.abc import Iterable
from pathlib import Path

from hostcapd.config import Config, Tenant, Tier

#: Directories of the host that are never a tenant's root, nor inside one.
SYSTEM_DIRECTORIES: tuple[Path, ...] = tuple(
    Path(p)
    for p in (
        "/bin",
        "/boot",
        "/dev",
        "/etc",
        "/lib",
        "/lib32",
        "/lib64",
        "/libx32",
        "/proc",
        "/root",
        "/run",
        "/sbin",
        "/sys",
        "/usr",
        "/var",
    )
)
#: Kernel and boot interfaces: nothing under them is a root either.
KERNEL_DIRECTORIES: tuple[Path, ...] = tuple(Path(p) for p in ("/proc", "/sys", "/dev", "/boot"))


def _tenant_problem(tenant: Tenant, message: str) -> str:
    return f"tenant {tenant.name!r}: {message}"


def root_problems(tenant: Tenant) -> list[str]:
    """`/`, a system directory (the host's or the tenant's sandbox.system_dirs),
    a directory holding one, or a kernel interface as a root."""
    out: list[str] = []
    system = {*SYSTEM_DIRECTORIES, *tenant.sandbox.system_dirs}
    for index, root in enumerate(tenant.roots):
        path = root.path
        if path == Path("/"):
            out.append(f"roots[{index}] is / (the whole host): a root is a directory of the tenant")
            continue
        held = sorted(str(s) for s in system if s == path or s.is_relative_to(path))
        if held:
            out.append(
                f"roots[{index}] {path} is or holds a system directory ({', '.join(held)}): "
                "a root is a directory of the tenant"
            )
            continue
        kernel = next((k for k in KERNEL_DIRECTORIES if path.is_relative_to(k)), None)
        if kernel is not None:
            out.append(
                f"roots[{index}] {path} is under {kernel}: a root is a directory of the tenant"
            )
    return [_tenant_problem(tenant, m) for m in out]


def _same_or_inside(a: Path, b: Path) -> bool:
    return a == b or a.is_relative_to(b) or b.is_relative_to(a)


def _real(path: Path) -> Path:
    """The path with its symlinks resolved, where it exists (two spellings
    of one directory overlap)."""
    try:
        return Path(os.path.realpath(path, strict=True))
    except OSError:
        return path


def overlap_problems(tenants: Iterable[Tenant]) -> list[str]:
    """Roots shared by two tenants (the same, or one inside the other)
    where either has it read-write."""
    out: list[str] = []
    listed = list(tenants)
    for i, first in enumerate(listed):
        for second in listed[i + 1 :]:
            for a_index, a in enumerate(first.roots):
                for b_index, b in enumerate(second.roots):
                    if not _same_or_inside(_real(a.path), _real(b.path)):
                        continue
                    if a.tier is Tier.READ_ONLY and b.tier is Tier.READ_ONLY:
                        continue
                    out.append(
                        _tenant_problem(
                            second,
                            f"roots[{b_index}] {b.path} ({b.tier.value}) overlaps tenant "
                            f"{first.name!r}'s roots[{a_index}] {a.path} ({a.tier.value}): "
                            "tenants may share a root only when both have it read-only",
                        )
                    )
    return out


def run_as_problems(tenants: Iterable[Tenant]) -> list[str]:
    """Two tenants with one run-as uid, unless both say shared_run_as."""
    out: list[str] = []
    seen: dict[int, Tenant] = {}
    for tenant in tenants:
        try:
            uid = tenant.uid
        except ValueError:
            continue  # reported with the tenant's own problems
        other = seen.get(uid)
        if other is None:
            seen[uid] = tenant
            continue
        if tenant.shared_run_as and other.shared_run_as:
            continue
        out.append(
            _tenant_problem(
                tenant,
                f"run_as_user (uid {uid}) is also tenant {other.name!r}'s: their spawns could "
                "reach each other's processes and files (give each tenant a user of its own, "
                "or set shared_run_as = true in both to share one on purpose)",
            )
        )
    return out


def socket_group_problems(tenant: Tenant) -> list[str]:
    """A socket group the tenant's run-as identity belongs to: its spawns
    could connect to the tenant's socket."""
    if tenant.socket_group is None:
        return []
    try:
        gid, run_uid, run_gid = tenant.socket_gid, tenant.uid, tenant.gid
    except ValueError:
        return []  # reported with the tenant's own problems
    member = gid == run_gid
    try:
        user = pwd.getpwuid(run_uid)
        member = member or user.pw_gid == gid or user.pw_name in grp.getgrgid(gid).gr_mem
    except KeyError:
        pass
    if not member:
        return []
    return [
        _tenant_problem(
            tenant,
            f"socket_group (gid {gid}) is a group of the run-as identity (uid {run_uid} "
            f"gid {run_gid}): its spawns could connect to the tenant's socket "
            "(use a group of the tenant's engines only)",
        )
    ]


def audit_problems(config: Config) -> list[str]:
    """A group- or world-writable audit file mode or audit directory."""
    out: list[str] = []
    mode = config.audit.file_mode
    if mode & 0o022:
        out.append(
            f"audit.file_mode {mode:#o} lets others write the audit log, whose hash chain "
            "has no key: they could rewrite its history (use 0o640 or 0o600)"
        )
    directory = config.audit.path.parent
    try:
        st = directory.stat()
    except OSError:
        return out  # made at start-up, 0o755 under the daemon's umask
    if stat.S_IMODE(st.st_mode) & 0o022:
        out.append(
            f"audit directory {directory} is mode {stat.S_IMODE(st.st_mode):#o}: others "
            "could replace the audit files or plant files beside them (a directory of its "
            "own, 0o755 or tighter)"
        )
    return out


def cross_tenant_problems(config: Config, wanted: set[str] | None = None) -> list[str]:
    """Every problem above; with `wanted`, those naming a wanted tenant (a
    reload) and the audit's."""
    per_tenant = [
        m
        for t in config.tenants
        if wanted is None or t.name in wanted
        for m in (*root_problems(t), *socket_group_problems(t))
    ]
    pairs = [*overlap_problems(config.tenants), *run_as_problems(config.tenants)]
    if wanted is not None:
        pairs = [m for m in pairs if any(f"tenant {n!r}" in m for n in wanted)]
    return [*audit_problems(config), *per_tenant, *pairs]
