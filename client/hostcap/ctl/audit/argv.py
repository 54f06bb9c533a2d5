"""``hostcapctl audit verify-argv``: is an argv the one a record was written
for (by its argv_sha256)?"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from hostcap_proto.audit import AuditFileError, RecordReader, argv_sha256
from hostcap_proto.v1 import admin_pb2

from hostcap.ctl.audit.common import EXIT_BROKEN, EXIT_OK, _admin_socket, _error
from hostcap.ctl.audit.daemon import DaemonStreamError, _stub, daemon_records
from hostcap.ctl.audit.table import _printable
from hostcap.ctl.common import channel


def argv_record(
    records: Iterable[Mapping[str, Any]], *, seq: int | None = None, spawn_id: str | None = None
) -> Mapping[str, Any] | None:
    """The record holding the argv to check: the one with `seq`, or the
    process.exec of `spawn_id`."""
    for record in records:
        if seq is not None and record.get("seq") == seq:
            return record
        if (
            spawn_id is not None
            and record.get("event") == "process.exec"
            and record.get("spawn_id") == spawn_id
        ):
            return record
    return None


def check_argv(record: Mapping[str, Any], argv: list[str]) -> tuple[bool, str]:
    """Whether `argv` is the argv `record` (process.exec, or a policy.deny
    of a spawn) was written for, by its argv_sha256; and a line saying so."""
    where = f"seq {record.get('seq')} ({record.get('event')})"
    digest = record.get("argv_sha256")
    if not isinstance(digest, str):
        return (
            False,
            f"{where} holds no argv_sha256 (written before the digest existed, or no argv)",
        )
    given = argv_sha256(argv)
    notes = [
        note
        for flag, note in (("argv_redacted", "redacted"), ("argv_truncated", "cut"))
        if record.get(flag)
    ]
    stored = f"; the stored argv is {' and '.join(notes)}" if notes else ""
    if given == digest:
        return True, f"OK   the argv given is the argv of {where}: sha256 {digest}{stored}"
    return False, f"FAIL the argv given is not the argv of {where}: sha256 {given}, record {digest}"


def _cmd_verify_argv(args: argparse.Namespace) -> int:
    if (args.seq is None) == (args.spawn is None):
        return _error("give the record with exactly one of --seq N or --spawn ID")
    if args.argv_json is not None:
        try:
            argv = json.loads(args.argv_json)
        except json.JSONDecodeError as error:
            return _error(f"--argv-json is not JSON: {error}")
        if not isinstance(argv, list) or not all(isinstance(a, str) for a in argv):
            return _error("--argv-json must be a JSON array of strings")
    else:
        argv = list(args.argv)
        if argv and argv[0] == "--":
            argv = argv[1:]
    if not argv:
        return _error("give the argv to check after --, or as --argv-json '[...]'")
    try:
        if args.file:
            record = argv_record(
                RecordReader([Path(p) for p in args.file]), seq=args.seq, spawn_id=args.spawn
            )
        else:
            socket = _admin_socket(args)
            if socket is None:
                return _error("give the audit file(s) with --file, or the daemon's --admin-socket")
            with channel(Path(socket)) as ch:
                request = admin_pb2.QueryAuditRequest(spawn_id=args.spawn or "")
                record = argv_record(
                    daemon_records(_stub(ch).QueryAudit(request)), seq=args.seq, spawn_id=args.spawn
                )
    except (AuditFileError, DaemonStreamError) as error:
        return _error(str(error))
    if record is None:
        which = (
            f"seq {args.seq}" if args.seq is not None else f"a process.exec of spawn {args.spawn}"
        )
        return _error(f"no record is {which}")
    ok, line = check_argv(record, argv)
    sys.stdout.write(_printable(line) + "\n")
    return EXIT_OK if ok else EXIT_BROKEN
