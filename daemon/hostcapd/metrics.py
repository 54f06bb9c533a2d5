"""Prometheus metrics: what the daemon counts, and the endpoint that serves them.

Off unless the config has a `[metrics]` section (`--dev` turns it on at
`run/metrics.sock`). The endpoint is HTTP/1.1 `GET /metrics`, on a Unix
socket (owner root, the admin group, like the admin socket) or on an
explicit `127.0.0.1` port; never another address. The same endpoint answers
`GET /healthz` with `ok` from the daemon's event loop, rendering nothing: the
container probes' liveness check (deploy/, docs/deploy.md), cheap enough to
ask every few seconds without starting an interpreter.

The call sites hold one line each (`metrics.spawn_ended(...)`,
`metrics.audit_record(...)`, ...); what is derived at scrape time (running
spawns, quotas, journal drops, deferred exit records) is read from the
daemon by `DaemonCollector`, so nothing is kept twice. Every hook is cheap
and never raises into the caller.

`prometheus_client` and the metrics themselves (`hostcapd.metrics_registry`)
are loaded when the endpoint starts: with metrics off (the default) the
daemon does not carry them (4.4 MiB of its idle RSS), and each hook is one
check. Metrics are on or off for a daemon's whole run (a reload cannot
change `[metrics]`), so every count starts with the run.
"""

from __future__ import annotations

import asyncio
import contextlib
import grp
import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from hostcapd import metrics_registry
    from hostcapd.config import AdminSettings, MetricsSettings

log = logging.getLogger("hostcapd.metrics")

#: The probes' path: answered by the event loop itself (a hung loop does not answer).
HEALTH_PATH = "/healthz"
#: The loaded metrics once the endpoint started; None while metrics are off.
_live: metrics_registry.Metrics | None = None


def _safe(hook: Callable[..., None]) -> Callable[..., None]:
    """A metric hook never fails its call site."""

    def run(*args: Any, **kwargs: Any) -> None:
        try:
            hook(*args, **kwargs)
        except Exception:  # pragma: no cover - a bug here must not cost a spawn
            log.exception("metrics hook %s failed", hook.__name__)

    run.__name__ = hook.__name__
    return run


# --- hooks (one line at each call site) -------------------------------------------


@_safe
def spawn_ended(
    tenant: str, outcome: str, duration: float, started_at: float, exec_time: float | None
) -> None:
    """A spawn's exit (process/spawn.py, where its process.exit is written)."""
    m = _live
    if m is None:
        return
    m.spawns.labels(tenant, outcome).inc()
    if exec_time:
        m.spawn_duration.labels(tenant).observe(max(duration, 0.0))
        m.spawn_setup.labels(tenant).observe(max(exec_time - started_at, 0.0))


@_safe
def spawn_started(tenant: str) -> None:
    """A spawn admitted and started (tenant.py); it ends in `spawn_ended`."""
    m = _live
    if m is not None:
        m.spawns_started.labels(tenant).inc()


@_safe
def audit_error(operation: str) -> None:
    """An audit log `write` or `fsync` failed (the writer)."""
    m = _live
    if m is not None:
        m.audit_errors.labels(operation).inc()


@_safe
def audit_record(event: str) -> None:
    """A record appended to the log (the writer)."""
    m = _live
    if m is not None:
        m.audit_records.labels(event).inc()


@_safe
def fsync_done(seconds: float) -> None:
    """One fsync of the log finished (on the fsync thread)."""
    m = _live
    if m is not None:
        m.fsync.observe(seconds)


@_safe
def rpc_finished(tenant: str, service: str, method: str, result: str, calls: int = 1) -> None:
    """A call of a tenant socket ended (or `calls` of them, counted by the
    fs worker: decision 0034): `result` OK, CANCELLED, or the reason it was
    refused with."""
    m = _live
    if m is None:
        return
    if result not in ("OK", "CANCELLED"):
        m.refusals.labels(tenant, service, result).inc(calls)
    if service == "FsService":
        m.fs_operations.labels(tenant, method, result).inc(calls)


