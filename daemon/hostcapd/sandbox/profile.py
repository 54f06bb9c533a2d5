"""The sandbox profile of a tenant, decided once at start-up.

`probe_host()` asks the kernel what it offers; `prepare()` turns a tenant's
profile into the applied set of protections plus the plain values the child
set-up needs. A `required` protection the host cannot apply raises
`ProtectionUnavailable` naming it and why: the daemon then refuses to serve
that tenant rather than run it weaker.
"""

from __future__ import annotations

import logging
import os
import signal
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from hostcap_proto.names import SpawnProtectionName

from hostcapd.config import PROTECTION_NAMES, Level, Tenant, Tier
from hostcapd.egress.rules import PROXY_PORT
from hostcapd.sandbox import (
    cgroups,
    cpu,
    diskquota,
    fschanges,
    landlock,
    namespaces,
    seccomp,
    sockets,
)
from hostcapd.sandbox.spawn_cgroup import SpawnCgroup
from hostcapd.sandbox.tenant_ceilings import HostTotals, TenantCeilings, tenant_ceilings
from hostcapd.spawner.messages import RegisterProfile

log = logging.getLogger("hostcapd.sandbox")

DEV_FILES = tuple(
    Path(p) for p in ("/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom")
)


class ProtectionUnavailable(Exception):
    """A protection the tenant requires cannot be applied on this host."""

    def __init__(self, tenant: str, protection: str, reason: str) -> None:
        super().__init__(
            f"tenant {tenant!r} requires {protection}, which this host cannot apply: {reason}"
        )
        self.tenant = tenant
        self.protection = protection
        self.reason = reason


@dataclass(frozen=True)
class ProtectionStatus:
    name: SpawnProtectionName
    applied: bool
    reason: str
    required: bool


@dataclass
class HostSupport:
    """What this host offers, probed once."""

    is_root: bool
    landlock: landlock.LandlockSupport
    seccomp: seccomp.SeccompSupport
    cgroups: cgroups.CgroupHost
    seccomp_filter: bytes = b""
    #: The filter compiled for each socket policy in use (the default one is seccomp_filter).
    seccomp_filters: dict[sockets.SocketPolicy, bytes] = field(default_factory=dict)
    #: Why the cgroup subtree could not be prepared, if it could not.
    cgroup_failure: str = ""
    #: Where tenant cpu cgroups go (hostcapd.sandbox.cpu).
    cpu: cpu.CpuHost = field(default_factory=lambda: cpu.CpuHost(None, "not probed"))
    #: Where tenant disk images go; the server sets its directory.
    disks: diskquota.DiskHost = field(default_factory=lambda: diskquota.DiskHost(None))
    #: What the tenants share: pid_max and memory (their ceilings' budget).
    totals: HostTotals = field(default_factory=HostTotals.read)
    #: Each tenant's file-change watcher, kept across reloads (its mount is).
    fs_watchers: dict[str, fschanges.FsChangesWatcher] = field(default_factory=dict)
    _fs_probe: tuple[bool, str] | None = None

    def offers(self, name: str) -> tuple[bool, str]:
        if name in namespaces.NAMESPACES:
            return namespaces.probe(name, self.is_root)
        if name == "landlock":
            if self.landlock.abi == 0:
                return False, self.landlock.reason
            return True, landlock.rights_summary(self.landlock.abi)
        if name == "seccomp":
            return self.seccomp.available, self.seccomp.reason
        if name == "cgroup":
            support = self.cgroups.support
            if not support.version:
                return False, support.reason
            if self.cgroup_failure:
                return False, self.cgroup_failure
            return True, f"cgroup {support.version}: {','.join(support.controllers)}"
        if name == "uid_drop":
            return (True, "") if self.is_root else (False, "daemon is not root")
        if name in ("rlimits", "no_new_privs", "exec_by_fd"):
            return True, ""
        if name == "fs_changes":  # and a disk budget: prepare() checks the tenant's
            if self._fs_probe is None:
                self._fs_probe = fschanges.probe()
            return self._fs_probe
        raise KeyError(name)

    def filter_for(self, policy: sockets.SocketPolicy) -> bytes:
        """The seccomp program of a tenant's socket policy, compiled once per policy."""
        if policy == sockets.DEFAULT_POLICY and self.seccomp_filter:
            return self.seccomp_filter
        if policy not in self.seccomp_filters:
            self.seccomp_filters[policy] = seccomp.build_filter(sockets=policy)
        return self.seccomp_filters[policy]


