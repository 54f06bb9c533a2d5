"""The gRPC server settings of a front-end (a light module: a front-end
imports it before anything else of the daemon)."""

from __future__ import annotations

from typing import Any, Protocol

from grpc_health.v1 import health, health_pb2

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


def server_options(max_receive: int, max_send: int) -> list[tuple[str, Any]]:
    return [
        ("grpc.max_receive_message_length", max_receive),
        ("grpc.max_send_message_length", max_send),
        ("grpc.so_reuseport", 0),
        *KEEPALIVE,
    ]


#: The trailing metadata of a Check reply that is not SERVING: why (UTF-8).
REASON_KEY = "hostcap-health-reason-bin"


class HealthReporter(Protocol):
    """The asyncio health servicer (grpc_health.v1.health.aio.HealthServicer)."""

    async def set(self, service: str, status: int) -> None: ...

    async def enter_graceful_shutdown(self) -> None: ...

    async def report(self, reason: str, service: str = "") -> None: ...


# grpc-stubs describe only the thread-based health servicer.
class ReasonedHealth(health.aio.HealthServicer):  # type: ignore[misc,name-defined]
    """grpc.health.v1 with the reason a service is not serving, in the
    Check reply's trailing metadata (REASON_KEY): the protocol has no
    field for it, and a plain client still reads the status."""

    def __init__(self) -> None:
        super().__init__()
        self.reason = ""
        #: The reasons of services reported one by one (`report(..., service)`).
        self.reasons: dict[str, str] = {}

    async def Check(self, request: Any, context: Any) -> Any:
        reply = await super().Check(request, context)
        reason = self.reasons.get(request.service, self.reason)
        if reason and reply.status != health_pb2.HealthCheckResponse.SERVING:
            context.set_trailing_metadata(((REASON_KEY, reason.encode()),))
        return reply

    async def report(self, reason: str, service: str = "") -> None:
        """Every service (or the one named) SERVING (`reason` empty) or
        NOT_SERVING, saying why."""
        status = (
            health_pb2.HealthCheckResponse.NOT_SERVING
            if reason
            else health_pb2.HealthCheckResponse.SERVING
        )
        if service:
            self.reasons[service] = reason
            await self.set(service, status)
            return
        self.reason = reason
        for name in list(self._server_status):
            if name not in self.reasons:
                await self.set(name, status)

    async def enter_graceful_shutdown(self) -> None:
        self.reason = self.reason or "the daemon is stopping"
        await super().enter_graceful_shutdown()


def new_health() -> HealthReporter:
    return ReasonedHealth()
