"""A spawn's order to the spawner, and the rlimits its child sets."""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

from hostcapd.childsetup import RLimit
from hostcapd.process import environment
from hostcapd.process.request import Prepared
from hostcapd.sandbox import identity, rlimits
from hostcapd.sandbox.profile import TenantProfile
from hostcapd.spawner.messages import SpawnOrder

if TYPE_CHECKING:
    from hostcapd.process.spawn import Spawn


def spawn_order(spawn: Spawn, *, landlock: bool, warm: bool) -> SpawnOrder:
    """`spawn`'s order; `landlock` and `warm` are its launch's to say."""
    p, deps = spawn.prepared, spawn.deps
    ident = _identity(deps.tenant.uid, deps.tenant.gid, deps.profile.applied)
    return SpawnOrder(
        id=spawn.id,
        profile=deps.profile_key,
        by_fd=p.by_fd,
        exe_path=p.exe.path.encode(),
        argv=[a.encode() for a in p.argv],
        envp=environment.encode(p.env),
        cwd_root=p.cwd.root.encode(),
        cwd=p.cwd.relative.encode(),
        rlimits=spawn.rlimits,
        ids=ident.ids,
        loginuid=ident.loginuid,
        landlock=landlock,
        go=True,
        warm=warm,
        env=spawn.request.environment_id,
        tty=spawn.request.tty,
    )


@functools.lru_cache(maxsize=64)
def _identity(uid: int, gid: int, applied: frozenset[str]) -> identity.IdentityPlan:
    """A runtime's identity plan (frozen), made once, not per order."""
    return identity.plan(uid, gid, set(applied))


def plan_rlimits(profile: TenantProfile, prepared: Prepared) -> list[RLimit]:
    """The rlimits a spawn's child sets (none without the protection)."""
    if not profile.has("rlimits"):
        return []
    return rlimits.plan(prepared.limits, profile.has("cgroup"), profile.has("cgroup"))
