"""The bench's client of a tenant socket: the generated stubs over grpc.aio."""

from __future__ import annotations

import time
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from hostcap_proto.v1 import common_pb2, fs_pb2, fs_pb2_grpc, process_pb2, process_pb2_grpc

from bench.native import BenchError

OPTIONS = [
    ("grpc.max_receive_message_length", 80 << 20),
    ("grpc.max_send_message_length", 80 << 20),
]
TRUE = process_pb2.SpawnRequest(argv=["/bin/true"])


def outcome(exited: process_pb2.Exited) -> str:
    return str(common_pb2.Outcome.Name(exited.outcome))


def check_exited(exited: process_pb2.Exited, what: str) -> None:
    if exited.outcome != common_pb2.EXITED or exited.exit_code != 0:
        raise BenchError(f"{what}: {outcome(exited)} ({exited.message})")


class TenantClient:
    """One channel to one tenant socket."""

    def __init__(self, socket: Path) -> None:
        self.channel = grpc.aio.insecure_channel(f"unix:{socket}", options=OPTIONS)
        self.process = process_pb2_grpc.ProcessServiceStub(self.channel)  # type: ignore[no-untyped-call]
        self.health = health_pb2_grpc.HealthStub(self.channel)

    async def true(self) -> float:
        """Seconds of one Run of /bin/true, until its result arrived."""
        start = time.perf_counter()
        result = await self.process.Run(TRUE)
        seconds = time.perf_counter() - start
        check_exited(result.exited, "Run /bin/true")
        return seconds

    async def open_environment(self) -> str:
        """An environment of this tenant (its namespaces made): its id."""
        info = await self.process.OpenEnvironment(process_pb2.OpenEnvironmentRequest())
        return str(info.environment_id)

    async def true_in(self, environment_id: str) -> float:
        """Seconds of one Run of /bin/true inside an open environment."""
        request = process_pb2.SpawnRequest(argv=["/bin/true"], environment_id=environment_id)
        start = time.perf_counter()
        result = await self.process.Run(request)
        seconds = time.perf_counter() - start
        check_exited(result.exited, "Run /bin/true in an environment")
        return seconds

    async def health_rtt(self) -> float:
        """Seconds of one Health.Check: the daemon's gRPC overhead alone."""
        start = time.perf_counter()
        await self.health.Check(health_pb2.HealthCheckRequest(service=""))
        return time.perf_counter() - start

    async def close(self) -> None:
        await self.channel.close(None)


async def ready_for_ab(
    clients: dict[str, TenantClient], read_path: str, warm_up: int
) -> dict[str, fs_pb2_grpc.FsServiceStub]:
    """For an A/B of daemons (`bench.who_asked_ab`, `bench.frontend_ab`): each
    client's fs stub, with a 4 KiB file at `read_path` written through it, and
    `warm_up` spawns and health checks made on each."""
    fs = {
        kind: fs_pb2_grpc.FsServiceStub(c.channel)  # type: ignore[no-untyped-call]
        for kind, c in clients.items()
    }
    for stub in fs.values():
        await stub.WriteFile(fs_pb2.WriteFileRequest(path=read_path, data=bytes(4096)))
    for c in clients.values():
        for _ in range(warm_up):
            await c.true()
            await c.health_rtt()
    return fs
