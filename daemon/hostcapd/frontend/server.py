"""The daemon: start-up, one gRPC server per tenant socket, the admin socket,
config reload, shutdown, and the service manager's notifications.

    daemon = Daemon(config, config_path)     # or reload_source=... for --dev
    exit_code = await daemon.serve()         # SIGTERM/SIGINT drain, SIGHUP reloads

Every tenant is a `TenantService`: its runtime, its fs worker and the gRPC
server bound to its socket, owned together and released together. A reload
builds the services of added and changed tenants completely (profile, fs
worker, server listening under a temporary name) before it touches anything
that serves; only then does it rename each socket into place, which replaces
the old socket file atomically, so a tenant's socket is never missing. The
replaced service drains in the background: it takes no new calls, its running
spawns finish under the config they started with, then it is released.
"""

from __future__ import annotations

import asyncio
import contextlib
import grp
import itertools
import logging
import os
import shutil
import signal
import stat
import sys
import time
from collections.abc import Callable, Coroutine, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import grpc
from google.protobuf.descriptor import ServiceDescriptor
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection
from hostcap_proto.messages import reply_bytes
from hostcap_proto.v1 import (
    admin_pb2,
    fs_pb2,
    host_pb2,
    process_pb2,
)

from hostcapd import __version__, sdnotify
from hostcapd.audit import AuditLog, AuditUnavailable
from hostcapd.config import AdminSettings, Config, ConfigError, Tenant, load_config
from hostcapd.frontend.admin_service import AdminServicer, ReloadOutcome, ReloadRejected
from hostcapd.frontend.handlers import add_servicer
from hostcapd.frontend.host_service import HostServicer
from hostcapd.frontend.process_service import ProcessServicer
from hostcapd.fs import FsRuntime, FsWorkerUnavailable, start_fs_service
from hostcapd.sandbox.profile import (
    HostSupport,
    ProtectionUnavailable,
    TenantProfile,
    prepare,
    probe_host,
)
from hostcapd.spawn import EOF_GRACE, Outcome
from hostcapd.spawner.client import SpawnerClient, SpawnerLost
from hostcapd.tenant import TenantRuntime

log = logging.getLogger("hostcapd")

#: gRPC message ceiling: a spawn request with stdin, or a file write, fits.
MAX_MESSAGE_BYTES = 80 * 1024 * 1024
#: gRPC's own ceiling for one message.
GRPC_MESSAGE_CEILING = 2**31 - 1


def send_limit(tenant: Tenant) -> int:
    """Largest reply a tenant may be sent: a RunResult carries both streams,
    each up to the ceiling's output_bytes (plus markers and the envelope); a
    ReadFile reply up to max_read_bytes (hostcap_proto.messages)."""
    kept = tenant.limits.ceiling.output_bytes or 0
    return min(GRPC_MESSAGE_CEILING, reply_bytes(kept, tenant.fs.max_read_bytes))


#: Seconds a stopping server gives calls in flight (SIGTERM: spawns are ended first).
STOP_GRACE_S = 5.0
#: After the last call of a shutdown has sent its final event, how long the
#: connections stay open for clients to read it.
LINGER_S = 0.2
#: Added to a replaced tenant's longest possible spawn before its calls are cut.
DRAIN_MARGIN_S = 30.0

_temp_names = itertools.count(1)


class HealthReporter(Protocol):
    """The asyncio health servicer (grpc_health.v1.health.aio.HealthServicer)."""

    async def set(self, service: str, status: int) -> None: ...

    async def enter_graceful_shutdown(self) -> None: ...


def _new_health() -> HealthReporter:
    # grpc-stubs describe only the thread-based health servicer.
    servicer: HealthReporter = health.aio.HealthServicer()  # type: ignore[attr-defined]
    return servicer


