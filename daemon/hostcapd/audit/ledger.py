"""The job ledger: the spawns exec'd and not yet exited, rebuilt at start-up
from the current file, the audit.rotate header and the rotated files."""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from hostcap_proto.audit import AuditRecordError, open_audit_file, parse_line

from hostcapd.audit.errors import AuditUnavailable
from hostcapd.audit.files import rotated_files, rotated_seq

# Cheap pre-filter for the ledger scan: canonical JSON writes the top-level
# event as exactly this (a nested "event" key is checked after parsing).
SPAWN_EVENT_MARK = b'"event":"process.ex'


def summary(record: Mapping[str, Any]) -> dict[str, Any]:
    """What an audit.rotate header carries of an open spawn."""
    summary = {
        "spawn_id": record["spawn_id"],
        "tenant": record["tenant"],
        "labels": dict(record.get("labels", {})),
        "exec_seq": record.get("exec_seq", record.get("seq")),
    }
    if record.get("request_id") is not None:
        summary["request_id"] = record["request_id"]
    return summary


def file_ledger(path: Path) -> dict[str, dict[str, Any]]:
    """Spawns exec'd and not exited as of the end of `path`: full process.exec
    records, or the summaries its audit.rotate header carries from before."""
    ledger: dict[str, dict[str, Any]] = {}
    try:
        with open_audit_file(path) as f:
            for number, raw in enumerate(f, 1):
                if not raw.endswith(b"\n"):
                    break
                if number == 1 and b'"event":"audit.rotate"' in raw:
                    with contextlib.suppress(AuditRecordError):
                        header = parse_line(raw[:-1])
                        for spawn in header.get("open_spawns", []):
                            ledger[spawn["spawn_id"]] = dict(spawn)
                    continue
                if SPAWN_EVENT_MARK not in raw:
                    continue
                try:
                    record = parse_line(raw[:-1])
                except AuditRecordError:
                    continue
                spawn_id = record.get("spawn_id")
                if record.get("event") == "process.exec" and spawn_id:
                    ledger[spawn_id] = record
                elif record.get("event") == "process.exit" and spawn_id:
                    ledger.pop(spawn_id, None)
    except OSError as error:
        raise AuditUnavailable(f"cannot read {path}: {error.strerror}") from None
    return ledger


def resolve_summaries(ledger: dict[str, dict[str, Any]], log_path: Path) -> None:
    """Replace header summaries by the full process.exec records, reading only
    the rotated files that hold them (a file's name is its last seq)."""
    wanted = {sid: r["exec_seq"] for sid, r in ledger.items() if "exec_seq" in r}
    if not wanted:
        return
    files = [(rotated_seq(p), p) for p in rotated_files(log_path)]
    by_file: dict[Path, set[str]] = {}
    for spawn_id, exec_seq in wanted.items():
        holder = next((p for last, p in files if last >= exec_seq), None)
        if holder is not None:
            by_file.setdefault(holder, set()).add(spawn_id)
    for path, spawn_ids in by_file.items():
        with contextlib.suppress(OSError, EOFError), open_audit_file(path) as f:
            for raw in f:
                if SPAWN_EVENT_MARK not in raw or not raw.endswith(b"\n"):
                    continue
                try:
                    record = parse_line(raw[:-1])
                except AuditRecordError:
                    continue
                if record.get("event") == "process.exec" and record.get("spawn_id") in spawn_ids:
                    ledger[record["spawn_id"]] = record


def orphan_exit(spawn: Mapping[str, Any], reason_message: str) -> dict[str, Any]:
    """The process.exit fields that close an open spawn (a ledger entry) with
    outcome DAEMON_SHUTDOWN."""
    fields: dict[str, Any] = {
        "tenant": spawn["tenant"],
        "spawn_id": spawn["spawn_id"],
        "labels": spawn.get("labels", {}),
        "outcome": "DAEMON_SHUTDOWN",
        "message": reason_message,
    }
    for key in ("request_id", "pid"):
        if spawn.get(key) is not None:
            fields[key] = spawn[key]
    return fields
