"""A tenant's cost is the tenant's: ceilings over everything it holds at once.

    totals = HostTotals.read()                        # pid_max, MemTotal
    ceilings = tenant_ceilings(tenant, config.tenants, totals)
    problems = share_problems(config.tenants, totals) # check-config, start-up, reload

Per spawn, a tenant has ceilings (pids, memory) and a concurrency quota; their
product is no bound at all (1,024 pids times 64 spawns is twice a common
pid_max). So a tenant has ceilings of its own, applied to its tenant cgroup,
which holds all its spawns (`CgroupHost.for_tenant`):

- `tenant_pids`: tasks of all its spawns together (pids.max);
- `tenant_memory_bytes`: their memory together (memory.max, no swap).

Its front-end and fs worker (the daemon's work on its behalf: parsing its
requests, holding its replies) live beside them in `frontend-<name>`, with
limits derived from its output ceiling (`FRONTEND_PIDS`, `frontend_memory`).

All tenants together, spawns and front-ends, may hold at most `HOST_SHARE`
of the host's pid_max and of its memory: the rest is the host's and the
daemon's, so one tenant's fork storm or allocation never stops them. Unset,
a tenant's ceilings are derived: an equal part of that share, less its
front-end's, and no more than its per-spawn ceilings times its concurrency.
Set, they are checked (`share_problems`): a config whose tenants together
could pass the share is refused, naming the figures.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from hostcapd.config import Tenant

MiB = 1024 * 1024
#: The part of the host's pid_max and memory all tenants together may hold.
HOST_SHARE = 0.5
#: Tasks of a tenant's front-end and fs worker together: gRPC's threads, the
#: worker, restarts overlapping an exit.
FRONTEND_PIDS = 256
#: A front-end's memory with nothing in flight (measured: about 42 MiB),
#: with room: its limit is this plus `REPLIES_IN_FLIGHT` of its largest reply.
FRONTEND_BASE_BYTES = 256 * MiB
#: Largest Run replies (both streams at the output ceiling) a front-end may
#: hold at once before its own cgroup's OOM killer ends it (the tenant's).
REPLIES_IN_FLIGHT = 2
#: A derived tenant ceiling below this is refused: set it explicitly.
MIN_TENANT_PIDS = 64
MIN_TENANT_MEMORY = 64 * MiB


@dataclass(frozen=True)
class HostTotals:
    """What the host has to share."""

    pid_max: int
    memory_bytes: int

    @classmethod
    def read(cls) -> HostTotals:
        pid_max = 32768  # the kernel's default, if /proc says nothing
        with contextlib.suppress(OSError, ValueError):
            pid_max = int(Path("/proc/sys/kernel/pid_max").read_text())
        memory = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        return cls(pid_max, memory)

    @property
    def pids_share(self) -> int:
        return int(self.pid_max * HOST_SHARE)

    @property
    def memory_share(self) -> int:
        return int(self.memory_bytes * HOST_SHARE)


@dataclass(frozen=True)
class TenantCeilings:
    """A tenant's ceilings as applied: its spawns' together, its front-end's."""

    pids: int
    memory_bytes: int
    frontend_pids: int
    frontend_memory_bytes: int
    #: "" when both were set in the config, else which were derived and how.
    derived: str = ""

    @property
    def total_pids(self) -> int:
        return self.pids + self.frontend_pids

    @property
    def total_memory(self) -> int:
        return self.memory_bytes + self.frontend_memory_bytes


def frontend_memory(tenant: Tenant) -> int:
    """The memory limit of a tenant's front-end and fs worker together."""
    output = int(tenant.limits.ceiling.output_bytes or 0)
    return FRONTEND_BASE_BYTES + REPLIES_IN_FLIGHT * 2 * output


def frontend_output_budget(tenant: Tenant) -> int:
    """Output a tenant's front-end keeps for its calls at once (decision
    0032: the root side passes it on and keeps none): half of what its
    memory limit has above its base; the other half is room for the reply
    it is joining and sending. A call past it is refused there
    (QUOTA_EXCEEDED), rather than the kernel ending the front-end and every
    call of the tenant with it. 0: no output ceiling, no budget."""
    return (frontend_memory(tenant) - FRONTEND_BASE_BYTES) // 2


def tenant_ceilings(
    tenant: Tenant, tenants: Sequence[Tenant], totals: HostTotals
) -> TenantCeilings:
    """`tenant`'s ceilings: as set, or derived (an equal part of the host's
    share among `tenants`, the whole config's, less the front-end's)."""
    ceiling = tenant.limits.ceiling
    side_memory = frontend_memory(tenant)
    count = max(1, len(tenants))
    derived: list[str] = []
    pids = tenant.tenant_pids
    if pids is None:
        pids = totals.pids_share // count - FRONTEND_PIDS
        if ceiling.pids:
            pids = min(pids, int(ceiling.pids) * tenant.max_concurrent_spawns)
        derived.append(f"tenant_pids {pids}")
    memory = tenant.tenant_memory_bytes
    if memory is None:
        memory = totals.memory_share // count - side_memory
        if ceiling.memory_bytes:
            memory = min(memory, int(ceiling.memory_bytes) * tenant.max_concurrent_spawns)
        derived.append(f"tenant_memory_bytes {memory}")
    how = ""
    if derived:
        how = (
            f"{' and '.join(derived)} derived: {int(HOST_SHARE * 100)}% of the host's pid_max "
            f"({totals.pid_max}) and memory ({totals.memory_bytes}) shared by {count} tenant(s)"
        )
    return TenantCeilings(pids, memory, FRONTEND_PIDS, side_memory, how)


def share_problems(tenants: Sequence[Tenant], totals: HostTotals) -> list[str]:
    """Why these tenants together could exhaust the host (empty when they
    cannot): their pids past `HOST_SHARE` of pid_max, their memory past that
    share of the host's, or a derived ceiling too small to serve."""
    out: list[str] = []
    all_ceilings = [(t, tenant_ceilings(t, tenants, totals)) for t in tenants]
    for tenant, c in all_ceilings:
        if c.pids < MIN_TENANT_PIDS:
            out.append(
                f"tenant {tenant.name!r}: tenant_pids {c.pids} is below {MIN_TENANT_PIDS} "
                f"({c.derived or 'as set'}); set it, or serve fewer tenants on this host"
            )
        if c.memory_bytes < MIN_TENANT_MEMORY:
            out.append(
                f"tenant {tenant.name!r}: tenant_memory_bytes {c.memory_bytes} is below "
                f"{MIN_TENANT_MEMORY} ({c.derived or 'as set'}); set it, or serve fewer tenants"
            )
    pids = sum(c.total_pids for _, c in all_ceilings)
    if pids > totals.pids_share:
        out.append(
            f"the tenants together may hold {pids} tasks (tenant_pids, plus {FRONTEND_PIDS} "
            f"for each front-end), more than {int(HOST_SHARE * 100)}% of this host's pid_max "
            f"({totals.pid_max}): one tenant's fork storm could leave the host unable to fork"
        )
    memory = sum(c.total_memory for _, c in all_ceilings)
    if memory > totals.memory_share:
        out.append(
            f"the tenants together may hold {memory} bytes of memory (tenant_memory_bytes, "
            f"plus each front-end's limit), more than {int(HOST_SHARE * 100)}% of this "
            f"host's memory ({totals.memory_bytes} bytes)"
        )
    return out