def probe_host(cgroup_parent: str = "", favor_dynmods: bool = True) -> HostSupport:
    host = HostSupport(
        is_root=os.geteuid() == 0,
        landlock=landlock.probe(),
        seccomp=seccomp.probe(),
        cgroups=cgroups.CgroupHost.probe(cgroup_parent),
        cpu=cpu.CpuHost.probe(cgroup_parent),
    )
    if host.seccomp.available:
        host.seccomp_filter = seccomp.build_filter()  # compiled once for every tenant
    if host.cgroups.support.version:
        try:
            host.cgroups.prepare()  # the daemon's own subtree (on v2 it moves in)
        except cgroups.CgroupError as error:
            host.cgroup_failure = str(error)
        if favor_dynmods and not host.cgroup_failure:
            try:
                done = cgroups.favor_dynamic_modifications()
            except cgroups.CgroupError as error:
                log.warning(
                    "%s; spawns after an idle moment pay ~10 ms to join their cgroup", error
                )
            else:
                if done:
                    log.info("cgroup: %s", done)
    return host


@dataclass
class TenantProfile:
    """A tenant's applied protections and the prepared values of its children."""

    tenant: str
    protections: tuple[ProtectionStatus, ...]
    ns: namespaces.NamespacePlan
    seccomp_filter: bytes
    #: Per-spawn rulesets are made from it (the child adds its own mounts' rules).
    landlock: landlock.RulesetTemplate | None
    #: (path, access) the child adds for the mounts it makes (/proc, /tmp).
    landlock_mount_rules: tuple[tuple[bytes, int], ...]
    landlock_abi: int
    no_new_privs: bool
    drop_caps: bool
    oom_score_adj: int
    umask: int
    applied: frozenset[str] = field(default_factory=frozenset)
    #: The socket families the seccomp filter lets children create (empty without seccomp).
    socket_families: tuple[str, ...] = ()
    #: The tenant's cpu cgroup, which every spawn joins; None when not applied.
    cpu_share: cpu.TenantShare | None = None
    #: The tenant's disk budget; None when it has none.
    disk: diskquota.DiskBudget | None = None
    #: The tenant's ceilings over all its spawns, and its front-end's.
    ceilings: TenantCeilings | None = None
    #: Its spawns' cgroups go in its tenant cgroup; None without cgroups.
    cgroups: cgroups.CgroupHost | None = None
    #: Its front-end's and fs worker's cgroup; None without cgroups.
    frontend_cgroup: SpawnCgroup | None = None
    #: The reader of its file system's changes; None when fs_changes is not applied.
    fs_changes: fschanges.FsChangesWatcher | None = None

    def place_daemon_side(self, pid: int) -> None:
        """Make process `pid`, working on this tenant's behalf (its
        front-end, its fs worker), the tenant's cost: into its front-end
        cgroup (memory and pids limits) and its cpu cgroup (its weight),
        with its children's oom_score_adj, so the kernel kills it before it
        kills another tenant's children. Raises OSError if one is refused."""
        if self.frontend_cgroup is not None:
            self.frontend_cgroup.place(pid)
        if self.cpu_share is not None:
            self.cpu_share.place(pid)
        if os.geteuid() == 0:
            fd = os.open(f"/proc/{pid}/oom_score_adj", os.O_WRONLY | os.O_CLOEXEC)
            try:
                os.write(fd, str(self.oom_score_adj).encode())
            finally:
                os.close(fd)

    def cpu_procs_fds(self, *, lent: bool = False) -> list[int]:
        """cgroup.procs fds of the tenant's cpu cgroup, for the child to join
        (`lent`: the share's own, never closed by the caller: TenantShare.lent_procs_fds)."""
        share = self.cpu_share
        if share is None:
            return []
        return share.lent_procs_fds() if lent else share.procs_fds()

    def has(self, name: str) -> bool:
        return name in self.applied

    @property
    def memory_mechanism(self) -> str:
        return "cgroup" if self.has("cgroup") else "rlimit_as"

    def spawner_message(self, key: str) -> RegisterProfile:
        """The registration the spawner keeps for this tenant's spawns."""
        return RegisterProfile(
            key=key,
            clone_flags=self.ns.clone_flags,
            mounts=tuple(self.ns.mounts),
            join_mounts=tuple(self.ns.join_mounts),
            hostname=self.ns.hostname,
            loopback_up=self.ns.loopback_up,
            umask=self.umask,
            landlock_rules=tuple(self.landlock_mount_rules),
            seccomp=self.seccomp_filter,
            drop_caps=self.drop_caps,
            no_new_privs=self.no_new_privs,
            oom_score_adj=str(self.oom_score_adj).encode() if os.geteuid() == 0 else None,
            pdeathsig=int(signal.SIGKILL),
            tty_landlock_rules=self.tty_landlock_rules,
        )

    @property
    def tty_landlock_rules(self) -> tuple[tuple[bytes, int], ...]:
        """A tty spawn's own terminals (decision 0031): /dev/tty is its
        controlling terminal, /dev/ptmx and /dev/pts its devpts instance."""
        if self.landlock is None:
            return ()
        rights = landlock.dev_file_rights(self.landlock_abi)
        return tuple((path, rights) for path in (b"/dev/tty", b"/dev/ptmx", b"/dev/pts"))

    def new_ruleset(self) -> int:
        """A landlock ruleset fd for one spawn (-1 without landlock)."""
        return self.landlock.build() if self.landlock is not None else -1

    def close(self) -> None:
        if self.landlock is not None:
            self.landlock.close()
            self.landlock = None
        if self.cgroups is not None:
            self.cgroups.close()  # its spawns' cgroups in flight keep what they need


