"""Each tenant's health: NOT_SERVING while the daemon would refuse its spawns
itself, SERVING again once that clears.

    watch = ServingWatch(daemon)
    task = asyncio.ensure_future(watch.run())     # checks every CHECK_INTERVAL_S

What makes every spawn of a tenant fail, whatever it asks:

- the audit log cannot take a record (`AuditLog.unwritable`: its volume is
  full or read-only, or an fsync failed and the log failed closed): no
  write-ahead exec record, no exec;
- the spawner is not running (it is being restarted, or cannot be);
- the tenant's disk budget no longer holds (`DiskBudget.problem`: its image
  unmounted, a root no longer bound from it): spawns are refused
  PROTECTION_UNAVAILABLE rather than write past the budget.

The reason goes to the tenant's health reporting (its front-end's health
servicer, `hostcapd.bridge.messages.Serving`), and to the admin socket's
health as the service `tenant/NAME`; `hostcapctl health` prints it. Each
change is one log line (WARNING going down, INFO coming back).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Iterable
from typing import Protocol

from hostcapd.audit import AuditLog
from hostcapd.logsetup import fields
from hostcapd.service.servers import Graceful, TenantService
from hostcapd.spawner.client import SpawnerClient

log = logging.getLogger("hostcapd")

#: Seconds between two checks of every tenant.
CHECK_INTERVAL_S = 1.0


class Served(Protocol):
    """What the watch reads of the daemon."""

    audit: AuditLog | None
    spawner: SpawnerClient

    @property
    def serving_tenants(self) -> Iterable[TenantService]: ...

    @property
    def admin_health(self) -> Graceful | None: ...


def refusal_reason(audit: AuditLog | None, spawner: SpawnerClient, service: TenantService) -> str:
    """Why every spawn of the tenant would be refused now ("": none would)."""
    if audit is None:
        return "the audit log is not open"
    unwritable = audit.unwritable()
    if unwritable:
        return f"audit log unwritable: {unwritable}"
    if not spawner.running:
        return "the spawner is not running (it is being restarted)"
    disk = service.runtime.profile.disk
    problem = disk.problem() if disk is not None else ""
    if problem:
        return f"disk budget unavailable: {problem}"
    return ""


class ServingWatch:
    def __init__(self, daemon: Served) -> None:
        self.daemon = daemon
        #: The reason each serving service was last told ("": SERVING).
        self._told: dict[TenantService, str] = {}
        #: The last reason logged per tenant name (a reload's replacement
        #: continues its predecessor's state: no second line).
        self._logged: dict[str, str] = {}
        self._poked = asyncio.Event()
        #: What the admin socket's health was told of each tenant (`tenant/NAME`).
        self._admin_told: dict[str, str] = {}

    async def run(self) -> None:
        while True:
            self._poked.clear()
            await self.check()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._poked.wait(), CHECK_INTERVAL_S)

    def poke(self) -> None:
        """Check now, not at the next interval (the spawner died, or is back)."""
        self._poked.set()

    async def check(self) -> None:
        services = list(self.daemon.serving_tenants)
        self._told = {s: r for s, r in self._told.items() if s in services}
        for service in services:
            reason = refusal_reason(self.daemon.audit, self.daemon.spawner, service)
            self._log(service.name, reason)
            if self._told.get(service, "") != reason:
                self._told[service] = reason
                await _tell(service.health, reason)
        admin = self.daemon.admin_health
        if admin is None:
            return
        now = {s.name: self._logged.get(s.name, "") for s in services}
        for name in self._admin_told.keys() - now.keys():
            now[name] = f"tenant {name} is not in the config (removed by a reload)"
        for name, reason in sorted(now.items()):
            if self._admin_told.get(name) != reason:
                self._admin_told[name] = reason
                await _tell(admin, reason, admin_service(name))

    def _log(self, name: str, reason: str) -> None:
        before = self._logged.get(name, "")
        if before == reason:
            return
        self._logged[name] = reason
        if reason:
            log.warning(
                "tenant %s: health NOT_SERVING: %s",
                name,
                reason,
                extra=fields(tenant=name, reason=reason),
            )
        else:
            log.info(
                "tenant %s: health SERVING again (%s: cleared)",
                name,
                before,
                extra=fields(tenant=name),
            )


def admin_service(tenant: str) -> str:
    """The admin socket's health service of a tenant."""
    return f"tenant/{tenant}"


async def _tell(health: Graceful, reason: str, service: str = "") -> None:
    try:
        await health.report(reason, service)
    except Exception:  # a front-end gone meanwhile is told again when restarted
        log.debug("health %r not updated", service, exc_info=True)
