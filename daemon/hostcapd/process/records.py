"""The two audit records of a spawn: `process.exec`, written ahead of the
exec (no record, no exec), and `process.exit`, which closes it. Both carry
the same correlation fields; their schemas are in hostcap_proto.audit.

Both are built in the form their model dumps them to (no None, every
default present, exact builtin types) from values checked before (the
request by the channel's decoding and `hostcapd.process.request`, the rest
the daemon's own), and written with `AuditLog.write_built`, which does not
validate them again: tests/unit/audit/test_built_records.py holds these
builders to the models."""

from __future__ import annotations

import hashlib
import logging
import math
from typing import Any

from hostcap_proto.audit import fast_encodable

from hostcapd.audit import AuditLog, AuditUnavailable
from hostcapd.audit.built import Built
from hostcapd.audit.redact import MAX_ARG_CHARS, bound_argv
from hostcapd.callers import caller_field
from hostcapd.config import Tenant
from hostcapd.logsetup import fields
from hostcapd.process import limits as limits_mod
from hostcapd.process.output import StreamCount, StreamTally
from hostcapd.process.report import Report, signal_name
from hostcapd.process.request import Prepared, SpawnRequest
from hostcapd.sandbox.fschanges import Changes
from hostcapd.sandbox.profile import ProtectionStatus

log = logging.getLogger("hostcapd.spawn")


def _correlation(tenant: str, spawn_id: str, request: SpawnRequest) -> dict[str, Any]:
    return {
        "tenant": tenant,
        "spawn_id": spawn_id,
        "request_id": request.request_id,
        "labels": dict(request.labels),
    }


def exec_record(tenant: Tenant, spawn_id: str, request: SpawnRequest, p: Prepared) -> Built:
    """What will run, as decided: the fields of `process.exec`, as built
    fields (`AuditLog.write_built`), with the current call's caller. Its
    floats are the limits'."""
    limits, plain = limits_mod.dumped_plain(p.limits)
    fields = {
        **_correlation(tenant.name, spawn_id, request),
        "argv": list(p.argv),
        "env_names": sorted(p.env),
        "executable": {
            "path": p.exe.path,
            "sha256": p.exe.sha256,
            "device": p.exe.device,
            "inode": p.exe.inode,
        },
        "cwd": p.cwd.path,
        "uid": tenant.uid,
        "gid": tenant.gid,
        "limits": limits,
        "protections": _protections(p.protections),
        **caller_field(),
    }
    return Built(fields, plain=plain)


#: The last protections' records: a runtime's statuses are one tuple, which
#: every exec record of its spawns lists alike (the writer and the ledger
#: only read it).
_LAST_PROTECTIONS: list[tuple[tuple[ProtectionStatus, ...], list[dict[str, Any]]]] = []


def _protections(statuses: tuple[ProtectionStatus, ...]) -> list[dict[str, Any]]:
    for known, listed in _LAST_PROTECTIONS:
        if known is statuses:
            return listed
    listed = [{"name": s.name, "applied": s.applied, "reason": s.reason} for s in statuses]
    _LAST_PROTECTIONS[:] = [(statuses, listed), *_LAST_PROTECTIONS[:7]]
    return listed


def _bounded(text: str) -> str:
    """A path as asked for, cut like an argv element (head and tail kept)."""
    return text if len(text) <= MAX_ARG_CHARS else bound_argv([text])[0][0]


def refused_record(request: SpawnRequest, prepared: Prepared | None) -> dict[str, Any]:
    """What a refused spawn asked for, for its `policy.deny`: the argv (the
    writer redacts and bounds it, and records its digest), the executable
    as resolved (when resolution got that far, else argv[0] as asked), the
    cwd (resolved, else as asked) and the limits asked for (the finite
    ones: a NaN is no JSON, and the message says what was wrong with it)."""
    fields: dict[str, Any] = {
        "argv": list(request.argv),
        "limits_requested": {
            name: value
            for name, value in request.limits.items()
            if isinstance(value, int | float) and math.isfinite(value)
        },
    }
    if prepared is not None:
        exe = prepared.exe
        fields["executable"] = {
            "path": exe.path,
            "sha256": exe.sha256,
            "device": exe.device,
            "inode": exe.inode,
        }
        fields["cwd"] = prepared.cwd.path
    else:
        if request.argv:
            fields["executable_requested"] = _bounded(request.argv[0])
        if request.cwd:
            fields["cwd"] = _bounded(request.cwd)
    return fields