def _landlock_rules(tenant: Tenant, applied: set[str]) -> landlock.LandlockRules:
    # The child's own /proc and /tmp get their rules from the child itself
    # (landlock_mount_rules): a rule on the host directory does not reach a
    # mount stacked over it. Roots kept beneath /tmp are bind mounts of the
    # root itself, which the root's own rule does cover.
    read_write = [r.path for r in tenant.roots if r.tier is Tier.READ_WRITE]
    read_only = [r.path for r in tenant.roots if r.tier is Tier.READ_ONLY]
    return landlock.LandlockRules(
        read_write=tuple(read_write),
        read_only=tuple(read_only),
        read_exec=tuple(p for p in tenant.sandbox.system_dirs if p.exists()),
        dev_files=DEV_FILES,
        # Landlock's TCP rules refuse every bind and connect (but the egress
        # proxy's port). In the spawn's own network namespace (its loopback and,
        # in proxy mode, the proxy's listener; no route out) they would only
        # break loopback servers and clients, so they are not needed there; a
        # host-network tenant keeps today's rules (issue 30).
        restrict_tcp=tenant.network_mode != "host" and "net_namespace" not in applied,
        scope=True,
        connect_ports=(PROXY_PORT,) if tenant.network_mode == "proxy" else (),
    )


def prepare(tenant: Tenant, host: HostSupport, tenants: Sequence[Tenant] = ()) -> TenantProfile:
    """`tenant`'s profile on `host`; `tenants`, the whole config's, share the
    host with it (its derived ceilings are a part of the host's share)."""
    sandbox = tenant.sandbox
    statuses: list[ProtectionStatus] = []
    applied: set[str] = set()
    for name in PROTECTION_NAMES:
        level = sandbox.level(name)
        required = level is Level.REQUIRED
        if level is Level.OFF:
            statuses.append(ProtectionStatus(name, False, "off in the tenant's profile", False))
            continue
        if name == "net_namespace" and tenant.network_mode == "host":
            statuses.append(ProtectionStatus(name, False, "profile allows the host network", False))
            continue
        if name in sandbox.simulate_unavailable:
            ok, reason = False, "unavailable (simulated by sandbox.simulate_unavailable)"
        else:
            ok, reason = host.offers(name)
        if not ok and required:
            raise ProtectionUnavailable(tenant.name, name, reason)
        statuses.append(ProtectionStatus(name, ok, reason, required))
        if ok:
            applied.add(name)

    if tenant.network_mode == "proxy" and "net_namespace" not in applied:
        raise ProtectionUnavailable(
            tenant.name,
            "net_namespace",
            'network.mode = "proxy" needs a private network namespace (the proxy is its only '
            "way out), and it is not applied",
        )
    socket_policy = sockets.socket_policy(inet=sandbox.network_sockets)
    cpu_share = _cpu_share(tenant, host, applied)
    ceilings = tenant_ceilings(tenant, tenants or (tenant,), host.totals)
    tenant_cgroups, frontend_cgroup = _tenant_cgroups(tenant, host, applied, ceilings)
    try:
        disk = host.disks.attach(tenant)
    except diskquota.DiskBudgetError as error:
        raise ProtectionUnavailable(tenant.name, "disk_budget", str(error)) from None
    watcher = _fs_changes(tenant, host, disk, statuses, applied)
    template = None
    mount_rules: tuple[tuple[bytes, int], ...] = ()
    if "landlock" in applied:
        template = landlock.RulesetTemplate(_landlock_rules(tenant, applied), host.landlock.abi)
        private_tmp = "mount_namespace" in applied
        mount_rules = landlock.mount_rules(
            host.landlock.abi, proc=private_tmp and "pid_namespace" in applied, tmp=private_tmp
        )
        if private_tmp and Path("/dev/shm").is_dir():
            # The child's private /dev/shm (POSIX shared memory, semaphores).
            mount_rules += ((b"/dev/shm", landlock.fs_rights(host.landlock.abi)),)
    return TenantProfile(
        tenant=tenant.name,
        protections=tuple(statuses),
        ns=namespaces.plan(
            applied,
            sandbox.tmp_size_bytes,
            sandbox.hostname,
            tuple((r.path, r.tier is Tier.READ_WRITE) for r in tenant.roots),
            sandbox.system_dirs,
        ),
        seccomp_filter=host.filter_for(socket_policy) if "seccomp" in applied else b"",
        landlock=template,
        landlock_mount_rules=mount_rules,
        landlock_abi=host.landlock.abi if "landlock" in applied else 0,
        no_new_privs="no_new_privs" in applied,
        drop_caps="uid_drop" in applied,
        oom_score_adj=sandbox.oom_score_adj,
        umask=tenant.fs.umask,
        applied=frozenset(applied),
        socket_families=tuple(socket_policy.names()) if "seccomp" in applied else (),
        cpu_share=cpu_share,
        disk=disk,
        ceilings=ceilings,
        cgroups=tenant_cgroups,
        frontend_cgroup=frontend_cgroup,
        fs_changes=watcher,
    )


