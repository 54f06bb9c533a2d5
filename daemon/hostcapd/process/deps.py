"""What a spawn needs of its tenant's runtime (`SpawnDeps`): its own module,
so that the spawn, its launch and the warm pool share it without importing
one another."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from hostcapd.audit import AuditLog
from hostcapd.config import Tenant
from hostcapd.kept_loop import KeptLoop
from hostcapd.process.cgroup_pool import Recycled
from hostcapd.process.executable import HashCache
from hostcapd.process.output import OutputTurns
from hostcapd.sandbox.cgroups import CgroupHost
from hostcapd.sandbox.profile import TenantProfile
from hostcapd.spawner.client import SpawnerClient

if TYPE_CHECKING:
    from hostcapd.egress.supervisor import EgressProxy


@dataclass(frozen=True)
class SpawnDeps:
    """What a spawn needs of its tenant's runtime, fixed for the runtime's life
    (a reload makes a new runtime, and new deps, for new spawns)."""

    tenant: Tenant
    profile: TenantProfile
    #: The profile's key in the spawner (one per runtime).
    profile_key: str
    spawner: SpawnerClient
    audit: AuditLog
    cgroups: CgroupHost
    kill_grace: float
    hash_cache: HashCache
    #: The tenant's egress proxy (network.mode = "proxy"): each spawn gets a
    #: network namespace whose listener it holds.
    egress: EgressProxy | None = None
    #: Its spawns' turns at reading their pipes on the root's loop.
    turns: OutputTurns = field(default_factory=OutputTurns)
    #: A fresh spawn's order leaves before its exec record is built and
    #: appended, so the C set-up overlaps them (its child still waits for the
    #: go, written once the record is durable); false: the record first
    #: (`daemon.order_before_exec_record`, the benchmark's comparison).
    order_first: bool = True
    #: Its spawns' cgroups, once each ended, are recycled for its next spawns
    #: (process/cgroup_pool.py); false: removed (`daemon.recycle_spawn_cgroups`).
    recycle_cgroups: bool = True
    #: Its spawns' cgroups kept for its next spawns.
    recycled: Recycled = field(default_factory=Recycled)
    #: The loop its spawns run on (`loop()`), kept once asked.
    loop: KeptLoop = field(default_factory=KeptLoop, compare=False, repr=False)
