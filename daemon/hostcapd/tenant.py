"""A tenant at run time: its config, applied profile and live spawns.

A service is constructed holding one TenantRuntime and can address nothing
else: no request can name another tenant.
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import logging
from collections import OrderedDict
from typing import TYPE_CHECKING

from hostcapd import metrics
from hostcapd.audit import AuditLog
from hostcapd.config import Tenant
from hostcapd.errors import Refusal
from hostcapd.process import request as request_mod
from hostcapd.process.cgroup_pool import REFILL_AFTER_START, CgroupPool
from hostcapd.process.deps import SpawnDeps
from hostcapd.process.environments import EnvironmentTable
from hostcapd.process.executable import HashCache
from hostcapd.process.launch import launch_for
from hostcapd.process.order import plan_rlimits
from hostcapd.process.report import Outcome, Report
from hostcapd.process.request import Prepared, SpawnRequest
from hostcapd.process.spawn import Spawn
from hostcapd.process.warm import WarmPool
from hostcapd.sandbox.cgroups import CgroupHost
from hostcapd.sandbox.profile import TenantProfile
from hostcapd.spawner.client import SpawnerClient

if TYPE_CHECKING:
    from hostcapd.bridge.frontends import FrontendProcess
    from hostcapd.egress.supervisor import EgressProxy
    from hostcapd.service.fs_runtime import FsRuntime

log = logging.getLogger("hostcapd.tenant")

#: Finished spawns remembered for request_id retries.
FINISHED_KEPT = 1024
_PROFILE_KEYS = itertools.count(1)


def _egress_of(tenant: Tenant, audit: AuditLog, profile: TenantProfile) -> EgressProxy | None:
    """The tenant's egress proxy (not started yet) when its mode is "proxy"."""
    if tenant.network_mode != "proxy":
        return None
    from hostcapd.bridge.frontends import frontend_identity
    from hostcapd.egress.supervisor import EgressProxy

    return EgressProxy(tenant, audit, frontend_identity(), place=profile.place_daemon_side)