def _fs_changes(
    tenant: Tenant,
    host: HostSupport,
    disk: diskquota.DiskBudget | None,
    statuses: list[ProtectionStatus],
    applied: set[str],
) -> fschanges.FsChangesWatcher | None:
    """The tenant's file-change watcher (kept across reloads), once the loop
    above found the kernel able; it also needs the tenant's own file system."""
    if "fs_changes" not in applied:
        return None
    index = next(i for i, s in enumerate(statuses) if s.name == "fs_changes")
    required = statuses[index].required
    watcher = host.fs_watchers.get(tenant.name)
    reason = ""
    if disk is None:
        reason = "the tenant has no file system of its own (set [tenants.X.disk] budget_bytes)"
    elif watcher is None or watcher.mount != disk.mount or watcher.roots != disk.roots:
        if watcher is not None:
            watcher.close()
            del host.fs_watchers[tenant.name]
        try:
            watcher = fschanges.FsChangesWatcher.start(
                tenant.name, disk.mount, disk.roots, tenant.fs_changes.max_paths
            )
        except (fschanges.FsChangesUnavailable, OSError) as error:
            watcher, reason = None, str(error)
        else:
            host.fs_watchers[tenant.name] = watcher
    if watcher is None or reason:
        if required:
            raise ProtectionUnavailable(tenant.name, "fs_changes", reason)
        statuses[index] = ProtectionStatus("fs_changes", False, reason, False)
        applied.discard("fs_changes")
        return None
    watcher.max_paths = tenant.fs_changes.max_paths
    return watcher


def _tenant_cgroups(
    tenant: Tenant, host: HostSupport, applied: set[str], ceilings: TenantCeilings
) -> tuple[cgroups.CgroupHost | None, SpawnCgroup | None]:
    """The tenant's cgroup (its ceilings) and its front-end's. With cgroups
    applied, a host that refuses either refuses the tenant."""
    if "cgroup" not in applied:
        log.info(
            "tenant %s: no tenant ceilings (the cgroup protection is not applied)", tenant.name
        )
        return None, None
    try:
        view = host.cgroups.for_tenant(
            tenant.name, pids=ceilings.pids, memory_bytes=ceilings.memory_bytes
        )
        side = host.cgroups.frontend(
            tenant.name,
            pids=ceilings.frontend_pids,
            memory_bytes=ceilings.frontend_memory_bytes,
        )
    except cgroups.CgroupError as error:
        raise ProtectionUnavailable(tenant.name, "tenant_ceilings", str(error)) from None
    if ceilings.derived:
        log.info("tenant %s: %s", tenant.name, ceilings.derived)
    return view, side


def _cpu_share(tenant: Tenant, host: HostSupport, applied: set[str]) -> cpu.TenantShare | None:
    """The tenant's cpu cgroup; a quota the host cannot enforce refuses the tenant."""
    settings = tenant.cpu
    share: cpu.TenantShare | None = None
    reason = "the cgroup protection is not applied"
    if "cgroup" in applied:
        try:
            share = host.cpu.tenant(tenant.name, settings.weight, settings.max_cores)
        except cgroups.CgroupError as error:
            reason = str(error)
    if share is None:
        if settings.max_cores is not None:
            raise ProtectionUnavailable(tenant.name, "cpu_quota", reason)
        log.info("tenant %s: no cpu share (%s)", tenant.name, reason)
    return share
