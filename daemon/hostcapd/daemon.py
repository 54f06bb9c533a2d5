"""The daemon's life: start-up (the audit log and its crash sweep, the host
probe, the spawner, one server per tenant, the admin socket), serving until
SIGTERM/SIGINT, SIGHUP reloads (`hostcapd.reload`), and the drain at stop;
and the service manager's notifications.

    daemon = Daemon(config, config_path)     # or reload_source=... for --dev
    exit_code = await daemon.serve()         # SIGTERM/SIGINT drain, SIGHUP reloads

Every tenant is a `TenantService` (`hostcapd.service.servers`): its runtime,
its fs worker and the front-end serving its socket, owned together and
released together.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import gc
import logging
import os
import pwd
import shutil
import signal
import sys
import time
from collections.abc import Callable, Coroutine, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hostcapd import __version__, metrics, sdnotify
from hostcapd.audit import AuditLog, AuditUnavailable
from hostcapd.checks import check_config, summary
from hostcapd.config import Config, Tenant
from hostcapd.fs.client import FsWorkerUnavailable
from hostcapd.logsetup import fields, one_line
from hostcapd.reload import STOP_GRACE_S, Reloads, notify
from hostcapd.sandbox.cgroupfs import CgroupError, instance_name
from hostcapd.sandbox.profile import (
    HostSupport,
    ProtectionUnavailable,
    TenantProfile,
    prepare,
    probe_host,
)
from hostcapd.service.admin_service import AdminService, ReloadOutcome, ReloadRejected
from hostcapd.service.servers import (
    AdminSocket,
    Graceful,
    TenantService,
    serve_admin,
    serve_tenant,
)
from hostcapd.service.sockets import StartupError, file_id_of, unlink_if_ours
from hostcapd.serving import ServingWatch
from hostcapd.spawner.client import SpawnerClient
from hostcapd.tenant import TenantRuntime

if TYPE_CHECKING:
    from hostcapd.bridge.frontends import FrontendProcess

log = logging.getLogger("hostcapd")

#: After the last call of a shutdown has sent its final event, how long the
#: connections stay open for clients to read it.
LINGER_S = 0.2


def _served_by(frontend: FrontendProcess | None) -> str:
    """Who parses a socket's gRPC, for the start-up banner (decision 0027)."""
    if frontend is None or frontend.in_process:
        return "served by the root process (frontend_processes = false)"
    uid, gid = frontend.identity
    try:
        name = pwd.getpwuid(uid).pw_name
    except KeyError:
        name = str(uid)
    return f"served by an unprivileged front-end: pid {frontend.pid}, {name} (uid {uid} gid {gid})"


def _ctl() -> str:
    """How to call hostcapctl from here: the one beside this interpreter (a
    virtualenv's bin/) when there is one, else from PATH."""
    beside = Path(sys.executable).parent / "hostcapctl"
    if not beside.exists() or shutil.which("hostcapctl") == str(beside):
        return "hostcapctl"
    relative = os.path.relpath(beside)
    return str(beside) if relative.startswith("..") else relative


def boot_id() -> str:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""


async def _watchdog() -> None:
    try:
        await sdnotify.watchdog_loop()
    except sdnotify.NotifyError as error:
        log.error("no watchdog pings: %s", error)


