"""Prometheus metrics: what the daemon counts, and the endpoint that serves them.

Off unless the config has a `[metrics]` section (`--dev` turns it on at
`run/metrics.sock`). The endpoint is HTTP/1.1 `GET /metrics`, on a Unix
socket (owner root, the admin group, like the admin socket) or on an
explicit `127.0.0.1` port; never another address.

The call sites hold one line each (`metrics.spawn_ended(...)`,
`metrics.audit_record(...)`, ...); what is derived at scrape time (running
spawns, quotas, journal drops, deferred exit records) is read from the
daemon by `DaemonCollector`, so nothing is kept twice. Every hook is cheap
and never raises into the caller.
"""

from __future__ import annotations

import asyncio
import contextlib
import grp
import logging
import os
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from prometheus_client import CollectorRegistry, Counter, Histogram, ProcessCollector
from prometheus_client.exposition import choose_encoder
from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

if TYPE_CHECKING:
    from hostcapd.config import AdminSettings, MetricsSettings

log = logging.getLogger("hostcapd.metrics")

#: The daemon's own registry (not the library's global one).
REGISTRY = CollectorRegistry(auto_describe=True)
# The daemon process: CPU seconds, resident memory, open fds, start time.
ProcessCollector(namespace="hostcapd", registry=REGISTRY)

_LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
_DURATION_BUCKETS = (0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 3600.0)

SPAWNS = Counter(
    "hostcapd_spawns",
    "Spawns ended, by tenant and outcome (a hostcap.v1.Outcome name).",
    ("tenant", "outcome"),
    registry=REGISTRY,
)
SPAWN_DURATION = Histogram(
    "hostcapd_spawn_duration_seconds",
    "Wall time of ended spawns, exec to exit.",
    ("tenant",),
    buckets=_DURATION_BUCKETS,
    registry=REGISTRY,
)
SPAWN_SETUP = Histogram(
    "hostcapd_spawn_setup_seconds",
    "Set-up latency: the request admitted to the child exec'd (sandbox, cgroup, audit fsync).",
    ("tenant",),
    buckets=_LATENCY_BUCKETS,
    registry=REGISTRY,
)
REFUSALS = Counter(
    "hostcapd_refusals",
    "Calls of a tenant socket refused, by tenant, service and reason (an ErrorReason name).",
    ("tenant", "service", "reason"),
    registry=REGISTRY,
)
FS_OPERATIONS = Counter(
    "hostcapd_fs_operations",
    "FsService calls, by tenant, operation and result (OK, or the refusal's reason).",
    ("tenant", "op", "result"),
    registry=REGISTRY,
)
AUDIT_RECORDS = Counter(
    "hostcapd_audit_records",
    "Audit records written to the log, by event.",
    ("event",),
    registry=REGISTRY,
)
FSYNC = Histogram(
    "hostcapd_audit_fsync_seconds",
    "Latency of one audit log fsync (a group commit: one covers many records).",
    buckets=_LATENCY_BUCKETS,
    registry=REGISTRY,
)


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
    SPAWNS.labels(tenant, outcome).inc()
    if exec_time:
        SPAWN_DURATION.labels(tenant).observe(max(duration, 0.0))
        SPAWN_SETUP.labels(tenant).observe(max(exec_time - started_at, 0.0))


@_safe
def audit_record(event: str) -> None:
    """A record appended to the log (the writer)."""
    AUDIT_RECORDS.labels(event).inc()


@_safe
def fsync_done(seconds: float) -> None:
    """One fsync of the log finished (on the fsync thread)."""
    FSYNC.observe(seconds)


@_safe
def rpc_finished(tenant: str, service: str, method: str, result: str) -> None:
    """A call of a tenant socket ended: `result` OK, CANCELLED, or the reason
    it was refused with (frontend/handlers.py)."""
    if result not in ("OK", "CANCELLED"):
        REFUSALS.labels(tenant, service, result).inc()
    if service == "FsService":
        FS_OPERATIONS.labels(tenant, method, result).inc()


# --- what the daemon is read for at scrape time --------------------------------------


class _Runtime(Protocol):
    @property
    def name(self) -> str: ...

    spawns: dict[str, Any]
    tenant: Any


class DaemonView(Protocol):
    """What the collector reads of the daemon."""

    audit: Any

    def live_runtimes(self) -> Iterable[Any]: ...


class DaemonCollector(Collector):
    """Gauges read from the running daemon on each scrape."""

    def __init__(self, daemon: DaemonView) -> None:
        self.daemon = daemon

    def collect(self) -> Iterator[Metric]:
        running = GaugeMetricFamily(
            "hostcapd_spawns_running", "Spawns running now, by tenant.", labels=("tenant",)
        )
        quota = GaugeMetricFamily(
            "hostcapd_spawn_quota",
            "The tenant's max_concurrent_spawns (running / quota: the quota in use).",
            labels=("tenant",),
        )
        warm = GaugeMetricFamily(
            "hostcapd_warm_children",
            "Children set up ahead of need, waiting for a spawn (decision 0026).",
            labels=("tenant",),
        )
        warm_spawns = CounterMetricFamily(
            "hostcapd_warm_spawns",
            "Spawns that took a warm child (taken) or found none ready (missed); "
            "counted per config, so a reload of the tenant restarts it.",
            labels=("tenant", "result"),
        )
        counts: dict[str, int] = {}
        quotas: dict[str, int] = {}
        waiting: dict[str, int] = {}
        taken: dict[str, tuple[int, int]] = {}
        for runtime in self.daemon.live_runtimes():
            # A tenant a reload replaced drains beside its successor: both count.
            counts[runtime.name] = counts.get(runtime.name, 0) + len(runtime.spawns)
            if runtime.accepting or runtime.name not in quotas:
                quotas[runtime.name] = runtime.tenant.max_concurrent_spawns
                waiting[runtime.name] = len(runtime.warm)
                taken[runtime.name] = (runtime.warm.taken, runtime.warm.missed)
        for name in sorted(counts):
            running.add_metric((name,), counts[name])
            quota.add_metric((name,), quotas[name])
            warm.add_metric((name,), waiting.get(name, 0))
            hits, misses = taken.get(name, (0, 0))
            warm_spawns.add_metric((name, "taken"), hits)
            warm_spawns.add_metric((name, "missed"), misses)
        yield running
        yield quota
        yield warm
        yield warm_spawns
        audit = self.daemon.audit
        journal = getattr(audit, "journal", None) if audit is not None else None
        dropped = CounterMetricFamily(
            "hostcapd_journal_records_dropped",
            "Audit records the journal mirror could not hand to journald (the file has them).",
        )
        dropped.add_metric((), journal.dropped if journal is not None else 0)
        yield dropped
        deferred = GaugeMetricFamily(
            "hostcapd_audit_deferred_exit_records",
            "process.exit records waiting for the log to take records again.",
        )
        deferred.add_metric((), audit.deferred if audit is not None else 0)
        yield deferred


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
    encoder, content_type = choose_encoder(accept)
    return encoder(REGISTRY), content_type


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


_collectors: list[Collector] = []


async def serve(
    settings: MetricsSettings | None, admin: AdminSettings | None, daemon: DaemonView
) -> MetricsEndpoint | None:
    """Start the endpoint the config asks for (None: metrics are off)."""
    if settings is None:
        return None
    for previous in _collectors:  # one daemon per process; a test may start several
        with contextlib.suppress(KeyError):
            REGISTRY.unregister(previous)
    _collectors.clear()
    collector = DaemonCollector(daemon)
    REGISTRY.register(collector)
    _collectors.append(collector)
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