def _stream(buf: StreamTally | StreamCount) -> dict[str, int]:
    return {"total": buf.total, "kept": buf.kept, "dropped": buf.dropped}


def exit_record(
    tenant: str,
    spawn_id: str,
    request: SpawnRequest,
    pid: int,
    report: Report,
    stdout: StreamTally | StreamCount,
    stderr: StreamTally | StreamCount,
    *,
    tty: tuple[int, int] | None = None,
    input_counts: tuple[int, int] | None = None,
) -> Built:
    """How it ended: the fields of `process.exit` (with its terminal's last
    size and the count and bytes of its input writes, when it had them), as
    built fields (`AuditLog.write_built`: what is unknown is left out). Its
    floats are the rusage's and the duration."""
    rusage = report.rusage._asdict()
    duration = round(report.duration, 6)
    record: dict[str, Any] = {
        **_correlation(tenant, spawn_id, request),
        "pid": pid,
        "outcome": report.outcome.value,
        "signal": report.signal,
        "message": report.message,
        "rusage": rusage,
        "oom_kills": report.oom_kills,
        "duration_s": duration,
        "stdout": _stream(stdout),
        "stderr": _stream(stderr),
    }
    if report.signal:
        record["signal_name"] = signal_name(report.signal)
    if report.peak_memory_bytes is not None:
        record["peak_memory_bytes"] = report.peak_memory_bytes
    if tty is not None:
        record["tty"] = {"rows": tty[0], "cols": tty[1]}
    if input_counts is not None:
        record["input_writes"], record["input_bytes"] = input_counts
    if report.exit_code is not None:  # absent when a signal ended it
        record["exit_code"] = report.exit_code
    if report.failed_step:
        record["failed_step"] = report.failed_step
        record["errno"] = report.errno
    return Built(record, plain=fast_encodable(rusage, {"duration_s": duration}))


def changes_record(
    tenant: str,
    spawn_id: str,
    request: SpawnRequest,
    listed: list[dict[str, Any]],
    changes: Changes,
) -> dict[str, Any]:
    """What the spawn changed beneath the tenant's roots: `fs.changes`."""
    beyond = sum(changes.beyond.values())
    return {
        **_correlation(tenant, spawn_id, request),
        "changes": listed,
        "paths_listed": len(listed),
        "events_beyond": dict(sorted(changes.beyond.items())),
        "truncated": beyond > 0,
        "unresolved_events": changes.unresolved,
        "unattributed_events": changes.unattributed,
        "queue_overflows": changes.queue_overflows,
        "complete": not (changes.unresolved or changes.unattributed or changes.queue_overflows)
        and changes.tracking,
    }


def write_exit(audit: AuditLog, spawn_id: str, record: Built) -> None:
    """Append the exit record, or queue it when the log has no room (it is
    written once the log takes records again); never raises."""
    try:
        if not audit.write_built_or_defer("process.exit", record):
            log.error(
                "no room for the exit record of spawn %s: kept, written once the "
                "audit log takes records again",
                spawn_id,
            )
    except AuditUnavailable as error:
        log.error(
            "could not audit the exit of spawn %s: %s",
            spawn_id,
            error,
            extra=fields(spawn_id=spawn_id),
        )


def input_record(
    tenant: str, spawn_id: str, request: SpawnRequest, index: int, data: bytes, close: bool
) -> dict[str, Any]:
    """One WriteStdin, written before its bytes are: `process.input`. The
    writer redacts and cuts `text` (the audit's secret rules, its cap)."""
    return {
        **_correlation(tenant, spawn_id, request),
        "index": index,
        "bytes": len(data),
        "sha256": hashlib.sha256(data).hexdigest(),
        "text": data.decode("utf-8", "backslashreplace"),
        "close": close,
        "tty": request.tty is not None,
    }
