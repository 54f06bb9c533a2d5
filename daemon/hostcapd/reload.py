"""Config reload (SIGHUP, AdminService.Reload), without a moment in which a
tenant's socket is missing.

A reload builds the services of added and changed tenants completely
(profile, fs worker, server listening under a temporary name) before it
touches anything that serves; only then does it rename each socket into
place, which replaces the old socket file atomically. The replaced service
drains in the background: it takes no new calls, its running spawns finish
under the config they started with, then it is released. A removed tenant's
spawns end DAEMON_SHUTDOWN.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

from hostcap_proto.names import ReasonName

from hostcapd import __version__, sdnotify
from hostcapd.audit import AuditLog, AuditUnavailable
from hostcapd.callers import caller_field
from hostcapd.checks import INVALID, check_config, summary
from hostcapd.config import Config, ConfigError, Tenant, load_config
from hostcapd.fs.client import FsWorkerUnavailable
from hostcapd.logsetup import fields, one_line
from hostcapd.process.report import Outcome
from hostcapd.sandbox.profile import HostSupport, ProtectionUnavailable, TenantProfile, prepare
from hostcapd.service.admin_service import ReloadOutcome, ReloadRejected
from hostcapd.service.servers import TenantService
from hostcapd.service.sockets import StartupError, unlink_if_ours
from hostcapd.spawner.client import SpawnerClient, SpawnerLost

log = logging.getLogger("hostcapd")

#: Seconds a stopping server gives calls in flight (SIGTERM: spawns are ended first).
STOP_GRACE_S = 5.0
#: Added to a replaced tenant's longest possible spawn before its calls are cut.
DRAIN_MARGIN_S = 30.0


def notify(send: Callable[..., bool], *args: str) -> None:
    """A service manager notification that never takes the daemon down: a
    broken NOTIFY_SOCKET is noticed by systemd itself (READY/WATCHDOG missing)."""
    try:
        send(*args)
    except sdnotify.NotifyError as error:
        log.warning("service manager notification failed: %s", error)


def _ended(future: asyncio.Future[object]) -> asyncio.Future[None]:
    """A future that completes (with None) when `future` does, however it ends."""
    waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def done(_: asyncio.Future[object]) -> None:
        if not waiter.done():
            waiter.set_result(None)

    future.add_done_callback(done)
    return waiter


class ReloadedDaemon(Protocol):
    """What a reload reads and changes of the daemon (`hostcapd.daemon.Daemon`;
    named here so that this module does not import the one that imports it)."""

    config: Config
    config_path: Path | None
    _reload_source: Callable[[], Config] | None
    tenants: dict[str, TenantService]
    spawner: SpawnerClient
    host: HostSupport | None
    audit: AuditLog | None
    _serving: bool
    _stopping: bool

    def _status_line(self) -> str: ...

    async def _prepare_tenant(self, tenant: Tenant, profile: TenantProfile) -> TenantService: ...

    def _commit(self, service: TenantService) -> None: ...


class Reloads:
    """The daemon's reloads: one at a time (`lock`, which a shutdown also
    takes), and the services they retired until those have drained."""

    def __init__(self, daemon: ReloadedDaemon) -> None:
        self.daemon = daemon
        self.lock = asyncio.Lock()
        #: Services a reload replaced or removed, until their spawns are done.
        self.retiring: dict[TenantService, asyncio.Task[None]] = {}
        #: Whether the last reload was applied (True until one is refused), and
        #: when the config serving now was (start-up, or that reload).
        self.last_successful = True
        self.last_success_time = time.time()

    def _load(self) -> Config:
        if self.daemon._reload_source is not None:
            return self.daemon._reload_source()
        if self.daemon.config_path is not None:
            return load_config(self.daemon.config_path)
        return self.daemon.config

    async def reload(self) -> ReloadOutcome:
        """Re-read the config and apply it (SIGHUP, AdminService.Reload).

        Validated first: a config that does not load, changes a section other
        than the tenants, or names a tenant this host cannot serve is refused
        with the reason (ReloadRejected), logged, audited as daemon.reload
        "rejected: ...", and the old config keeps serving. Otherwise added
        tenants start serving, removed ones are drained like a shutdown, and
        changed ones are replaced (their running spawns finish under the old
        config). Unchanged tenants are not touched.
        """
        async with self.lock:
            if not self.daemon._serving or self.daemon._stopping:
                raise ReloadRejected("INVALID_ARGUMENT", "the daemon is not serving")
            notify(sdnotify.reloading)
            notify(sdnotify.status, "reloading the config")
            try:
                try:
                    outcome = await self._apply(await asyncio.to_thread(self._load))
                except ConfigError as error:
                    raise ReloadRejected("INVALID_ARGUMENT", str(error)) from None
            except ReloadRejected as rejected:
                self.last_successful = False
                log.error("reload rejected, the previous config keeps serving: %s", rejected)
                self._audit_reload(message=f"rejected: {rejected.message}")
                notify(
                    sdnotify.status,
                    one_line(f"reload rejected: {rejected.message} | {self.daemon._status_line()}"),
                )
                raise
            finally:
                notify(sdnotify.ready)
            self.last_successful, self.last_success_time = True, time.time()
            log.info(
                "reloaded: added %s; removed %s; changed %s",
                ", ".join(outcome.added) or "none",
                ", ".join(outcome.removed) or "none",
                ", ".join(outcome.changed) or "none",
            )
            self._audit_reload(
                message="applied" if outcome != ReloadOutcome() else "no change",
                added=list(outcome.added),
                removed=list(outcome.removed),
                changed=list(outcome.changed),
            )
            notify(sdnotify.status, self.daemon._status_line())
            return outcome

    def _audit_reload(self, **fields: object) -> None:
        if self.daemon.audit is None:
            return
        try:
            self.daemon.audit.write(
                "daemon.reload",
                version=__version__,
                tenants=sorted(self.daemon.tenants),
                config_path=str(self.daemon.config_path) if self.daemon.config_path else None,
                pid=os.getpid(),
                **fields,
                **caller_field(),  # none for a SIGHUP
            )
        except AuditUnavailable as error:
            log.error("could not audit the reload: %s", error)

    async def _apply(self, new: Config) -> ReloadOutcome:
        old = self.daemon.config
        for section in ("daemon", "audit", "admin", "metrics"):
            if getattr(new, section) != getattr(old, section):
                raise ReloadRejected(
                    "INVALID_ARGUMENT",
                    f"the [{section}] settings changed; they apply only at start-up "
                    "(restart hostcapd, or revert them to reload the tenants)",
                )
        before = {t.name: t for t in old.tenants}
        after = {t.name: t for t in new.tenants}
        added = sorted(after.keys() - before.keys())
        removed = sorted(before.keys() - after.keys())
        changed = sorted(n for n in after.keys() & before.keys() if after[n] != before[n])
        assert self.daemon.host is not None
        # What check-config runs, for the tenants this reload builds.
        problems = check_config(new, self.daemon.host, (*added, *changed))
        if problems:
            code: ReasonName = next((p.code for p in problems if p.code != INVALID), INVALID)
            raise ReloadRejected(code, summary(problems))

        # Everything new is built before anything serving is touched.
        profiles: dict[str, TenantProfile] = {}
        prepared: list[TenantService] = []
        try:
            for name in (*added, *changed):
                profiles[name] = prepare(after[name], self.daemon.host, new.tenants)
            for name in (*added, *changed):
                prepared.append(await self.daemon._prepare_tenant(after[name], profiles.pop(name)))
        except BaseException as error:
            # Whatever went wrong (a cancel included), nothing built is left behind.
            await self._release(prepared, profiles)
            if isinstance(error, ProtectionUnavailable):
                raise ReloadRejected("PROTECTION_UNAVAILABLE", str(error)) from None
            if isinstance(error, FsWorkerUnavailable):
                raise ReloadRejected(
                    "PROTECTION_UNAVAILABLE", f"the fs worker of a tenant cannot start: {error}"
                ) from None
            if isinstance(error, (StartupError, OSError)):
                raise ReloadRejected(
                    "INVALID_ARGUMENT", f"cannot serve a tenant: {error}"
                ) from None
            raise

        # The switch: no await from here to the config swap.
        for service in prepared:
            replaced = self.daemon.tenants.get(service.name)
            self.daemon._commit(service)
            if replaced is not None:
                # At once: a call that reaches the old server now is refused
                # rather than run under the old config with the new profile.
                replaced.runtime.accepting = False
                service.runtime.adopt_requests(replaced.runtime)
                self._retire(replaced, removed=False)
        for name in removed:
            self._retire(self.daemon.tenants.pop(name), removed=True)
        self.daemon.config = new
        return ReloadOutcome(tuple(added), tuple(removed), tuple(changed))

    async def _release(
        self, prepared: list[TenantService], profiles: dict[str, TenantProfile]
    ) -> None:
        for service in prepared:
            await service.discard()
        for profile in profiles.values():
            profile.close()

    def _retire(self, service: TenantService, removed: bool) -> None:
        self.retiring[service] = asyncio.ensure_future(self._drain(service, removed))

    async def _drain(self, service: TenantService, removed: bool) -> None:
        """Wind down a tenant a reload replaced (`removed` False: its spawns
        run to their end) or removed (its spawns end DAEMON_SHUTDOWN)."""
        runtime = service.runtime
        runtime.accepting = False
        runtime.warm.close()  # made for the old config: never used by the new
        try:
            # Replaced: the rename already took the path. Removed: take it now.
            unlink_if_ours(service.tenant.socket, service.socket_id)
            if removed:
                await service.health.enter_graceful_shutdown()
                service.stop_server(STOP_GRACE_S)
                for spawn in list(runtime.spawns.values()):
                    spawn.cancel(
                        Outcome.DAEMON_SHUTDOWN,
                        f"tenant {runtime.name!r} was removed from the config by a reload",
                    )
                await runtime.shutdown("the tenant was removed from the config by a reload")
            else:
                # A long grace: the calls of running spawns must not be cut
                # (that would kill their trees); their clients' new calls go
                # to the new server (grpc tells them to reconnect).
                service.stop_server(service.longest_spawn_s() + DRAIN_MARGIN_S)
                while runtime.spawns:
                    await asyncio.wait([_ended(s.done) for s in runtime.spawns.values()])
                    await asyncio.sleep(0.01)  # their tasks drop them from the table
                # What remains (final events in flight, health watches) gets a short grace.
                service.stop_server(STOP_GRACE_S)
            await asyncio.gather(*service.stops, return_exceptions=True)
            await service.fs.close()
            service.runtime.profile.close()
            with contextlib.suppress(SpawnerLost, OSError):
                self.daemon.spawner.drop_profile(service.runtime.profile_key)
            log.info(
                "tenant %s %s and drained",
                service.name,
                "removed" if removed else "replaced",
                extra=fields(tenant=service.name),
            )
        finally:
            self.retiring.pop(service, None)