#: A peer that is alive but silent (frozen, or a path that stopped delivering)
#: is detected by HTTP/2 pings, and its calls (and their trees) are cancelled.
KEEPALIVE: tuple[tuple[str, int], ...] = (
    ("grpc.keepalive_time_ms", 30_000),
    ("grpc.keepalive_timeout_ms", 20_000),
    # What bounds the wait for the ping's ack in grpcio 1.85 (default 60 s).
    ("grpc.http2.ping_timeout_ms", 20_000),
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.http2.max_pings_without_data", 0),
    ("grpc.http2.min_ping_interval_without_data_ms", 10_000),
)


def _ctl() -> str:
    """How to call hostcapctl from here: the one beside this interpreter (a
    virtualenv's bin/) when there is one, else from PATH."""
    beside = Path(sys.executable).parent / "hostcapctl"
    if not beside.exists() or shutil.which("hostcapctl") == str(beside):
        return "hostcapctl"
    relative = os.path.relpath(beside)
    return str(beside) if relative.startswith("..") else relative


def _service(module: Any, name: str) -> ServiceDescriptor:
    return module.DESCRIPTOR.services_by_name[name]  # type: ignore[no-any-return]


def _register(
    add: Callable[[Any, grpc.aio.Server], None], servicer: Any, server: grpc.aio.Server
) -> None:
    """Add a servicer with its generated (untyped) add_*_to_server function."""
    add(servicer, server)


class StartupError(Exception):
    """The daemon cannot start; the message says why."""


def boot_id() -> str:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""


def _sweep_temp_sockets(path: Path) -> None:
    # Temporary names of a crashed daemon (another pid) are garbage; ours are
    # never swept, so a bind in flight is never disturbed.
    prefix, own = f".{path.name}.", f".{path.name}.{os.getpid()}."
    with contextlib.suppress(OSError):
        for entry in os.scandir(path.parent):
            if (
                entry.name.startswith(prefix)
                and entry.name.endswith(".tmp")
                and not entry.name.startswith(own)
                and stat.S_ISSOCK(entry.stat(follow_symlinks=False).st_mode)
            ):
                with contextlib.suppress(OSError):
                    os.unlink(entry.path)