@_safe
def count_egress(tenant: str, decision: str, bytes_up: int, bytes_down: int) -> None:
    """A connection through a tenant's egress proxy ended (egress/supervisor.py)."""
    m = _live
    if m is None:
        return
    m.egress_connections.labels(tenant, decision).inc()
    m.egress_bytes.labels(tenant, "up").inc(max(bytes_up, 0))
    m.egress_bytes.labels(tenant, "down").inc(max(bytes_down, 0))


# --- the endpoint --------------------------------------------------------------------

#: A request head larger than this is refused (a scraper's is a few hundred bytes).
MAX_REQUEST_BYTES = 8192
#: Seconds a client has to send its request.
REQUEST_TIMEOUT_S = 10.0


def socket_access(admin: AdminSettings | None) -> tuple[int, int]:
    """(gid, mode) of the metrics socket: the admin socket's group and mode
    when there is one (root and the admin group), else root's alone."""
    if admin is None or admin.group is None:
        return 0, 0o600
    if isinstance(admin.group, int):
        return admin.group, 0o660
    try:
        return grp.getgrnam(admin.group).gr_gid, 0o660
    except KeyError:  # check_config refuses this before the endpoint starts
        return 0, 0o600


def render(accept: str = "") -> tuple[bytes, str]:
    """The exposition (Prometheus text, or OpenMetrics when asked for) and its type."""
    assert _live is not None, "the endpoint serves only once the metrics are loaded"
    return _live.render(accept)


async def _answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), REQUEST_TIMEOUT_S)
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, TimeoutError):
            return
        lines = head.decode("latin-1").split("\r\n")
        parts = lines[0].split(" ")
        headers = {}
        for line in lines[1:]:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        if len(parts) != 3 or not parts[2].startswith("HTTP/"):
            status, body, ctype = "400 Bad Request", b"bad request\n", "text/plain"
        elif parts[0] != "GET":
            status, body, ctype = "405 Method Not Allowed", b"GET /metrics\n", "text/plain"
        elif parts[1].split("?")[0] == HEALTH_PATH:
            status, body, ctype = "200 OK", b"ok\n", "text/plain"
        elif parts[1].split("?")[0] != "/metrics":
            status, body, ctype = "404 Not Found", b"GET /metrics\n", "text/plain"
        else:
            status = "200 OK"
            body, ctype = render(headers.get("accept", ""))
        writer.write(
            f"HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode("latin-1")
            + body
        )
        await writer.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        writer.close()
        with contextlib.suppress(ConnectionError, OSError):
            await writer.wait_closed()


class MetricsEndpoint:
    """The running endpoint; `close()` stops it and removes its socket."""

    def __init__(self, server: asyncio.Server, path: Path | None, where: str) -> None:
        self.server = server
        self.path = path
        self.where = where
        self._id: tuple[int, int] | None = None
        if path is not None:
            st = path.lstat()
            self._id = (st.st_dev, st.st_ino)

    async def close(self) -> None:
        self.server.close()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self.server.wait_closed(), 2)
        if self.path is not None and self._id is not None:
            with contextlib.suppress(FileNotFoundError):
                st = self.path.lstat()
                if (st.st_dev, st.st_ino) == self._id:
                    self.path.unlink()


async def serve(
    settings: MetricsSettings | None,
    admin: AdminSettings | None,
    daemon: metrics_registry.DaemonView,
) -> MetricsEndpoint | None:
    """Load the metrics and start the endpoint the config asks for (None:
    metrics are off, and nothing of them is loaded)."""
    global _live
    if settings is None:
        return None
    from hostcapd import metrics_registry

    if _live is None:
        _live = metrics_registry.Metrics()
    _live.read_from(daemon)  # one daemon per process; a test may start several
    if settings.socket is not None:
        path = settings.socket
        path.parent.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
        gid, mode = socket_access(admin)
        old = os.umask(0o077)
        try:
            server = await asyncio.start_unix_server(_answer, path=str(path))
        finally:
            os.umask(old)
        os.chmod(path, mode)
        if os.geteuid() == 0:
            os.chown(path, 0, gid)
        return MetricsEndpoint(server, path, f"unix:{path}")
    assert settings.port is not None
    server = await asyncio.start_server(_answer, host=settings.host, port=settings.port)
    port = server.sockets[0].getsockname()[1]
    return MetricsEndpoint(server, None, f"http://127.0.0.1:{port}/metrics")
