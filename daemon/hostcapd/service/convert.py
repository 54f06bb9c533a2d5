"""The channel's typed messages <-> the daemon's plain values."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, TypeVar

import msgspec

from hostcapd.applied import Applied
from hostcapd.bridge import messages
from hostcapd.config import LIMIT_NAMES, Limits
from hostcapd.process.environments import Environment
from hostcapd.process.report import Report, signal_name
from hostcapd.process.request import Prepared, SpawnRequest
from hostcapd.process.spawn import Spawn
from hostcapd.sandbox.profile import ProtectionStatus


def limits_from_call(limits: messages.Limits | None) -> dict[str, float | int]:
    if limits is None:
        return {}
    values = msgspec.structs.asdict(limits)
    return {name: values[name] for name in LIMIT_NAMES if values[name] is not None}


def limits_message(limits: Limits) -> messages.Limits:
    return messages.Limits(**{name: value for name, value in limits if value is not None})


K = TypeVar("K")
V = TypeVar("V")


def _once_per_object(cache: dict[int, tuple[K, V]], key: K, build: Callable[[K], V], cap: int) -> V:
    """`build(key)`, built once per object `key` (held in `cache` beside its
    result, so its id is not reused while cached; the cache is emptied at
    `cap` entries). Only for immutable keys whose result no reader mutates."""
    cached = cache.get(id(key))
    if cached is not None and cached[0] is key:
        return cached[1]
    if len(cache) >= cap:
        cache.clear()
    built = build(key)
    cache[id(key)] = (key, built)
    return built


#: A spawn's merged limits are one frozen model per set of values
#: (process/limits.py), so its message is built once for each.
_LIMITS: dict[int, tuple[Limits, messages.Limits]] = {}


def _limits_of(limits: Limits) -> messages.Limits:
    return _once_per_object(_LIMITS, limits, limits_message, 256)


def spawn_request(call: messages.SpawnCall, stdin: bytes | None) -> SpawnRequest:
    return SpawnRequest(
        argv=tuple(call.argv),
        cwd=call.cwd,
        env=dict(call.env),
        stdin=stdin,
        limits=limits_from_call(call.limits),
        request_id=call.request_id,
        dry_run=call.dry_run,
        labels=dict(call.labels),
        detached=call.detached,
        environment_id=call.environment_id,
        stdin_open=call.stdin_open,
        tty=(call.tty.rows, call.tty.cols) if call.tty is not None else None,
    )


def terminal_size(size: tuple[int, int] | None) -> messages.TerminalSize | None:
    return messages.TerminalSize(rows=size[0], cols=size[1]) if size is not None else None


def protections_message(
    statuses: Iterable[ProtectionStatus | Applied],
) -> list[messages.Protection]:
    return [
        messages.Protection(name=s.name, applied=s.applied, reason=s.reason, required=s.required)
        for s in statuses
    ]


#: A tenant's spawns share their profile's statuses (one tuple), so its
#: Started messages share one list (reloads make new profiles: at 64 the old go).
_PROTECTIONS: dict[int, tuple[tuple[ProtectionStatus, ...], list[messages.Protection]]] = {}


def _protections_of(statuses: tuple[ProtectionStatus, ...]) -> list[messages.Protection]:
    return _once_per_object(_PROTECTIONS, statuses, protections_message, 64)


def started_message(
    request: SpawnRequest,
    p: Prepared,
    spawn_id: str = "",
    pid: int = 0,
    dry_run: bool = False,
    attached: bool = False,
) -> messages.Started:
    return messages.Started(
        spawn_id=spawn_id,
        pid=pid,
        executable=messages.Executable(
            path=p.exe.path, device=p.exe.device, inode=p.exe.inode, sha256=p.exe.sha256
        ),
        limits=_limits_of(p.limits),
        protections=_protections_of(p.protections),
        cwd=p.cwd.path,
        env_names=sorted(p.env),
        dry_run=dry_run,
        attached=attached,
        request_id=request.request_id,
        stdin_open=request.input_open,
        tty=terminal_size(request.tty),
    )


def started_of(spawn: Spawn, attached: bool = False) -> messages.Started:
    return started_message(spawn.request, spawn.prepared, spawn.id, spawn.pid, attached=attached)


def exited_message(spawn: Spawn, report: Report) -> messages.Exited:
    return messages.Exited(
        outcome=report.outcome.value,
        # absent when a signal ended it
        exit_code=report.exit_code,
        signal=report.signal,
        signal_name=signal_name(report.signal) if report.signal else "",
        message=report.message,
        failed_step=report.failed_step,
        errno=report.errno,
        rusage=messages.Rusage(**report.rusage._asdict()),
        peak_memory_bytes=report.peak_memory_bytes,
        duration_seconds=report.duration,
        stdout=messages.StreamStats(
            total_bytes=spawn.out_counts.total,
            kept_bytes=spawn.out_counts.kept,
            dropped_bytes=spawn.out_counts.dropped,
        ),
        stderr=messages.StreamStats(
            total_bytes=spawn.err_counts.total,
            kept_bytes=spawn.err_counts.kept,
            dropped_bytes=spawn.err_counts.dropped,
        ),
        oom_kills=report.oom_kills,
        tty=terminal_size(spawn.tty_size),
        input_writes=spawn.input.writes if spawn.input is not None else 0,
        input_bytes=spawn.input.bytes if spawn.input is not None else 0,
    )


def spawn_info(spawn: Spawn, argv: list[str] | None = None) -> messages.SpawnInfo:
    return messages.SpawnInfo(
        spawn_id=spawn.id,
        tenant=spawn.deps.tenant.name,
        pid=spawn.pid,
        argv=list(spawn.prepared.argv) if argv is None else argv,
        age_seconds=spawn.age(),
        limits=_limits_of(spawn.prepared.limits),
        labels=dict(spawn.request.labels),
        request_id=spawn.request.request_id,
        detached=spawn.request.detached,
        environment_id=spawn.request.environment_id,
        stdin_open=spawn.input is not None and spawn.input.open,
        tty=terminal_size(spawn.tty_size),
    )


def environment_fields(env: Environment) -> dict[str, Any]:
    """An open environment, as EnvironmentInfo's fields."""
    return {
        "environment_id": env.id,
        "tenant": env.tenant,
        "idle_timeout_seconds": env.idle_timeout,
        "lifetime_seconds": env.lifetime,
        "age_seconds": env.age(),
        "idle_seconds": env.idle(),
        "spawn_ids": sorted(env.spawns),
        "labels": dict(env.labels),
    }