class Daemon:
    def __init__(
        self,
        config: Config,
        config_path: Path | None = None,
        reload_source: Callable[[], Config] | None = None,
    ) -> None:
        """`reload_source` gives the config a reload applies (raising
        ConfigError); by default the file at `config_path` is read again, and
        without a file the running config is re-applied (a no-op)."""
        self.config = config
        self.config_path = config_path
        self._reload_source = reload_source
        self.tenants: dict[str, TenantService] = {}
        self.spawner = SpawnerClient()
        self._stop = asyncio.Event()
        self.host: HostSupport | None = None
        self.audit: AuditLog | None = None
        self._admin: AdminSocket | None = None
        self._admin_service: AdminService | None = None
        self.reloads = Reloads(self)
        self._serving = False
        self._stopping = False
        self._hup_pending = False
        self._tasks: set[asyncio.Task[None]] = set()
        self._watch: asyncio.Task[None] | None = None
        self._poke_watch: Callable[[], None] = lambda: None
        self.metrics: metrics.MetricsEndpoint | None = None

    # --- the view the admin service has ----------------------------------------

    @property
    def serving_tenants(self) -> Iterable[TenantService]:
        """The services at the tenants' sockets now (not those draining)."""
        return list(self.tenants.values())

    @property
    def admin_health(self) -> Graceful | None:
        """The admin socket's health reporting (tenant/NAME services)."""
        return self._admin.health if self._admin is not None else None

    def live_runtimes(self) -> Iterable[TenantRuntime]:
        return [s.runtime for s in (*self.tenants.values(), *self.reloads.retiring)]

    # --- serving ------------------------------------------------------------------

    async def serve(self) -> int:
        """Start, serve until SIGTERM/SIGINT, drain; the exit code."""
        loop = asyncio.get_running_loop()
        # Before start(): a signal during start-up must not kill the process
        # with its default action (SIGHUP's is to terminate).
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self._stop.set)
        loop.add_signal_handler(signal.SIGHUP, self._on_sighup)
        try:
            await self.start()
        except (
            StartupError,
            ProtectionUnavailable,
            AuditUnavailable,
            FsWorkerUnavailable,
            OSError,
        ) as error:
            log.error("start-up failed: %s", error)
            notify(sdnotify.status, one_line(f"start-up failed: {error}"))
            await self.stop()
            return 2
        self._collect_settings()
        self.announce()
        self._serving = True
        watch = ServingWatch(self)
        self.spawner.on_lost = watch.poke
        self._poke_watch = watch.poke
        self._watch = self._spawn_task(watch.run())
        notify(sdnotify.status, self._status_line())
        notify(sdnotify.ready)
        self._spawn_task(_watchdog())
        if self._hup_pending:
            self._on_sighup()
        await self._stop.wait()
        await self.stop()
        return 0

    def _collect_settings(self) -> None:
        """The cyclic collector's settings for serving (`daemon.gc_freeze`,
        `daemon.gc_threshold`): what start-up (or a reload) made is frozen,
        out of every later collection's walk."""
        settings = self.config.daemon
        _, middle, old = gc.get_threshold()
        gc.set_threshold(settings.gc_threshold, middle, old)
        if settings.gc_freeze:
            gc.collect()  # start-up's garbage is freed, not frozen
            gc.freeze()

    def _spawn_task(self, coro: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    def _status_line(self) -> str:
        names = ", ".join(sorted(self.tenants)) or "none"
        return f"serving {len(self.tenants)} tenant(s): {names}"

    async def start(self) -> None:
        cfg = self.config
        self._check_admin_socket(cfg)
        self.audit = AuditLog.open(cfg.audit, boot_id())
        # The job ledger: spawns a crashed daemon left without an exit record.
        closed = self.audit.close_orphans(
            "hostcapd restarted: the spawn ended with the previous daemon"
        )
        if closed:
            log.warning("closed %d spawns left open by the previous daemon", closed)
        # Unset, the cgroup subtree is this daemon's alone (from its config's
        # path): its sweep below never touches another daemon's spawns.
        parent = cfg.daemon.cgroup_parent or instance_name(self.config_path or cfg.daemon.state_dir)
        self.host = probe_host(parent, cfg.daemon.cgroup_favor_dynmods)
        self.host.disks.directory = cfg.daemon.state_dir / "disk"  # tenant disk budgets
        problems = check_config(cfg, self.host)  # what check-config runs
        if problems:
            raise StartupError(summary(problems))
        # What a crashed instance of this daemon left, before its tenants'
        # cgroups are made again.
        try:
            swept = self.host.cgroups.sweep_stale() if not self.host.cgroup_failure else 0
        except CgroupError as error:
            raise StartupError(str(error)) from None
        if swept:
            log.warning("swept %d stale spawn cgroups", swept)
        profiles: dict[str, TenantProfile] = {}
        try:
            for tenant in cfg.tenants:
                profiles[tenant.name] = prepare(tenant, self.host, cfg.tenants)
            await self.spawner.start()
            self.spawner.on_restart = self._spawner_restarted
            # Side by side: each starts a front-end process (and a tenant
            # its fs worker); the admin socket is put in place last.
            prepared = await asyncio.gather(
                *(self._prepare_tenant(t, profiles.pop(t.name)) for t in cfg.tenants),
                self._prepare_admin(),
                return_exceptions=True,
            )
            failed = [p for p in prepared if isinstance(p, BaseException)]
            if failed:
                for service in prepared:
                    if isinstance(service, (TenantService, AdminSocket)):
                        await service.discard()
                raise failed[0]
            for service in prepared[:-1]:
                assert isinstance(service, TenantService)
                self._commit(service)
            admin = prepared[-1]
            assert admin is None or isinstance(admin, AdminSocket)
            self._admin = admin
        finally:
            for p in profiles.values():
                p.close()
        # The endpoint first: once the admin socket answers, it does too.
        self.metrics = await metrics.serve(cfg.metrics, cfg.admin, self)
        if self._admin is not None:
            self._admin.place()
        self.audit.write(
            "daemon.start",
            version=__version__,
            tenants=sorted(self.tenants),
            config_path=str(self.config_path) if self.config_path else None,
            pid=os.getpid(),
        )

    def _check_admin_socket(self, cfg: Config) -> None:
        if cfg.admin is not None and cfg.admin.socket in {t.socket for t in cfg.tenants}:
            raise StartupError(f"admin.socket {cfg.admin.socket} is also a tenant's socket")

    def _spawner_restarted(self) -> None:
        for service in self.tenants.values():
            service.runtime.register_with_spawner()
            service.runtime.spawner_restarted()
        self._poke_watch()

    async def _prepare_tenant(self, tenant: Tenant, profile: TenantProfile) -> TenantService:
        """Everything a tenant needs to serve, listening under a temporary name,
        not yet registered with the spawner nor visible at its socket path.
        Takes ownership of `profile`: on failure nothing is left behind."""
        assert self.audit is not None and self.host is not None
        runtime = TenantRuntime(
            tenant,
            profile,
            self.spawner,
            self.audit,
            self.host.cgroups,
            self.config.daemon.kill_grace_seconds,
            self.config.daemon.order_before_exec_record,
            self.config.daemon.recycle_spawn_cgroups,
        )
        daemon = self.config.daemon
        return await serve_tenant(
            runtime,
            daemon.frontend_processes,
            daemon.record_callers,
            daemon.frontend_event_loop,
            daemon.frontend_cpu,
            daemon.fs_direct_reads,
        )

    def _commit(self, service: TenantService) -> None:
        """Make a prepared tenant the one serving: its profile goes to the
        spawner, then its socket replaces whatever was at the path (one
        rename, so the path is never missing). No await: nothing runs between."""
        assert service.temp is not None
        service.runtime.register_with_spawner()
        os.rename(service.temp, service.tenant.socket)
        service.placed()
        if service.frontend is not None:
            service.frontend.on_restarted = functools.partial(self._frontend_restarted, service)
        self.tenants[service.name] = service

    async def _frontend_restarted(self, service: TenantService, temp: Path) -> None:
        """A tenant's front-end died and was started again: its new socket
        takes the path, if the path is still this tenant's."""
        current = self.tenants.get(service.name)
        try:
            same = current is service and file_id_of(service.tenant.socket) == service.socket_id
        except FileNotFoundError:
            same = current is service
        if not same:
            with contextlib.suppress(FileNotFoundError):
                temp.unlink()
            if service.frontend is not None:
                service.frontend.remove_bind_dir()
            return
        os.rename(temp, service.tenant.socket)
        service.placed()
        log.warning(
            "tenant %s: its front-end serves again",
            service.name,
            extra=fields(tenant=service.name),
        )

    async def _prepare_admin(self) -> AdminSocket | None:
        admin = self.config.admin
        if admin is None:
            return None
        assert self.audit is not None
        self._admin_service = AdminService(self)
        daemon = self.config.daemon
        service = await serve_admin(
            admin,
            self._admin_service,
            self.audit,
            daemon.frontend_processes,
            daemon.record_callers,
            daemon.frontend_event_loop,
            daemon.frontend_cpu,
        )
        if service.frontend is not None:
            service.frontend.on_restarted = functools.partial(self._admin_restarted, service)
        return service

    async def _admin_restarted(self, service: AdminSocket, temp: Path) -> None:
        """The admin socket's front-end died and was started again: its new
        socket takes the path, if the path still has the old one."""
        try:
            same = file_id_of(service.path) == service.socket_id
        except FileNotFoundError:
            same = True
        if not same or self._stopping:
            with contextlib.suppress(FileNotFoundError):
                temp.unlink()
            if service.frontend is not None:
                service.frontend.remove_bind_dir()
            return
        service.temp = temp
        service.place()

    def announce(self) -> None:
        """The start-up banner: one log line per tenant and per socket, each
        whole (a line-based shipper never splits a record)."""
        log.info("hostcapd %s serving %d tenant(s)", __version__, len(self.tenants))
        for service in self.tenants.values():
            runtime = service.runtime
            t = runtime.tenant
            applied = [s.name for s in runtime.profile.protections if s.applied]
            missing = [
                f"{s.name} ({s.reason})" for s in runtime.profile.protections if not s.applied
            ]
            parts = [
                f"tenant {t.name!r} on {t.socket}: children run as uid {t.uid} gid {t.gid}",
                "roots: " + ", ".join(f"{r.path} ({r.tier.value})" for r in t.roots),
                f"protections applied: {', '.join(applied) or 'none'}",
            ]
            if missing:
                parts.append(f"not applied: {', '.join(missing)}")
            if runtime.warm.size:
                parts.append(f"warm children: {runtime.warm.size} set up ahead of need")
            parts.append(_served_by(service.frontend))
            log.info("; ".join(parts), extra=fields(tenant=t.name))
            log.info(
                "tenant %r: connect: %s --socket %s run -- echo hello "
                "(or: grpcurl -plaintext -unix %s list)",
                t.name,
                _ctl(),
                t.socket,
                t.socket,
                extra=fields(tenant=t.name),
            )
        if self.audit is not None:
            log.info("audit log: %s", self.config.audit.path)
        if self.config.admin is not None:
            log.info(
                "admin: %s --admin-socket %s ps (%s)",
                _ctl(),
                self.config.admin.socket,
                _served_by(self._admin.frontend if self._admin else None),
            )
        if self.metrics is not None:
            log.info("metrics: %s (GET /metrics)", self.metrics.where)

    def request_stop(self) -> None:
        self._stop.set()

    # --- reload --------------------------------------------------------------------

    def _on_sighup(self) -> None:
        if not self._serving:
            self._hup_pending = not self._stopping  # applied once start-up is done
            return
        self._hup_pending = False
        self._spawn_task(self._reload_on_signal())

    async def _reload_on_signal(self) -> None:
        try:
            await self.reload()
        except ReloadRejected:
            pass  # logged, audited and notified already
        except Exception:
            log.exception("the reload failed inside the daemon")

    async def reload(self) -> ReloadOutcome:
        """Re-read the config and apply it (SIGHUP, AdminService.Reload); see
        `hostcapd.reload`."""
        outcome = await self.reloads.reload()
        self._collect_settings()  # the new config's, and what the reload made
        return outcome

    # --- shutdown ------------------------------------------------------------------

    async def stop(self) -> None:
        """Stop accepting, end running trees as DAEMON_SHUTDOWN, remove sockets."""
        self._stopping = True
        self._serving = False
        if self._watch is not None:
            self._watch.cancel()  # health is NOT_SERVING from here on, for good
        draining = sum(len(rt.spawns) for rt in self.live_runtimes())
        log.info("stopping: ending %d running spawn(s)", draining, extra=fields(spawns=draining))
        notify(sdnotify.stopping)
        notify(sdnotify.status, f"stopping: ending {draining} running spawn(s)")
        async with self.reloads.lock:  # a reload in progress finishes first
            pass
        services = [*self.tenants.values(), *self.reloads.retiring]
        admin_stop: asyncio.Task[None] | None = None
        if self._admin is not None:
            await self._admin.health.enter_graceful_shutdown()
            if self._admin_service is not None:
                self._admin_service.end_follows()
            admin_stop = asyncio.ensure_future(self._admin.server.stop(1))
        # Running spawns end DAEMON_SHUTDOWN (new ones are refused meanwhile);
        # their calls send the final events; only then do the servers close
        # their connections, after a moment for the clients to read them (a
        # client that writes to a connection closed under it loses what it
        # had not read yet).
        await asyncio.gather(*(s.runtime.shutdown() for s in services), return_exceptions=True)
        deadline = time.monotonic() + STOP_GRACE_S
        while any(s.runtime.active_calls for s in services) and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        await asyncio.sleep(LINGER_S)
        for service in services:
            service.stop_server(1)
        await asyncio.gather(*(t for s in services for t in s.stops), return_exceptions=True)
        if admin_stop is not None:
            await asyncio.gather(admin_stop, return_exceptions=True)
        if self.metrics is not None:
            await self.metrics.close()
        for service in self.tenants.values():
            unlink_if_ours(service.tenant.socket, service.socket_id)
        if self.config.admin is not None:
            unlink_if_ours(self.config.admin.socket, self._admin.socket_id if self._admin else None)
        await asyncio.gather(*self.reloads.retiring.values(), return_exceptions=True)
        await asyncio.gather(*(s.fs.close() for s in self.tenants.values()), return_exceptions=True)
        await self.spawner.close()
        for service in self.tenants.values():
            service.runtime.profile.close()
        if self.host is not None:
            self.host.cgroups.release()
            self.host.cpu.release()
            for watcher in self.host.fs_watchers.values():
                watcher.close()  # its fd on the image would keep it mounted
            self.host.disks.detach_all()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self.audit is not None:
            with contextlib.suppress(AuditUnavailable):
                self.audit.write("daemon.stop", version=__version__, pid=os.getpid())
            await self.audit.close()
            self.audit = None
        log.info("stopped: ended %d spawn(s)", draining, extra=fields(spawns=draining))
