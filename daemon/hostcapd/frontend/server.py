"""The daemon: start-up, one gRPC server per tenant socket, shutdown."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import stat
import sys
from pathlib import Path

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from hostcap_proto.v1 import host_pb2, host_pb2_grpc, process_pb2, process_pb2_grpc
from hostcapd import __version__
from hostcapd.audit import AuditLog, AuditUnavailable
from hostcapd.config import Config
from hostcapd.frontend.host_service import HostServicer
from hostcapd.frontend.process_service import ProcessServicer
from hostcapd.sandbox.profile import HostSupport, ProtectionUnavailable, TenantProfile, prepare, probe_host
from hostcapd.spawner.client import SpawnerClient
from hostcapd.tenant import TenantRuntime

log = logging.getLogger("hostcapd")

#: gRPC message ceiling: a spawn request with stdin, or a file write, fits.
MAX_MESSAGE_BYTES = 80 * 1024 * 1024


class StartupError(Exception):
    """The daemon cannot start; the message says why."""


def boot_id() -> str:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""


async def bind_socket(server: grpc.aio.Server, path: Path, uid: int, gid: int, mode: int) -> Path:
    """Bind under a private temporary name, apply owner/group/mode, and only
    then (after the server starts) rename it into place: no client can ever
    connect through a socket whose permissions are not yet applied."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with contextlib.suppress(FileNotFoundError):
        if stat.S_ISSOCK(path.lstat().st_mode):
            path.unlink()  # stale, from a crashed daemon
        else:
            raise StartupError(f"{path} exists and is not a socket")
    temp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
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


class Daemon:
    def __init__(self, config: Config, config_path: Path | None = None) -> None:
        self.config = config
        self.config_path = config_path
        self.runtimes: dict[str, TenantRuntime] = {}
        self.servers: dict[str, grpc.aio.Server] = {}
        self.sockets: list[Path] = []
        self.spawner = SpawnerClient()
        self._stop = asyncio.Event()
        self.host: HostSupport | None = None
        self.audit: AuditLog | None = None

    async def serve(self) -> int:
        try:
            await self.start()
        except (StartupError, ProtectionUnavailable, AuditUnavailable) as error:
            print(f"hostcapd: {error}", file=sys.stderr)
            await self.stop()
            return 2
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self._stop.set)
        self.announce()
        await self._stop.wait()
        await self.stop()
        return 0

    async def start(self) -> None:
        cfg = self.config
        self.audit = AuditLog.open(cfg.audit, boot_id())
        # The job ledger: spawns a crashed daemon left without an exit record.
        closed = self.audit.close_orphans("hostcapd restarted: the spawn ended with the previous daemon")
        if closed:
            log.warning("closed %d spawns left open by the previous daemon", closed)
        self.host = probe_host(cfg.daemon.cgroup_parent)
        profiles: dict[str, TenantProfile] = {}
        try:
            for tenant in cfg.tenants:
                profiles[tenant.name] = prepare(tenant, self.host)
        except ProtectionUnavailable:
            for p in profiles.values():
                p.close()
            raise
        swept = self.host.cgroups.sweep_stale()
        if swept:
            log.warning("swept %d stale spawn cgroups", swept)
        await self.spawner.start()
        self.spawner.on_restart = self._spawner_restarted
        for tenant in cfg.tenants:
            runtime = TenantRuntime(
                tenant, profiles[tenant.name], self.spawner, self.audit, self.host.cgroups,
                cfg.daemon.kill_grace_seconds,
            )
            runtime.register_with_spawner()
            self.runtimes[tenant.name] = runtime
            await self._serve_tenant(runtime)
        self.audit.write(
            "daemon.start",
            version=__version__,
            tenants=sorted(self.runtimes),
            config_path=str(self.config_path) if self.config_path else None,
            pid=os.getpid(),
        )

    def _spawner_restarted(self) -> None:
        for runtime in self.runtimes.values():
            runtime.register_with_spawner()

    async def _serve_tenant(self, runtime: TenantRuntime) -> None:
        tenant = runtime.tenant
        server = grpc.aio.server(
            options=[
                ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
                ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
                ("grpc.so_reuseport", 0),
            ]
        )
        process_pb2_grpc.add_ProcessServiceServicer_to_server(ProcessServicer(runtime), server)
        host_pb2_grpc.add_HostServiceServicer_to_server(HostServicer(runtime), server)
        health_servicer = health.aio.HealthServicer()
        health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
        services = [
            process_pb2.DESCRIPTOR.services_by_name["ProcessService"].full_name,
            host_pb2.DESCRIPTOR.services_by_name["HostService"].full_name,
            health_pb2.DESCRIPTOR.services_by_name["Health"].full_name,
            reflection.SERVICE_NAME,
        ]
        reflection.enable_server_reflection(services, server)
        temp = await bind_socket(server, tenant.socket, tenant.socket_uid, tenant.socket_gid, tenant.socket_mode)
        await server.start()
        for name in services[:2] + [""]:
            await health_servicer.set(name, health_pb2.HealthCheckResponse.SERVING)
        os.rename(temp, tenant.socket)
        self.sockets.append(tenant.socket)
        self.servers[tenant.name] = server

    def announce(self) -> None:
        for runtime in self.runtimes.values():
            t = runtime.tenant
            applied = [s.name for s in runtime.profile.protections if s.applied]
            missing = [f"{s.name} ({s.reason})" for s in runtime.profile.protections if not s.applied]
            print(f"hostcapd {__version__}: tenant {t.name!r} on {t.socket}", file=sys.stderr)
            print(f"  children run as uid {t.uid} gid {t.gid}; roots: "
                  + ", ".join(f"{r.path} ({r.tier.value})" for r in t.roots), file=sys.stderr)
            print(f"  protections applied: {', '.join(applied) or 'none'}", file=sys.stderr)
            if missing:
                print(f"  not applied: {'; '.join(missing)}", file=sys.stderr)
            print(f"  connect: hostcapctl --socket {t.socket} run -- echo hello", file=sys.stderr)
            print(f"       or: grpcurl -plaintext -unix {t.socket} list", file=sys.stderr)
        if self.audit is not None:
            print(f"  audit log: {self.config.audit.path}", file=sys.stderr)
        sys.stderr.flush()

    def request_stop(self) -> None:
        self._stop.set()

    async def stop(self) -> None:
        """Stop accepting, end running trees as DAEMON_SHUTDOWN, remove sockets."""
        for server in self.servers.values():
            # No new calls; running spawns are ended below, not waited for.
            asyncio.ensure_future(server.stop(grace=5))
        await asyncio.gather(*(rt.shutdown() for rt in self.runtimes.values()), return_exceptions=True)
        await asyncio.gather(*(s.stop(grace=1) for s in self.servers.values()), return_exceptions=True)
        for path in self.sockets:
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
        await self.spawner.close()
        for runtime in self.runtimes.values():
            runtime.profile.close()
        if self.host is not None:
            self.host.cgroups.release()
        if self.audit is not None:
            with contextlib.suppress(AuditUnavailable):
                self.audit.write("daemon.stop", version=__version__, pid=os.getpid())
            await self.audit.close()
            self.audit = None
