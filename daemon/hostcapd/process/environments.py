"""A tenant's session environments (issue 30).

    env = table.open(runtime, idle_timeout=60, lifetime=3600, labels={})
    ...spawns with request.environment_id == env.id share its namespaces...
    await table.close(env.id, "closed by the client")

An environment is an id, an idle timeout and a lifetime within the tenant's
ceilings, and namespaces the spawner holds (spawner/environments.py). Its
spawns are the tenant's like any other (quota, limits, exit records); the
table only knows which run in it. Closing it (the client, idle expiry, its
lifetime, a reload that removes the tenant, a daemon stop) ends every spawn
in it, waits for them, and has the spawner drop its namespaces. Each open
and close is an audit record with its reason.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
import uuid
from collections.abc import Mapping
from typing import TYPE_CHECKING

from hostcapd.audit import AuditUnavailable
from hostcapd.callers import caller_field
from hostcapd.errors import Refusal
from hostcapd.process import killing
from hostcapd.process.report import Outcome
from hostcapd.spawner.client import SetupFailed, SpawnerLost

if TYPE_CHECKING:
    from hostcapd.process.spawn import Spawn
    from hostcapd.tenant import TenantRuntime

log = logging.getLogger("hostcapd.environments")

#: An environment's idle timeout when the client gives none (or its lifetime if shorter).
DEFAULT_IDLE_S = 600.0
#: The reason of a close the client asked for (CloseEnvironment).
CLOSED_BY_CLIENT = "closed by the client"


class Environment:
    def __init__(
        self, tenant: str, idle_timeout: float, lifetime: float, labels: Mapping[str, str]
    ) -> None:
        self.id = f"env-{uuid.uuid4().hex}"
        self.tenant = tenant
        self.idle_timeout = idle_timeout
        self.lifetime = lifetime
        self.labels = dict(labels)
        self.opened_at = time.monotonic()
        self.last_active = self.opened_at
        self.spawns: dict[str, Spawn] = {}
        #: Set once a close began: no spawn joins it any more.
        self.closing = False
        self.watch: asyncio.Task[None] | None = None

    def age(self) -> float:
        return time.monotonic() - self.opened_at

    def idle(self) -> float:
        return 0.0 if self.spawns else time.monotonic() - self.last_active

    def record(self) -> dict[str, object]:
        return {
            "tenant": self.tenant,
            "environment_id": self.id,
            "idle_timeout_s": self.idle_timeout,
            "lifetime_s": self.lifetime,
            "labels": self.labels,
        }


class EnvironmentTable:
    """A tenant's open environments; shared by the runtime a reload puts in
    its runtime's place (as its detached spawns are)."""

    def __init__(self) -> None:
        self.envs: dict[str, Environment] = {}

    def get(self, env_id: str) -> Environment | None:
        env = self.envs.get(env_id)
        return env if env is not None and not env.closing else None

    async def open(
        self,
        runtime: TenantRuntime,
        idle_timeout: float,
        lifetime: float,
        labels: Mapping[str, str],
    ) -> Environment:
        tenant = runtime.tenant
        if not runtime.accepting:
            raise Refusal("QUOTA_EXCEEDED", "the daemon is shutting down")
        open_now = sum(1 for e in self.envs.values() if not e.closing)
        if open_now >= tenant.max_environments:
            raise Refusal(
                "QUOTA_EXCEEDED",
                f"tenant {tenant.name} has {open_now} environments open (quota {tenant.max_environments})",
            )
        ceiling = tenant.max_environment_seconds
        if lifetime > ceiling:
            raise Refusal(
                "LIMIT_INVALID",
                f"lifetime_seconds {lifetime:g} is above the tenant's max_environment_seconds {ceiling:g}",
            )
        lifetime = lifetime or ceiling
        idle_timeout = min(idle_timeout or DEFAULT_IDLE_S, lifetime)
        env = Environment(tenant.name, idle_timeout, lifetime, labels)
        try:
            runtime.audit.write("environment.open", **env.record(), **caller_field())
        except AuditUnavailable as error:
            raise Refusal(
                "AUDIT_UNAVAILABLE", f"the audit log cannot be written, nothing was opened: {error}"
            ) from None
        # Counted while it is made, so concurrent opens keep to the quota.
        self.envs[env.id] = env
        from hostcapd.egress.supervisor import EgressUnavailable

        egress, netns_fd = runtime.deps.egress, -1
        try:
            if egress is not None:
                # Its network namespace, the egress proxy's listeners in it.
                netns_fd = await egress.open(env.id, env.labels)
            await runtime.spawner.open_env(env.id, runtime.profile_key, netns_fd)
        except (SpawnerLost, SetupFailed, EgressUnavailable, OSError) as error:
            # Fail closed: nothing can run in it, so it is not opened.
            del self.envs[env.id]
            if egress is not None:
                egress.close(env.id)
            why = error.detail if isinstance(error, SetupFailed) else str(error)
            self._record_close(runtime, env, f"its namespaces could not be made: {why}", [])
            raise Refusal(
                "PROTECTION_UNAVAILABLE", f"the environment's namespaces could not be made: {why}"
            ) from None
        finally:
            if netns_fd >= 0:
                os.close(netns_fd)  # the spawner holds its copy
        env.watch = asyncio.ensure_future(self._watch(runtime, env))
        return env

    def joined(self, env: Environment, spawn: Spawn) -> None:
        env.spawns[spawn.id] = spawn
        env.last_active = time.monotonic()

    def left(self, env_id: str, spawn: Spawn) -> None:
        env = self.envs.get(env_id)
        if env is not None and env.spawns.pop(spawn.id, None) is not None:
            env.last_active = time.monotonic()

    async def _watch(self, runtime: TenantRuntime, env: Environment) -> None:
        """Close `env` when its lifetime is over, or it has been idle (nothing
        running, no spawn started or ended) for its idle timeout."""
        while True:
            left = env.lifetime - env.age()
            if left <= 0:
                reason = f"its lifetime of {env.lifetime:g} s was reached"
                break
            idle_left = env.idle_timeout - env.idle() if not env.spawns else env.idle_timeout
            if not env.spawns and idle_left <= 0:
                reason = f"it was idle for {env.idle_timeout:g} s"
                break
            await asyncio.sleep(max(0.05, min(left, idle_left)))
        env.watch = None
        await self.close(runtime, env.id, reason)

    async def close(self, runtime: TenantRuntime, env_id: str, reason: str) -> list[str]:
        """End every spawn in it, drop its namespaces, record why. NOT_FOUND
        for an id that is not an open environment of the tenant."""
        env = self.envs.get(env_id)
        if env is None or env.closing:
            raise Refusal("NOT_FOUND", "no such open environment for this tenant")
        env.closing = True
        if env.watch is not None and env.watch is not asyncio.current_task():
            env.watch.cancel()
        ended = sorted(env.spawns)
        spawns = list(env.spawns.values())
        for spawn in spawns:
            spawn.cancel(Outcome.CANCELLED, f"the environment closed: {reason}")
        wait = runtime.deps.kill_grace + killing.SIGKILL_WAIT_MARGIN_S
        for spawn in spawns:
            with contextlib.suppress(Exception):
                await killing.wait_ended(spawn.done, wait)
        runtime.spawner.close_env(env.id)
        if runtime.deps.egress is not None:
            runtime.deps.egress.close(env.id)
        self.envs.pop(env.id, None)
        self._record_close(runtime, env, reason, ended)
        return ended

    def _record_close(
        self, runtime: TenantRuntime, env: Environment, reason: str, ended: list[str]
    ) -> None:
        try:
            # Its timers run in the opening call's context: only a client's
            # close is a call of its own.
            by_call = caller_field() if reason == CLOSED_BY_CLIENT else {}
            runtime.audit.write_or_defer(
                "environment.close", **env.record(), reason=reason, spawns_ended=ended, **by_call
            )
        except AuditUnavailable:
            log.error(
                "environment %s closed (%s) but its record could not be written", env.id, reason
            )

    async def close_all(self, runtime: TenantRuntime, reason: str) -> None:
        for env_id in [e.id for e in self.envs.values() if not e.closing]:
            with contextlib.suppress(Refusal):
                await self.close(runtime, env_id, reason)
