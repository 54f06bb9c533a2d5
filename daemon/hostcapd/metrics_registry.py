"""The metrics themselves: prometheus_client's registry, the counters the
hooks of `hostcapd.metrics` move, and the collector that reads the running
daemon at scrape time. Imported only when the endpoint starts (metrics on).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable, Iterator
from typing import Any, Protocol

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    ProcessCollector,
    disable_created_metrics,
)
from prometheus_client.exposition import choose_encoder
from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from hostcapd import __commit__, __version__

# A counter's `_created` series doubles every series and no alert reads it.
disable_created_metrics()  # type: ignore[no-untyped-call]

_LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
_DURATION_BUCKETS = (0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 3600.0)


class Metrics:
    """The daemon's own registry (not the library's global one) and its metrics."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        # The daemon process under the standard names (process_cpu_seconds_total,
        # process_resident_memory_bytes, process_open_fds, process_start_time_seconds).
        ProcessCollector(registry=self.registry)
        r = self.registry
        Gauge(
            "hostcapd_build_info",
            "The running build: its version and the commit it was built from (always 1).",
            ("version", "commit"),
            registry=r,
        ).labels(__version__, __commit__).set(1)
        self.spawns_started = Counter(
            "hostcapd_spawns_started",
            "Spawns admitted and started, by tenant (each ends once in hostcapd_spawns_total).",
            ("tenant",),
            registry=r,
        )
        self.spawns = Counter(
            "hostcapd_spawns",
            "Spawns ended, by tenant and outcome (a hostcap.v1.Outcome name).",
            ("tenant", "outcome"),
            registry=r,
        )
        self.spawn_duration = Histogram(
            "hostcapd_spawn_duration_seconds",
            "Wall time of ended spawns, exec to exit.",
            ("tenant",),
            buckets=_DURATION_BUCKETS,
            registry=r,
        )
        self.spawn_setup = Histogram(
            "hostcapd_spawn_setup_seconds",
            "Set-up latency: the request admitted to the child exec'd (sandbox, cgroup, audit fsync).",
            ("tenant",),
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.refusals = Counter(
            "hostcapd_refusals",
            "Calls of a tenant socket refused, by tenant, service and reason (an ErrorReason name).",
            ("tenant", "service", "reason"),
            registry=r,
        )
        self.egress_connections = Counter(
            "hostcapd_egress_connections",
            "Connections asked of the egress proxies, by tenant and decision (allowed, denied).",
            ("tenant", "decision"),
            registry=r,
        )
        self.egress_bytes = Counter(
            "hostcapd_egress_bytes",
            "Bytes relayed by the egress proxies, by tenant and direction (up, down).",
            ("tenant", "direction"),
            registry=r,
        )
        self.fs_operations = Counter(
            "hostcapd_fs_operations",
            "FsService calls, by tenant, operation and result (OK, or the refusal's reason).",
            ("tenant", "op", "result"),
            registry=r,
        )
        self.audit_records = Counter(
            "hostcapd_audit_records",
            "Audit records written to the log, by event.",
            ("event",),
            registry=r,
        )
        self.audit_errors = Counter(
            "hostcapd_audit_errors",
            "Audit log writes and fsyncs that failed (a failed fsync closes the log until restart).",
            ("operation",),
            registry=r,
        )
        for operation in ("write", "fsync"):
            self.audit_errors.labels(operation)
        self.fsync = Histogram(
            "hostcapd_audit_fsync_seconds",
            "Latency of one audit log fsync (a group commit: one covers many records).",
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self._collector: Collector | None = None

    def read_from(self, daemon: DaemonView) -> None:
        """Collect the gauges of `daemon` at each scrape (instead of any before)."""
        if self._collector is not None:
            with contextlib.suppress(KeyError):
                self.registry.unregister(self._collector)
        self._collector = DaemonCollector(daemon)
        self.registry.register(self._collector)

    def render(self, accept: str) -> tuple[bytes, str]:
        encoder, content_type = choose_encoder(accept)
        return encoder(self.registry), content_type


# --- what the daemon is read for at scrape time --------------------------------------


class _Runtime(Protocol):
    @property
    def name(self) -> str: ...

    spawns: dict[str, Any]
    tenant: Any


class DaemonView(Protocol):
    """What the collector reads of the daemon."""

    audit: Any
    reloads: Any

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
        detached = GaugeMetricFamily(
            "hostcapd_detached_output_bytes",
            "Output bytes the tenant's detached spawns' buffers hold (issue 30): its cost.",
            labels=("tenant",),
        )
        held: dict[str, int] = {}
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
                # One table per tenant, shared by a reload's old and new runtime.
                held[runtime.name] = runtime.detached.held_bytes()
        for name in sorted(counts):
            running.add_metric((name,), counts[name])
            quota.add_metric((name,), quotas[name])
            warm.add_metric((name,), waiting.get(name, 0))
            hits, misses = taken.get(name, (0, 0))
            warm_spawns.add_metric((name, "taken"), hits)
            warm_spawns.add_metric((name, "missed"), misses)
            detached.add_metric((name,), held.get(name, 0))
        yield running
        yield quota
        yield warm
        yield warm_spawns
        yield detached
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
        yield from self._reloads()
        if audit is not None:
            yield from _audit_volume(audit.path.parent)

    def _reloads(self) -> Iterator[Metric]:
        reloads = getattr(self.daemon, "reloads", None)
        if reloads is None:
            return
        ok = GaugeMetricFamily(
            "hostcapd_config_last_reload_successful",
            "Whether the last config reload was applied (1) or refused (0); 1 from start-up.",
        )
        ok.add_metric((), 1 if reloads.last_successful else 0)
        yield ok
        at = GaugeMetricFamily(
            "hostcapd_config_last_reload_success_timestamp_seconds",
            "When the config serving now was applied (start-up or the last applied reload).",
        )
        at.add_metric((), reloads.last_success_time)
        yield at


def _audit_volume(directory: Any) -> Iterator[Metric]:
    """Bytes the daemon may still write on the audit log's volume (as root,
    the file system's root reserve included)."""
    try:
        st = os.statvfs(directory)
    except OSError:
        return
    free = GaugeMetricFamily(
        "hostcapd_audit_volume_free_bytes",
        "Free bytes on the audit log's volume for the daemon (0: spawns are refused).",
    )
    blocks = st.f_bfree if os.geteuid() == 0 else st.f_bavail
    free.add_metric((), blocks * st.f_frsize)
    yield free
