"""Wire messages <-> the daemon's plain values."""

from __future__ import annotations

from hostcap_proto.v1 import common_pb2, process_pb2

from hostcapd.config import LIMIT_NAMES, Limits
from hostcapd.process.report import Report, signal_name
from hostcapd.process.request import Prepared, SpawnRequest
from hostcapd.process.spawn import Spawn
from hostcapd.sandbox.profile import ProtectionStatus


def limits_from_wire(message: common_pb2.Limits) -> dict[str, float | int]:
    return {name: getattr(message, name) for name in LIMIT_NAMES if message.HasField(name)}


def limits_to_wire(limits: Limits) -> common_pb2.Limits:
    message = common_pb2.Limits()
    for name, value in limits:
        if value is not None:
            setattr(message, name, value)
    return message


def request_from_wire(message: process_pb2.SpawnRequest) -> SpawnRequest:
    return SpawnRequest(
        argv=tuple(message.argv),
        cwd=message.cwd,
        env=dict(message.env),
        stdin=message.stdin if message.HasField("stdin") else None,
        limits=limits_from_wire(message.limits),
        request_id=message.request_id,
        dry_run=message.dry_run,
        labels=dict(message.labels),
    )


def protections_to_wire(statuses: tuple[ProtectionStatus, ...]) -> list[common_pb2.Protection]:
    return [
        common_pb2.Protection(name=s.name, applied=s.applied, reason=s.reason, required=s.required)
        for s in statuses
    ]


def started_to_wire(
    request: SpawnRequest,
    p: Prepared,
    spawn_id: str = "",
    pid: int = 0,
    dry_run: bool = False,
    attached: bool = False,
) -> process_pb2.Started:
    return process_pb2.Started(
        spawn_id=spawn_id,
        pid=pid,
        executable=process_pb2.Executable(
            path=p.exe.path, device=p.exe.device, inode=p.exe.inode, sha256=p.exe.sha256
        ),
        limits=limits_to_wire(p.limits),
        protections=protections_to_wire(p.protections),
        cwd=p.cwd.path,
        env_names=sorted(p.env),
        dry_run=dry_run,
        attached=attached,
        request_id=request.request_id,
    )


def started_of(spawn: Spawn, attached: bool = False) -> process_pb2.Started:
    return started_to_wire(spawn.request, spawn.prepared, spawn.id, spawn.pid, attached=attached)


def exited_to_wire(spawn: Spawn, report: Report) -> process_pb2.Exited:
    exited = process_pb2.Exited(
        outcome=report.outcome.value,
        signal=report.signal,
        signal_name=signal_name(report.signal) if report.signal else "",
        message=report.message,
        failed_step=report.failed_step,
        errno=report.errno,
        rusage=common_pb2.Rusage(**report.rusage._asdict()),
        duration_seconds=report.duration,
        stdout=process_pb2.StreamStats(
            total_bytes=spawn.stdout.total,
            kept_bytes=spawn.stdout.kept,
            dropped_bytes=spawn.stdout.dropped,
        ),
        stderr=process_pb2.StreamStats(
            total_bytes=spawn.stderr.total,
            kept_bytes=spawn.stderr.kept,
            dropped_bytes=spawn.stderr.dropped,
        ),
        oom_kills=report.oom_kills,
    )
    if report.peak_memory_bytes is not None:
        exited.peak_memory_bytes = report.peak_memory_bytes
    if report.exit_code is not None:  # absent when a signal ended it
        exited.exit_code = report.exit_code
    return exited


def spawn_info(spawn: Spawn) -> process_pb2.SpawnInfo:
    return process_pb2.SpawnInfo(
        spawn_id=spawn.id,
        tenant=spawn.deps.tenant.name,
        pid=spawn.pid,
        argv=list(spawn.prepared.argv),
        age_seconds=spawn.age(),
        limits=limits_to_wire(spawn.prepared.limits),
        labels=dict(spawn.request.labels),
        request_id=spawn.request.request_id,
    )
