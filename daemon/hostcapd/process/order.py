"""A spawn's order to the spawner, and the rlimits its child sets."""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

from hostcapd.childsetup import RLimit
from hostcapd.config import Limits
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


def plan_rlimits(profile: TenantProfile, prepared: Prepared) -> tuple[RLimit, ...]:
    """The rlimits a spawn's child sets (none without the protection): made
    once for each merged set of limits (kept beside its plan, so that its id
    is not reused while it is) and way of limiting memory, not per spawn."""
    if not profile.has("rlimits"):
        return ()
    limits, by_cgroup = prepared.limits, profile.has("cgroup")
    kept = _PLANS.get((id(limits), by_cgroup))
    if kept is not None and kept[0] is limits:
        return kept[1]
    planned = tuple(rlimits.plan(limits, by_cgroup, by_cgroup))
    if len(_PLANS) >= PLANS_KEPT:
        _PLANS.clear()
    _PLANS[(id(limits), by_cgroup)] = (limits, planned)
    return planned


#: The plans by their limits' id and whether cgroups limit memory and pids;
#: cleared when full. Merged limits are one frozen object for each set of
#: values (`process.limits.apply`), so a tenant's spawns share a few entries.
PLANS_KEPT = 256
_PLANS: dict[tuple[int, bool], tuple[Limits, tuple[RLimit, ...]]] = {}
