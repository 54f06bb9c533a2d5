"""The served sockets: one per tenant (a `TenantService`: its runtime, its
fs worker and the front-end serving its socket, owned and released
together) and the admin one. Each is built completely, listening under a
temporary socket name, before the daemon puts it in place. A socket is
served by a front-end process (`hostcapd.bridge.frontends`), or with
`frontend_processes = false` by the same front-end code in this process."""

from __future__ import annotations

import asyncio
import contextlib
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from hostcap_proto.messages import reply_bytes

from hostcapd.audit import AuditLog
from hostcapd.bridge.frontends import ADMIN, Endpoint, FrontendProcess, relayed_methods
from hostcapd.config import AdminSettings, Tenant
from hostcapd.egress.supervisor import EgressUnavailable
from hostcapd.process.spawn import EOF_GRACE
from hostcapd.service.admin_service import AdminService
from hostcapd.service.fs_runtime import FsRuntime, start_fs_service
from hostcapd.service.host_service import HostService
from hostcapd.service.process_service import ProcessService
from hostcapd.service.sockets import StartupError, admin_socket_access, file_id_of
from hostcapd.tenant import TenantRuntime

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


class Server(Protocol):
    """What a tenant's server is to the daemon: its front-end
    (`hostcapd.bridge.frontends.FrontendProcess`)."""

    async def stop(self, grace: float | None) -> None: ...


class Graceful(Protocol):
    """What the daemon asks of a tenant's health reporting: NOT_SERVING for
    good, or for a reason until it clears (`report("")`)."""

    async def enter_graceful_shutdown(self) -> None: ...

    async def report(self, reason: str, service: str = "") -> None: ...


def _in_place(path: Path, frontend: FrontendProcess | None) -> tuple[int, int]:
    """A socket now at its path: its identity; its front-end's bind
    directory is no longer needed."""
    identity = file_id_of(path)
    if frontend is not None:
        frontend.remove_bind_dir()
    return identity


async def _release(server: Server, temp: Path | None, frontend: FrontendProcess | None) -> None:
    """Stop a prepared server that never served, and remove what it bound."""
    await server.stop(None)
    if temp is not None:
        with contextlib.suppress(FileNotFoundError):
            temp.unlink()
    if frontend is not None:
        frontend.remove_bind_dir()


@dataclass(eq=False)
class TenantService:
    """One tenant as served: runtime, fs worker, front-end, socket file."""

    runtime: TenantRuntime
    fs: FsRuntime
    server: Server
    health: Graceful
    #: The bound temporary name, until the socket is put in place.
    temp: Path | None
    #: (st_dev, st_ino) of the socket file once in place.
    socket_id: tuple[int, int] | None = None
    stops: list[asyncio.Task[None]] = field(default_factory=list)
    #: The front-end process serving the socket, when the tenant has one.
    frontend: FrontendProcess | None = None

    def placed(self) -> None:
        """The socket was renamed into place (`temp` is gone)."""
        self.temp = None
        self.socket_id = _in_place(self.tenant.socket, self.frontend)

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
        return wall + self.runtime.deps.kill_grace + EOF_GRACE

    async def discard(self) -> None:
        """Release a prepared tenant that never served."""
        await _release(self.server, self.temp, self.frontend)
        await self.fs.close()
        self.runtime.profile.close()


def _services(runtime: TenantRuntime, fs_runtime: FsRuntime) -> dict[str, Any]:
    """The tenant's services by name: bound to its runtime."""
    return {
        "ProcessService": ProcessService(runtime),
        "HostService": HostService(runtime),
        "FsService": fs_runtime.service,
    }


async def serve_tenant(
    runtime: TenantRuntime,
    frontend_process: bool = True,
    record_callers: bool = True,
    event_loop: str = "asyncio",
    cpu: str = "any",
    fs_direct_reads: bool = True,
) -> TenantService:
    """Start a tenant's fs worker here and its front-end (a process of its
    own, or with `frontend_process` False the same code in this process),
    which binds under a temporary name; the services run here, on what the
    front-end relays. A front-end process asks the worker for reads
    directly with `fs_direct_reads` (decision 0034). Takes ownership of the
    runtime's profile: on failure nothing is left behind."""
    tenant, profile = runtime.tenant, runtime.profile
    fs_runtime: FsRuntime | None = None
    frontend: FrontendProcess | None = None
    try:
        fs_runtime = await start_fs_service(
            tenant,
            runtime.audit,
            place=profile.place_daemon_side,
            direct_reads=fs_direct_reads and frontend_process,
        )
        runtime.fs = fs_runtime
        frontend = FrontendProcess(
            Endpoint.of_tenant(tenant, MAX_MESSAGE_BYTES, send_limit(tenant)),
            runtime.audit,
            relayed_methods("tenant", _services(runtime, fs_runtime)),
            runtime.frontend_lost,
            in_process=not frontend_process,
            record_callers=record_callers,
            event_loop=event_loop,
            cpu=cpu,
        )
        runtime.frontend = frontend
        frontend.place = profile.place_daemon_side
        if fs_runtime.reports is not None:
            frontend.read_link = fs_runtime.read_link
            fs_runtime.reports.on_violation = frontend.bridge.violation
        temp = await frontend.start()
        if runtime.deps.egress is not None:
            try:
                await runtime.deps.egress.start()
            except EgressUnavailable as error:
                raise StartupError(f"tenant {tenant.name!r}: {error}") from None
    except BaseException:
        if runtime.deps.egress is not None:
            await runtime.deps.egress.stop()
        if frontend is not None:
            await frontend.stop(None)
            frontend.remove_bind_dir()
        if fs_runtime is not None:
            await fs_runtime.close()
        profile.close()
        raise
    return TenantService(runtime, fs_runtime, frontend, frontend, temp, frontend=frontend)


@dataclass(eq=False)
class AdminSocket:
    """The admin socket as served: its front-end, bound under a temporary
    name until `place` puts it at its path."""

    server: Server
    health: Graceful
    temp: Path | None
    path: Path
    frontend: FrontendProcess | None = None
    socket_id: tuple[int, int] | None = None

    def place(self) -> None:
        assert self.temp is not None
        os.rename(self.temp, self.path)
        self.temp = None
        self.socket_id = _in_place(self.path, self.frontend)

    async def discard(self) -> None:
        await _release(self.server, self.temp, self.frontend)


async def serve_admin(
    admin: AdminSettings,
    service: AdminService,
    audit: AuditLog,
    frontend_process: bool = True,
    record_callers: bool = True,
    event_loop: str = "asyncio",
    cpu: str = "any",
) -> AdminSocket:
    """Start the admin socket's front-end, listening under a temporary name
    (`place` puts it in place): a process of the admin socket's own (or with
    `frontend_process` False the same code in this process), relaying only
    the admin operations to `service` here."""
    gid, mode = admin_socket_access(admin)
    endpoint = Endpoint(
        "admin", ADMIN, admin.socket, 0, gid, mode, ADMIN_RECEIVE, GRPC_MESSAGE_CEILING
    )
    frontend = FrontendProcess(
        endpoint,
        audit,
        relayed_methods("admin", {"AdminService": service}),
        service.end_follows,
        in_process=not frontend_process,
        record_callers=record_callers,
        event_loop=event_loop,
        cpu=cpu,
    )
    temp = await frontend.start()
    return AdminSocket(frontend, frontend, temp, admin.socket, frontend)


#: The admin socket's largest request (grpc's default).
ADMIN_RECEIVE = 4 * 1024 * 1024
