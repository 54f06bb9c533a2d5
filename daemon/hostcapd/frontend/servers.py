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
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection
from hostcap_proto.messages import reply_bytes
from hostcap_proto.v1 import admin_pb2, fs_pb2, host_pb2, process_pb2

from hostcapd.config import AdminSettings, Tenant
from hostcapd.frontend.admin_service import AdminServicer
from hostcapd.frontend.fs_runtime import FsRuntime, start_fs_service
from hostcapd.frontend.handlers import add_servicer
from hostcapd.frontend.host_service import HostServicer
from hostcapd.frontend.process_service import ProcessServicer
from hostcapd.frontend.sockets import admin_socket_access, bind_socket, file_id_of
from hostcapd.process.spawn import EOF_GRACE
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


class HealthReporter(Protocol):
    """The asyncio health servicer (grpc_health.v1.health.aio.HealthServicer)."""

    async def set(self, service: str, status: int) -> None: ...

    async def enter_graceful_shutdown(self) -> None: ...


def new_health() -> HealthReporter:
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


def service_descriptor(module: Any, name: str) -> ServiceDescriptor:
    return module.DESCRIPTOR.services_by_name[name]  # type: ignore[no-any-return]


def register(
    add: Callable[[Any, grpc.aio.Server], None], servicer: Any, server: grpc.aio.Server
) -> None:
    """Add a servicer with its generated (untyped) add_*_to_server function."""
    add(servicer, server)


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
        return wall + self.runtime.deps.kill_grace + EOF_GRACE

    async def discard(self) -> None:
        """Release a prepared tenant that never served."""
        await self.server.stop(None)
        if self.temp is not None:
            with contextlib.suppress(FileNotFoundError):
                self.temp.unlink()
        await self.fs.close()
        self.runtime.profile.close()


async def serve_tenant(runtime: TenantRuntime) -> TenantService:
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
        server = grpc.aio.server(
            options=[
                ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
                ("grpc.max_send_message_length", send_limit(tenant)),
                ("grpc.so_reuseport", 0),
                *KEEPALIVE,
            ]
        )
        for servicer, module, name in (
            (ProcessServicer(runtime), process_pb2, "ProcessService"),
            (HostServicer(runtime), host_pb2, "HostService"),
            (fs_runtime.servicer, fs_pb2, "FsService"),
        ):
            add_servicer(server, servicer, service_descriptor(module, name), tenant.name)
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


async def serve_admin(
    admin: AdminSettings, servicer: AdminServicer
) -> tuple[grpc.aio.Server, HealthReporter, tuple[int, int]]:
    """Start the admin server and put its socket in place; its server, health
    servicer and socket file id."""
    gid, mode = admin_socket_access(admin)
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
        os.rename(temp, admin.socket)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            temp.unlink()
        raise
    return server, health_servicer, file_id_of(admin.socket)
