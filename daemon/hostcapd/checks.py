"""The checks a config must pass before it serves: one function that
start-up, reload and `hostcapd check-config` all run.

    problems = check_config(config, host)            # [] when it may serve
    problems = check_config(config, probe_host_readonly())   # check-config

Each `Problem` names the tenant by name (`tenant 'beta': roots[1] ...`) and
carries the status a reload is refused with. The schema (unknown keys,
types, users and groups that exist) is pydantic's, at load time; these are
the checks that need the host: identities, roots, socket paths and modes,
and the protections a tenant requires.
"""

from __future__ import annotations

import contextlib
import grp
import os
import stat
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final

from hostcap_proto.names import ReasonName

from hostcapd.config import (
    PROTECTION_NAMES,
    Config,
    Level,
    Tenant,
    socket_mode_problem,
)
from hostcapd.sandbox import landlock, seccomp
from hostcapd.sandbox.cgroups import CgroupHost
from hostcapd.sandbox.profile import HostSupport, ProtectionUnavailable
from hostcapd.sandbox.tenant_ceilings import share_problems
from hostcapd.tenant_checks import cross_tenant_problems

#: Status codes of a refused reload (hostcap_proto's error codes).
INVALID: Final = "INVALID_ARGUMENT"
UNPROTECTED: Final = "PROTECTION_UNAVAILABLE"


@dataclass(frozen=True)
class Problem:
    """One reason a config may not serve."""

    code: ReasonName
    message: str

    def __str__(self) -> str:
        return self.message


def probe_host_readonly(cgroup_parent: str = "") -> HostSupport:
    """What this host offers, probed without changing anything (no cgroup
    subtree is made, the process is not moved): for `check-config`."""
    return HostSupport(
        is_root=os.geteuid() == 0,
        landlock=landlock.probe(),
        seccomp=seccomp.probe(),
        cgroups=CgroupHost.probe(cgroup_parent),
    )


def check_config(
    config: Config, host: HostSupport, tenants: Iterable[str] | None = None
) -> list[Problem]:
    """Every problem of `config` on `host`; `tenants` limits the per-tenant
    checks to those names (a reload checks the tenants it adds or changes)."""
    problems = _daemon_problems(config)
    # The tenants together, whatever subset is checked: a reload that adds
    # one may take the host past its share.
    problems += [Problem(INVALID, m) for m in share_problems(config.tenants, host.totals)]
    wanted = None if tenants is None else set(tenants)
    problems += [Problem(INVALID, m) for m in cross_tenant_problems(config, wanted)]
    for tenant in config.tenants:
        if wanted is None or tenant.name in wanted:
            problems += [
                Problem(code, f"tenant {tenant.name!r}: {message}")
                for code, message in _tenant_problems(tenant)
            ]
            problems += [Problem(UNPROTECTED, m) for m in _protection_problems(tenant, host)]
    return problems


def summary(problems: list[Problem]) -> str:
    """One message for all of them (a start-up error, a reload refusal)."""
    if len(problems) == 1:
        return problems[0].message
    return f"{len(problems)} problems: " + "; ".join(p.message for p in problems)


def _daemon_problems(config: Config) -> list[Problem]:
    problems: list[Problem] = []
    admin = config.admin
    if admin is not None:
        if admin.socket in {t.socket for t in config.tenants}:
            problems.append(
                Problem(INVALID, f"admin.socket {admin.socket} is also a tenant's socket")
            )
        if isinstance(admin.group, str):
            try:
                grp.getgrnam(admin.group)
            except KeyError:
                problems.append(Problem(INVALID, f"admin.group {admin.group!r} does not exist"))
        problems += [
            Problem(INVALID, m) for m in _socket_path_problems("admin.socket", admin.socket)
        ]
    return problems


def _socket_path_problems(key: str, path: os.PathLike[str]) -> list[str]:
    with contextlib.suppress(FileNotFoundError):
        st = os.lstat(path)
        if not stat.S_ISSOCK(st.st_mode):
            return [f"{key} {os.fspath(path)} exists and is not a socket"]
    return []


def _tenant_problems(tenant: Tenant) -> list[tuple[ReasonName, str]]:
    out: list[tuple[ReasonName, str]] = []
    try:
        uid, gid = tenant.uid, tenant.gid
    except ValueError as error:
        return [(INVALID, str(error))]
    if uid == 0:
        out.append((INVALID, "run_as_user is root: tenants never run as root"))
    if gid == 0:
        out.append((INVALID, "run_as_group is root's group: tenants never run as root"))
    try:
        tenant.socket_uid  # noqa: B018 (resolves the name)
        tenant.socket_gid  # noqa: B018
    except ValueError as error:
        out.append((INVALID, str(error)))
    problem = socket_mode_problem(tenant.socket_mode, tenant.socket_group)
    if problem:
        out.append((INVALID, problem))
    out += [(INVALID, m) for m in _socket_path_problems("socket", tenant.socket)]
    for index, root in enumerate(tenant.roots):
        message = _root_problem(root.path, uid, gid)
        if message:
            out.append((INVALID, f"roots[{index}] {root.path} {message}"))
    return out


def _root_problem(path: os.PathLike[str], uid: int, gid: int) -> str:
    """Why the root cannot serve: missing, not a directory, not openable, or
    (by its mode bits) not readable and searchable by the run-as identity,
    which has no supplementary groups. A root with an ACL is left to the fs
    worker's own check at start-up (the kernel's answer)."""
    try:
        fd = os.open(path, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    except FileNotFoundError:
        return "does not exist"
    except NotADirectoryError:
        return "is not a directory"
    except OSError as error:
        return f"cannot be opened: {os.strerror(error.errno or 0)}"
    try:
        st = os.fstat(fd)
    finally:
        os.close(fd)
    if uid == 0 or _has_acl(path):
        return ""
    if st.st_uid == uid:
        bits = (st.st_mode >> 6) & 0o7
    elif st.st_gid == gid:
        bits = (st.st_mode >> 3) & 0o7
    else:
        bits = st.st_mode & 0o7
    if bits & 0o5 != 0o5:
        return f"is not readable and searchable by the run-as identity (uid {uid} gid {gid})"
    return ""


def _has_acl(path: os.PathLike[str]) -> bool:
    try:
        return "system.posix_acl_access" in os.listxattr(path)
    except OSError:
        return False


def _protection_problems(tenant: Tenant, host: HostSupport) -> list[str]:
    """The protections `tenant` requires that `host` cannot apply (the same
    decision as `sandbox.profile.prepare`, which still refuses at its turn)."""
    sandbox = tenant.sandbox
    out: list[str] = []
    for name in PROTECTION_NAMES:
        if sandbox.level(name) is not Level.REQUIRED:
            continue
        if name == "net_namespace" and tenant.network_mode == "host":
            continue
        if name in sandbox.simulate_unavailable:
            ok, reason = False, "unavailable (simulated by sandbox.simulate_unavailable)"
        else:
            ok, reason = host.offers(name)
        if ok and name == "fs_changes" and tenant.disk.budget_bytes is None:
            ok, reason = False, "the tenant has no file system of its own (no disk budget)"
        if not ok:
            out.append(str(ProtectionUnavailable(tenant.name, name, reason)))
    return out
