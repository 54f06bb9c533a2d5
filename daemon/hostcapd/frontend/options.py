"""The gRPC server settings of a front-end (a light module: a front-end
imports it before anything else of the daemon)."""

from __future__ import annotations

from typing import Any, Protocol

from grpc_health.v1 import health

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


class HealthReporter(Protocol):
    """The asyncio health servicer (grpc_health.v1.health.aio.HealthServicer)."""

    async def set(self, service: str, status: int) -> None: ...

    async def enter_graceful_shutdown(self) -> None: ...


def new_health() -> HealthReporter:
    # grpc-stubs describe only the thread-based health servicer.
    servicer: HealthReporter = health.aio.HealthServicer()  # type: ignore[attr-defined]
    return servicer
