"""The gRPC servers: one per tenant socket (a `TenantService`: its runtime,
its fs worker and the server bound to its socket, owned and released
together) and the admin one. Each is built completely, listening under a
temporary socket name, before the daemon puts it in place."""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import grpc
from google.protobuf.descriptor import ServiceDescriptor
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection
from hostcap_proto.messages import reply_bytes
from hostcap_proto.v1 import admin_pb2, fs_pb2, host_pb2, process_pb2

from hostcapd.audit import AuditLog
from hostcapd.bridge.root import ADMIN, Endpoint, Frontend, relayed_methods
from hostcapd.config import AdminSettings, Tenant
from hostcapd.frontend.admin_service import AdminServicer
from hostcapd.frontend.fs_runtime import FsRuntime, start_fs_service
from hostcapd.frontend.handlers import add_servicer
from hostcapd.frontend.host_service import HostServicer
from hostcapd.frontend.options import (
    GRPC_MESSAGE_CEILING,
    KEEPALIVE,
    MAX_MESSAGE_BYTES,
    HealthReporter,
    new_health,
    server_options,
)
from hostcapd.frontend.process_service import ProcessServicer
from hostcapd.frontend.sockets import admin_socket_access, bind_socket, file_id_of
from hostcapd.process.spawn import EOF_GRACE
from hostcapd.tenant import TenantRuntime


def send_limit(tenant: Tenant) -> int:
    """Largest reply a tenant may be sent: a RunResult carries both streams,
    each up to the ceiling's output_bytes (plus markers and the envelope); a
    ReadFile reply up to max_read_bytes (hostcap_proto.messages)."""
    kept = tenant.limits.ceiling.output_bytes or 0
    return min(GRPC_MESSAGE_CEILING, reply_bytes(kept, tenant.fs.max_read_bytes))


def service_descriptor(module: Any, name: str) -> ServiceDescriptor:
    return module.DESCRIPTOR.services_by_name[name]  # type: ignore[no-any-return]


def register(
    add: Callable[[Any, grpc.aio.Server], None], servicer: Any, server: grpc.aio.Server
) -> None:
    """Add a servicer with its generated (untyped) add_*_to_server function."""
    add(servicer, server)


class Server(Protocol):
    """What a tenant's server is to the daemon: a grpc.aio.Server in this
    process, or the tenant's front-end process (`hostcapd.bridge.root`)."""

    async def stop(self, grace: float | None) -> None: ...


class Graceful(Protocol):
    """What the daemon asks of a tenant's health reporting: NOT_SERVING for
    good, or for a reason until it clears (`report("")`)."""

    async def enter_graceful_shutdown(self) -> None: ...

    async def report(self, reason: str, service: str = "") -> None: ...


def _in_place(path: Path, frontend: Frontend | None) -> tuple[int, int]:
    """A socket now at its path: its identity; its front-end's bind
    directory is no longer needed."""
    identity = file_id_of(path)
    if frontend is not None:
        frontend.remove_bind_dir()
    return identity


async def _release(server: Server, temp: Path | None, frontend: Frontend | None) -> None:
    """Stop a prepared server that never served, and remove what it bound."""
    await server.stop(None)
    if temp is not None:
        with contextlib.suppress(FileNotFoundError):
            temp.unlink()
    if frontend is not None:
        frontend.remove_bind_dir()


@dataclass(eq=False)
class TenantService:
    """One tenant as served: runtime, fs worker, gRPC server, socket file."""

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
    frontend: Frontend | None = None

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


def _servicers(runtime: TenantRuntime, fs_runtime: FsRuntime) -> dict[str, Any]:
    """The tenant's servicers by service name: bound to its runtime."""
    return {
        "ProcessService": ProcessServicer(runtime),
        "HostService": HostServicer(runtime),
        "FsService": fs_runtime.servicer,
    }


async def serve_tenant(runtime: TenantRuntime, frontend_process: bool = False) -> TenantService:
    """A tenant's service: with `frontend_process`, its socket served by a
    front-end process of its own (`serve_tenant_split`), else by a gRPC
    server in this process."""
    if frontend_process:
        return await serve_tenant_split(runtime)
    return await serve_tenant_here(runtime)