class TenantRuntime:
    def __init__(
        self,
        tenant: Tenant,
        profile: TenantProfile,
        spawner: SpawnerClient,
        audit: AuditLog,
        cgroups: CgroupHost,
        kill_grace: float,
        order_first: bool = True,
        recycle_cgroups: bool = True,
    ) -> None:
        #: This runtime's own profile in the spawner: a reload's replacement
        #: registers a new one, so no order of the old runtime meets the new.
        profile_key = f"{tenant.name}#{next(_PROFILE_KEYS)}"
        #: What each spawn is given; fixed for this runtime's life.
        self.deps = SpawnDeps(
            tenant,
            profile,
            profile_key,
            spawner,
            audit,
            # Its spawns' cgroups go in its tenant cgroup (its ceilings).
            profile.cgroups or cgroups,
            kill_grace,
            HashCache(),
            _egress_of(tenant, audit, profile),
            order_first=order_first,
            recycle_cgroups=recycle_cgroups,
        )
        if profile.fs_changes is not None:  # its roots' parent: the spawner
            profile.fs_changes.spawner = spawner
        #: Children made ahead of need for this runtime's spawns.
        self.warm = WarmPool(self.deps, tenant.warm_spawns)
        self.spawns: dict[str, Spawn] = {}
        self._by_request: dict[str, Spawn] = {}
        self._finished: OrderedDict[str, Spawn] = OrderedDict()
        #: Detached spawns by id, running or ended (ReadOutput reads them):
        #: shared with the runtime a reload puts in this one's place.
        self.detached = DetachedTable()
        #: Open session environments: shared the same way.
        self.environments = EnvironmentTable()
        #: Its tables went to the runtime that replaced it (a reload): its
        #: shutdown leaves the environments open.
        self.handed_over = False
        self._closing_envs: set[asyncio.Future[None]] = set()
        self._tasks: set[asyncio.Task[Report | None]] = set()
        self.accepting = True
        #: Spawn/Run calls still sending to their clients (shutdown waits for them).
        self.active_calls = 0
        #: The tenant's FsService runtime, once the server has started it.
        self.fs: FsRuntime | None = None
        #: The tenant's front-end process, when it has one.
        self.frontend: FrontendProcess | None = None

    @property
    def name(self) -> str:
        return self.deps.tenant.name

    @property
    def tenant(self) -> Tenant:
        return self.deps.tenant

    @property
    def profile(self) -> TenantProfile:
        return self.deps.profile

    @property
    def profile_key(self) -> str:
        return self.deps.profile_key

    @property
    def spawner(self) -> SpawnerClient:
        return self.deps.spawner

    @property
    def audit(self) -> AuditLog:
        return self.deps.audit

    @property
    def cgroups(self) -> CgroupHost:
        return self.deps.cgroups

    def register_with_spawner(self) -> None:
        """Register the profile (again after a spawner restart) and order the
        warm children it can use."""
        self.spawner.register_profile(self.profile.spawner_message(self.profile_key))
        if self.accepting:
            self.warm.fill()
            self.warm.cgroups.fill()

    def spawner_restarted(self) -> None:
        """The spawner died and a new one serves: the namespaces it held for
        the environments died with it, so each is closed, saying so."""
        if self.handed_over:
            return
        task = asyncio.ensure_future(
            self.environments.close_all(self, "the spawner restarted: its namespaces are gone")
        )
        self._closing_envs.add(task)
        task.add_done_callback(self._closing_envs.discard)

    def adopt_requests(self, previous: TenantRuntime) -> None:
        """Take over the request_id table of the runtime this one replaces (a
        reload), so a retry attaches instead of running again."""
        self._by_request = {**previous._by_request, **self._by_request}
        merged = OrderedDict(previous._finished)
        merged.update(self._finished)
        while len(merged) > FINISHED_KEPT:
            merged.popitem(last=False)
        self._finished = merged
        self.detached = previous.detached
        self.environments = previous.environments
        previous.handed_over = True

    def existing(self, request_id: str) -> Spawn | None:
        """The spawn an earlier request with this id started, live or finished."""
        if not request_id:
            return None
        return self._by_request.get(request_id) or self._finished.get(request_id)

    def prepare(self, request: SpawnRequest) -> Prepared:
        """Validate and resolve a request: the one entry for a dry run and a
        real one (which `start` admits first)."""
        return request_mod.prepare(
            request, self.tenant, self.profile.protections, self.deps.hash_cache
        )

    def start(self, request: SpawnRequest, streaming: bool) -> Spawn:
        """Validate, admit and start a spawn; its task is owned here."""
        if not self.accepting:
            raise Refusal("QUOTA_EXCEEDED", "the daemon is shutting down")
        if len(self.spawns) >= self.tenant.max_concurrent_spawns:
            raise Refusal(
                "QUOTA_EXCEEDED",
                f"tenant {self.name} already runs {len(self.spawns)} spawns (quota {self.tenant.max_concurrent_spawns})",
            )
        disk = self.profile.disk
        problem = disk.problem() if disk is not None else ""
        if problem:
            # Fail closed: a spawn now would write past the budget, on the host's volume.
            raise Refusal("PROTECTION_UNAVAILABLE", f"tenant {self.name}: disk budget: {problem}")
        if request.detached:
            running = self.detached.running()
            if running >= self.tenant.max_detached_spawns:
                raise Refusal(
                    "QUOTA_EXCEEDED",
                    f"tenant {self.name} already runs {running} detached spawns (quota {self.tenant.max_detached_spawns})",
                )
        env = None
        if request.environment_id:
            env = self.environments.get(request.environment_id)
            if env is None:
                raise Refusal("NOT_FOUND", "no such open environment for this tenant")
        prepared = self.prepare(request)
        rlimits = plan_rlimits(self.profile, prepared)
        # A spawn in an environment joins its namespaces: never a warm child's;
        # nor does a tty spawn (its terminal is made before its filters).
        fresh = env is not None or request.tty is not None
        warm = self.warm.take(prepared, rlimits) if not fresh else None
        pooled = self.warm.cgroups.take() if warm is None else None
        launch = launch_for(self.deps, warm, pooled)
        spawn = Spawn(self.deps, request, prepared, streaming, launch, rlimits)
        self.spawns[spawn.id] = spawn
        if request.detached:
            self.detached.add(spawn, self.tenant.max_detached_spawns)
        if env is not None:
            self.environments.joined(env, spawn)
        metrics.spawn_started(self.name)
        if request.request_id:
            self._by_request[request.request_id] = spawn
        # Its pools fill again once its answer has left (its caller, woken
        # by the exited event, answers first; done's callbacks run after it,
        # and fill there, not a turn later), or a while after it started if
        # it runs on (asked in the turn it started): the next warm child's
        # or cgroup's making is off its path.
        pools: list[WarmPool | CgroupPool] = []
        if self.warm.size:
            pools.append(self.warm)
        if self.warm.cgroups.size and warm is None:
            pools.append(self.warm.cgroups)
        for pool in pools:
            spawn.on_started.append(functools.partial(pool.refill, REFILL_AFTER_START))
        if pools:
            spawn.done.add_done_callback(functools.partial(_fill_after, pools))
        task = self.deps.loop().create_task(self._run(spawn))
        self._tasks.add(task)  # discarded by its own end (no done callback's turn)
        return spawn

    async def _run(self, spawn: Spawn) -> Report | None:
        try:
            return await spawn.run()
        finally:
            self._tasks.discard(asyncio.current_task(spawn.deps.loop()))
            self.spawns.pop(spawn.id, None)
            if spawn.request.environment_id:
                self.environments.left(spawn.request.environment_id, spawn)
            rid = spawn.request.request_id
            if rid and self._by_request.get(rid) is spawn:
                del self._by_request[rid]
                self._finished[rid] = spawn
                while len(self._finished) > FINISHED_KEPT:
                    self._finished.popitem(last=False)

    def find(self, spawn_id: str = "", pid: int = 0) -> Spawn | None:
        if spawn_id:
            return self.spawns.get(spawn_id)
        for spawn in self.spawns.values():
            if pid and spawn.pid == pid:
                return spawn
        return None

    def frontend_lost(self) -> None:
        """The tenant's front-end process is gone (crashed, killed, or cut off
        for a protocol violation): its clients' calls are gone with it, so
        every running spawn ends DAEMON_SHUTDOWN, its tree killed."""
        for spawn in list(self.spawns.values()):
            if not spawn.request.detached:  # no call of theirs was lost
                spawn.cancel(Outcome.DAEMON_SHUTDOWN, "the tenant's front-end process stopped")

    async def shutdown(self, reason: str = "the daemon is shutting down") -> None:
        """Refuse new spawns; end running ones as DAEMON_SHUTDOWN and wait for them."""
        self.accepting = False
        self.warm.close()
        for spawn in list(self.spawns.values()):
            spawn.cancel(Outcome.DAEMON_SHUTDOWN, "the daemon is shutting down")
        if not self.handed_over:
            await self.environments.close_all(self, reason)
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
        if self.deps.egress is not None:
            await self.deps.egress.stop()


def _fill_after(pools: list[WarmPool | CgroupPool], _: object) -> None:
    """A spawn's done callback: its pools make what they miss now (its
    caller's answer has left), not a turn later."""
    for pool in pools:
        pool.fill()


class DetachedTable:
    """A tenant's detached spawns: the running ones, and as many ended ones
    as the tenant may run at once (the oldest ended is forgotten first), so
    their output and outcome can still be read. What they hold is bounded by
    their output budgets: the tenant's cost."""

    def __init__(self) -> None:
        self._spawns: OrderedDict[str, Spawn] = OrderedDict()

    def running(self) -> int:
        return sum(1 for s in self._spawns.values() if not s.done.done())

    def add(self, spawn: Spawn, keep_ended: int) -> None:
        self._spawns[spawn.id] = spawn
        ended = [sid for sid, s in self._spawns.items() if s.done.done()]
        for sid in ended[: max(0, len(ended) - keep_ended)]:
            del self._spawns[sid]

    def get(self, spawn_id: str) -> Spawn | None:
        return self._spawns.get(spawn_id)

    def held_bytes(self) -> int:
        """Output bytes their buffers hold."""
        return sum(s.log.held for s in self._spawns.values() if s.log is not None)
