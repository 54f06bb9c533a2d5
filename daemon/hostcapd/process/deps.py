"""What a spawn needs of its tenant's runtime (`SpawnDeps`): its own module,
so that the spawn, its launch and the warm pool share it without importing
one another."""

from __future__ import annotations

from dataclasses import dataclass

from hostcapd.audit import AuditLog
from hostcapd.config import Tenant
from hostcapd.process.executable import HashCache
from hostcapd.sandbox.cgroups import CgroupHost
from hostcapd.sandbox.profile import TenantProfile
from hostcapd.spawner.client import SpawnerClient


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