async def serve_tenant_split(runtime: TenantRuntime) -> TenantService:
    """Start a tenant's fs worker here and its front-end process, which
    binds under a temporary name; the servicers run here, on what the
    front-end relays. Takes ownership of the runtime's profile: on failure
    nothing is left behind."""
    tenant, profile = runtime.tenant, runtime.profile
    fs_runtime: FsRuntime | None = None
    frontend: Frontend | None = None
    try:
        fs_runtime = await start_fs_service(tenant, runtime.audit)
        runtime.fs = fs_runtime
        frontend = Frontend(
            Endpoint.of_tenant(tenant, MAX_MESSAGE_BYTES, send_limit(tenant)),
            runtime.audit,
            relayed_methods("tenant", _servicers(runtime, fs_runtime)),
            runtime.frontend_lost,
        )
        runtime.frontend = frontend
        temp = await frontend.start()
    except BaseException:
        if frontend is not None:
            await frontend.stop(None)
            frontend.remove_bind_dir()
        if fs_runtime is not None:
            await fs_runtime.close()
        profile.close()
        raise
    return TenantService(runtime, fs_runtime, frontend, frontend, temp, frontend=frontend)


async def serve_tenant_here(runtime: TenantRuntime) -> TenantService:
    """Start a tenant's fs worker and gRPC server, bound under a temporary
    name. Takes ownership of the runtime's profile: on failure nothing is
    left behind."""
    tenant, profile = runtime.tenant, runtime.profile
    fs_runtime: FsRuntime | None = None
    server: grpc.aio.Server | None = None
    temp: Path | None = None
    try:
        fs_runtime = await start_fs_service(tenant, runtime.audit)
        runtime.fs = fs_runtime  # HostService.Capabilities reports its protections
        server = grpc.aio.server(options=server_options(MAX_MESSAGE_BYTES, send_limit(tenant)))
        servicers = _servicers(runtime, fs_runtime)
        for module, name in (
            (process_pb2, "ProcessService"),
            (host_pb2, "HostService"),
            (fs_pb2, "FsService"),
        ):
            add_servicer(server, servicers[name], service_descriptor(module, name), tenant.name)
        health_servicer = new_health()
        register(health_pb2_grpc.add_HealthServicer_to_server, health_servicer, server)
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


@dataclass(eq=False)
class AdminService:
    """The admin socket as served: its server (or front-end process), bound
    under a temporary name until `place` puts it at its path."""

    server: Server
    health: Graceful
    temp: Path | None
    path: Path
    frontend: Frontend | None = None
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
    servicer: AdminServicer,
    audit: AuditLog | None = None,
    frontend_process: bool = False,
) -> AdminService:
    """Start the admin server, listening under a temporary name (`place`
    puts it in place); with `frontend_process`, in a front-end process of
    the admin socket's own, relaying only the admin operations to
    `servicer` here."""
    gid, mode = admin_socket_access(admin)
    if frontend_process:
        assert audit is not None
        endpoint = Endpoint(
            "admin", ADMIN, admin.socket, 0, gid, mode, ADMIN_RECEIVE, GRPC_MESSAGE_CEILING
        )
        frontend = Frontend(
            endpoint,
            audit,
            relayed_methods("admin", {"AdminService": servicer}),
            servicer.end_follows,
        )
        temp = await frontend.start()
        return AdminService(frontend, frontend, temp, admin.socket, frontend)
    server, health_servicer, temp = await _serve_admin_here(admin, servicer, gid, mode)
    return AdminService(server, health_servicer, temp, admin.socket)


#: The admin socket's largest request (grpc's default).
ADMIN_RECEIVE = 4 * 1024 * 1024


async def _serve_admin_here(
    admin: AdminSettings, servicer: AdminServicer, gid: int, mode: int
) -> tuple[grpc.aio.Server, HealthReporter, Path]:
    server = grpc.aio.server(options=[("grpc.so_reuseport", 0), *KEEPALIVE])
    add_servicer(server, servicer, service_descriptor(admin_pb2, "AdminService"))
    health_servicer = new_health()
    register(health_pb2_grpc.add_HealthServicer_to_server, health_servicer, server)
    services = [
        admin_pb2.DESCRIPTOR.services_by_name["AdminService"].full_name,
        health_pb2.DESCRIPTOR.services_by_name["Health"].full_name,
        reflection.SERVICE_NAME,
    ]
    reflection.enable_server_reflection(services, server)
    temp = await bind_socket(server, admin.socket, 0, gid, mode)
    try:
        await server.start()
        for name in (services[0], ""):
            await health_servicer.set(name, health_pb2.HealthCheckResponse.SERVING)
    except BaseException:
        await server.stop(None)
        with contextlib.suppress(FileNotFoundError):
            temp.unlink()
        raise
    return server, health_servicer, temp