async def bind_socket(server: grpc.aio.Server, path: Path, uid: int, gid: int, mode: int) -> Path:
    """Bind under a private temporary name and apply owner/group/mode; the
    caller renames it into place after the server starts, so no client can
    ever connect through a socket whose permissions are not yet applied (and
    the rename replaces a stale or replaced socket atomically)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with contextlib.suppress(FileNotFoundError):
        if not stat.S_ISSOCK(path.lstat().st_mode):
            raise StartupError(f"{path} exists and is not a socket")
    _sweep_temp_sockets(path)
    # Unique per bind: a replaced server, when it stops, unlinks the name it
    # bound, which must never be a name a newer server is using.
    temp = path.with_name(f".{path.name}.{os.getpid()}.{next(_temp_names)}.tmp")
    with contextlib.suppress(FileNotFoundError):
        temp.unlink()
    old = os.umask(0o077)
    try:
        if server.add_insecure_port(f"unix:{temp}") == 0:
            raise StartupError(f"cannot bind {path}")
    finally:
        os.umask(old)
    # chmod first: once the file is someone else's, only CAP_FOWNER could.
    os.chmod(temp, mode)
    if os.geteuid() == 0:
        os.chown(temp, uid, gid)
    return temp


def _file_id(path: Path) -> tuple[int, int]:
    st = path.lstat()
    return st.st_dev, st.st_ino


def _unlink_if_ours(path: Path, file_id: tuple[int, int] | None) -> None:
    """Remove the socket at `path` only if it is still the file we put there
    (a reload may have given the path to another tenant's socket)."""
    if file_id is None:
        return
    with contextlib.suppress(FileNotFoundError):
        if _file_id(path) == file_id:
            path.unlink()


def admin_socket_access(admin: AdminSettings) -> tuple[int, int]:
    """The admin socket's (gid, mode): owner root always; group `admin.group`
    with mode 0660, or without a group 0600 (group bits of the configured
    mode are dropped then, as the group would be root's). Raises StartupError
    for a mode that grants others, or an unknown group."""
    if admin.mode & ~0o660:
        raise StartupError(
            f"admin.mode {admin.mode:#o} would let users other than root and the admin "
            "group reach the admin socket (use 0o660 with admin.group, or 0o600)"
        )
    if admin.group is None:
        return 0, (admin.mode & 0o600) | 0o600
    if isinstance(admin.group, int):
        gid = admin.group
    else:
        try:
            gid = grp.getgrnam(admin.group).gr_gid
        except KeyError:
            raise StartupError(f"admin.group {admin.group!r} does not exist") from None
    return gid, admin.mode | 0o600


def _notify(send: Callable[..., bool], *args: str) -> None:
    # A broken NOTIFY_SOCKET must never take the daemon down: systemd will
    # notice the missing READY/WATCHDOG by itself.
    try:
        send(*args)
    except sdnotify.NotifyError as error:
        log.warning("service manager notification failed: %s", error)


def _ended(future: asyncio.Future[Any]) -> asyncio.Future[None]:
    """A future that completes (with None) when `future` does, however it ends."""
    waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def done(_: asyncio.Future[Any]) -> None:
        if not waiter.done():
            waiter.set_result(None)

    future.add_done_callback(done)
    return waiter


async def _watchdog() -> None:
    try:
        await sdnotify.watchdog_loop()
    except sdnotify.NotifyError as error:
        log.error("no watchdog pings: %s", error)


@dataclass(eq=False)
class TenantService:
    """One tenant as served: runtime, fs worker, gRPC server, socket file."""

    runtime: TenantRuntime
    fs: FsRuntime
    server: grpc.aio.Server
    health: HealthReporter
    #: The bound temporary name, until the socket is put in place.
    temp: Path | None
    #: (st_dev, st_ino) of the socket file once in place.
    socket_id: tuple[int, int] | None = None
    stops: list[asyncio.Task[None]] = field(default_factory=list)

    @property
    def name(self) -> str:
        return self.runtime.name

    @property
    def tenant(self) -> Tenant:
        return self.runtime.tenant

    def stop_server(self, grace: float) -> asyncio.Task[None]:
        """Stop taking calls now; calls in flight get `grace` seconds. A later,
        shorter grace takes precedence (grpc's stop is idempotent)."""
        task = asyncio.ensure_future(self.server.stop(grace))
        self.stops.append(task)
        return task

    def longest_spawn_s(self) -> float:
        """How long a spawn of this tenant can live at most: the wall ceiling,
        the kill grace and the pipe-EOF wait."""
        wall = self.tenant.limits.ceiling.wall_seconds or 0.0
        return wall + self.runtime.kill_grace + EOF_GRACE


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
        #: Services a reload replaced or removed, until their spawns are done.
        self._retiring: dict[TenantService, asyncio.Task[None]] = {}
        self.spawner = SpawnerClient()
        self._stop = asyncio.Event()
        self.host: HostSupport | None = None
        self.audit: AuditLog | None = None
        self._admin: grpc.aio.Server | None = None
        self._admin_servicer: AdminServicer | None = None
        self._admin_health: HealthReporter | None = None
        self._admin_id: tuple[int, int] | None = None
        self._reload_lock = asyncio.Lock()
        self._serving = False
        self._stopping = False
        self._hup_pending = False
        self._tasks: set[asyncio.Task[None]] = set()

    # --- the view the admin service has ----------------------------------------

    def live_runtimes(self) -> Iterable[TenantRuntime]:
        return [s.runtime for s in (*self.tenants.values(), *self._retiring)]

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
            print(f"hostcapd: {error}", file=sys.stderr)
            _notify(sdnotify.status, f"start-up failed: {error}")
            await self.stop()
            return 2
        self.announce()
        self._serving = True
        _notify(sdnotify.status, self._status_line())
        _notify(sdnotify.ready)
        self._spawn_task(_watchdog())
        if self._hup_pending:
            self._on_sighup()
        await self._stop.wait()
        await self.stop()
        return 0

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
        self.host = probe_host(cfg.daemon.cgroup_parent, cfg.daemon.cgroup_favor_dynmods)
        self.host.disks.directory = cfg.daemon.state_dir / "disk"  # tenant disk budgets
        profiles: dict[str, TenantProfile] = {}
        try:
            for tenant in cfg.tenants:
                profiles[tenant.name] = prepare(tenant, self.host)
            swept = self.host.cgroups.sweep_stale()
            if swept:
                log.warning("swept %d stale spawn cgroups", swept)
            await self.spawner.start()
            self.spawner.on_restart = self._spawner_restarted
            for tenant in cfg.tenants:
                service = await self._prepare_tenant(tenant, profiles.pop(tenant.name))
                self._commit(service)
        finally:
            for p in profiles.values():
                p.close()
        await self._serve_admin()
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
        )
        fs_runtime: FsRuntime | None = None
        server: grpc.aio.Server | None = None
        temp: Path | None = None
        try:
            fs_runtime = await start_fs_service(tenant, runtime.audit)
            runtime.fs = fs_runtime  # HostService.Capabilities reports its protections
            server = grpc.aio.server(
                options=[
                    ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
                    ("grpc.max_send_message_length", send_limit(tenant)),
                    ("grpc.so_reuseport", 0),
                    *KEEPALIVE,
                ]
            )
            add_servicer(server, ProcessServicer(runtime), _service(process_pb2, "ProcessService"))
            add_servicer(server, HostServicer(runtime), _service(host_pb2, "HostService"))
            add_servicer(server, fs_runtime.servicer, _service(fs_pb2, "FsService"))
            health_servicer = _new_health()
            _register(health_pb2_grpc.add_HealthServicer_to_server, health_servicer, server)
            services = [
                process_pb2.DESCRIPTOR.services_by_name["ProcessService"].full_name,
                host_pb2.DESCRIPTOR.services_by_name["HostService"].full_name,
                fs_pb2.DESCRIPTOR.services_by_name["FsService"].full_name,
                health_pb2.DESCRIPTOR.services_by_name["Health"].full_name,
                reflection.SERVICE_NAME,
            ]
            reflection.enable_server_reflection(services, server)
            temp = await bind_socket(
                server, tenant.socket, tenant.socket_uid, tenant.socket_gid, tenant.socket_mode
            )
            await server.start()
            for name in [*services[:3], ""]:
                await health_servicer.set(name, health_pb2.HealthCheckResponse.SERVING)
        except BaseException:
            if server is not None:
                await server.stop(None)
            if temp is not None:
                with contextlib.suppress(FileNotFoundError):
                    temp.unlink()
            if fs_runtime is not None:
                await fs_runtime.close()
            profile.close()
            raise
        return TenantService(runtime, fs_runtime, server, health_servicer, temp)

    def _commit(self, service: TenantService) -> None:
        """Make a prepared tenant the one serving: its profile goes to the
        spawner, then its socket replaces whatever was at the path (one
        rename, so the path is never missing). No await: nothing runs between."""
        assert service.temp is not None
        service.runtime.register_with_spawner()
        os.rename(service.temp, service.tenant.socket)
        service.temp = None
        service.socket_id = _file_id(service.tenant.socket)
        self.tenants[service.name] = service

    async def _discard(self, service: TenantService) -> None:
        """Release a prepared tenant that never served."""
        await service.server.stop(None)
        if service.temp is not None:
            with contextlib.suppress(FileNotFoundError):
                service.temp.unlink()
        await service.fs.close()
        service.runtime.profile.close()

    async def _serve_admin(self) -> None:
        admin = self.config.admin
        if admin is None:
            return
        gid, mode = admin_socket_access(admin)
        server = grpc.aio.server(options=[("grpc.so_reuseport", 0), *KEEPALIVE])
        self._admin_servicer = AdminServicer(self)
        add_servicer(server, self._admin_servicer, _service(admin_pb2, "AdminService"))
        health_servicer = _new_health()
        _register(health_pb2_grpc.add_HealthServicer_to_server, health_servicer, server)
        services = [
            admin_pb2.DESCRIPTOR.services_by_name["AdminService"].full_name,
            health_pb2.DESCRIPTOR.services_by_name["Health"].full_name,
            reflection.SERVICE_NAME,
        ]
        reflection.enable_server_reflection(services, server)
        self._admin, self._admin_health = server, health_servicer
        temp = await bind_socket(server, admin.socket, 0, gid, mode)
        try:
            await server.start()
            for name in (services[0], ""):
                await health_servicer.set(name, health_pb2.HealthCheckResponse.SERVING)
            os.rename(temp, admin.socket)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                temp.unlink()
            raise
        self._admin_id = _file_id(admin.socket)

    def announce(self) -> None:
        for service in self.tenants.values():
            runtime = service.runtime
            t = runtime.tenant
            applied = [s.name for s in runtime.profile.protections if s.applied]
            missing = [
                f"{s.name} ({s.reason})" for s in runtime.profile.protections if not s.applied
            ]
            print(f"hostcapd {__version__}: tenant {t.name!r} on {t.socket}", file=sys.stderr)
            print(
                f"  children run as uid {t.uid} gid {t.gid}; roots: "
                + ", ".join(f"{r.path} ({r.tier.value})" for r in t.roots),
                file=sys.stderr,
            )
            print(f"  protections applied: {', '.join(applied) or 'none'}", file=sys.stderr)
            if missing:
                print(f"  not applied: {'; '.join(missing)}", file=sys.stderr)
            print(f"  connect: {_ctl()} --socket {t.socket} run -- echo hello", file=sys.stderr)
            print(f"       or: grpcurl -plaintext -unix {t.socket} list", file=sys.stderr)
        if self.audit is not None:
            print(f"  audit log: {self.config.audit.path}", file=sys.stderr)
        if self.config.admin is not None:
            print(
                f"  admin: {_ctl()} --admin-socket {self.config.admin.socket} ps",
                file=sys.stderr,
            )
        sys.stderr.flush()

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

    def _load(self) -> Config:
        if self._reload_source is not None:
            return self._reload_source()
        if self.config_path is not None:
            return load_config(self.config_path)
        return self.config

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
        async with self._reload_lock:
            if not self._serving or self._stopping:
                raise ReloadRejected("INVALID_ARGUMENT", "the daemon is not serving")
            _notify(sdnotify.reloading)
            _notify(sdnotify.status, "reloading the config")
            try:
                try:
                    outcome = await self._apply(await asyncio.to_thread(self._load))
                except ConfigError as error:
                    raise ReloadRejected("INVALID_ARGUMENT", str(error)) from None
            except ReloadRejected as rejected:
                log.error("reload rejected, the previous config keeps serving: %s", rejected)
                self._audit_reload(message=f"rejected: {rejected.message}")
                _notify(
                    sdnotify.status,
                    f"reload rejected: {rejected.message} | {self._status_line()}",
                )
                raise
            finally:
                _notify(sdnotify.ready)
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
            _notify(sdnotify.status, self._status_line())
            return outcome

    def _audit_reload(self, **fields: object) -> None:
        if self.audit is None:
            return
        try:
            self.audit.write(
                "daemon.reload",
                version=__version__,
                tenants=sorted(self.tenants),
                config_path=str(self.config_path) if self.config_path else None,
                pid=os.getpid(),
                **fields,
            )
        except AuditUnavailable as error:
            log.error("could not audit the reload: %s", error)

    async def _apply(self, new: Config) -> ReloadOutcome:
        old = self.config
        for section in ("daemon", "audit", "admin"):
            if getattr(new, section) != getattr(old, section):
                raise ReloadRejected(
                    "INVALID_ARGUMENT",
                    f"the [{section}] settings changed; they apply only at start-up "
                    "(restart hostcapd, or revert them to reload the tenants)",
                )
        if new.admin is not None and new.admin.socket in {t.socket for t in new.tenants}:
            raise ReloadRejected(
                "INVALID_ARGUMENT", f"admin.socket {new.admin.socket} is also a tenant's socket"
            )
        before = {t.name: t for t in old.tenants}
        after = {t.name: t for t in new.tenants}
        added = sorted(after.keys() - before.keys())
        removed = sorted(before.keys() - after.keys())
        changed = sorted(n for n in after.keys() & before.keys() if after[n] != before[n])
        assert self.host is not None

        # Everything new is built before anything serving is touched.
        profiles: dict[str, TenantProfile] = {}
        prepared: list[TenantService] = []
        try:
            for name in (*added, *changed):
                profiles[name] = prepare(after[name], self.host)
            for name in (*added, *changed):
                prepared.append(await self._prepare_tenant(after[name], profiles.pop(name)))
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
            replaced = self.tenants.get(service.name)
            self._commit(service)
            if replaced is not None:
                # At once: a call that reaches the old server now is refused
                # rather than run under the old config with the new profile.
                replaced.runtime.accepting = False
                service.runtime.adopt_requests(replaced.runtime)
                self._retire(replaced, removed=False)
        for name in removed:
            self._retire(self.tenants.pop(name), removed=True)
        self.config = new
        return ReloadOutcome(tuple(added), tuple(removed), tuple(changed))

    async def _release(
        self, prepared: list[TenantService], profiles: dict[str, TenantProfile]
    ) -> None:
        for service in prepared:
            await self._discard(service)
        for profile in profiles.values():
            profile.close()

    def _retire(self, service: TenantService, removed: bool) -> None:
        self._retiring[service] = asyncio.ensure_future(self._drain(service, removed))

    async def _drain(self, service: TenantService, removed: bool) -> None:
        """Wind down a tenant a reload replaced (`removed` False: its spawns
        run to their end) or removed (its spawns end DAEMON_SHUTDOWN)."""
        runtime = service.runtime
        runtime.accepting = False
        try:
            # Replaced: the rename already took the path. Removed: take it now.
            _unlink_if_ours(service.tenant.socket, service.socket_id)
            if removed:
                await service.health.enter_graceful_shutdown()
                service.stop_server(STOP_GRACE_S)
                for spawn in list(runtime.spawns.values()):
                    spawn.cancel(
                        Outcome.DAEMON_SHUTDOWN,
                        f"tenant {runtime.name!r} was removed from the config by a reload",
                    )
                await runtime.shutdown()
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
                self.spawner.drop_profile(service.runtime.profile_key)
            log.info("tenant %s %s and drained", service.name, "removed" if removed else "replaced")
        finally:
            self._retiring.pop(service, None)

    # --- shutdown ------------------------------------------------------------------

    async def stop(self) -> None:
        """Stop accepting, end running trees as DAEMON_SHUTDOWN, remove sockets."""
        self._stopping = True
        self._serving = False
        draining = sum(len(rt.spawns) for rt in self.live_runtimes())
        _notify(sdnotify.stopping)
        _notify(sdnotify.status, f"stopping: ending {draining} running spawn(s)")
        async with self._reload_lock:  # a reload in progress finishes first
            pass
        services = [*self.tenants.values(), *self._retiring]
        admin_stop: asyncio.Task[None] | None = None
        if self._admin is not None:
            if self._admin_health is not None:
                await self._admin_health.enter_graceful_shutdown()
            if self._admin_servicer is not None:
                self._admin_servicer.end_follows()
            admin_stop = asyncio.ensure_future(self._admin.stop(1))
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
        for service in self.tenants.values():
            _unlink_if_ours(service.tenant.socket, service.socket_id)
        if self.config.admin is not None:
            _unlink_if_ours(self.config.admin.socket, self._admin_id)
        await asyncio.gather(*self._retiring.values(), return_exceptions=True)
        await asyncio.gather(*(s.fs.close() for s in self.tenants.values()), return_exceptions=True)
        await self.spawner.close()
        for service in self.tenants.values():
            service.runtime.profile.close()
        if self.host is not None:
            self.host.cgroups.release()
            self.host.cpu.release()
            self.host.disks.detach_all()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self.audit is not None:
            with contextlib.suppress(AuditUnavailable):
                self.audit.write("daemon.stop", version=__version__, pid=os.getpid())
            await self.audit.close()
            self.audit = None
