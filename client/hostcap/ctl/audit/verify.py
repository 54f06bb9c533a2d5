"""``hostcapctl audit verify`` and ``audit export``: walking the hash chain of
the files or of an export, and writing an export that verify checks."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any, TextIO

from hostcap_proto.audit import (
    AuditFileError,
    FilterError,
    RecordReader,
    VerifyReport,
    resolve_spawn,
    tenants_of,
    unknown_tenant,
    verify_files,
)
from hostcap_proto.audit.export import ExportReport, export_lines, is_export, verify_export
from hostcap_proto.v1 import admin_pb2

from hostcap.ctl.audit.common import EXIT_BROKEN, EXIT_OK, _admin_socket, _error
from hostcap.ctl.audit.daemon import DaemonStreamError, _stub, daemon_records
from hostcap.ctl.audit.filters import QueryFilter
from hostcap.ctl.common import channel


def print_verify_report(report: VerifyReport, out: TextIO) -> None:
    """The human form of a verification report."""
    failure = report.failure
    if failure is not None:
        out.write(f"FAIL {failure}\n")
        if report.records:
            out.write(
                f"     {report.records} record(s) before it verified (seq up to {report.last_seq})\n"
            )
        return
    files = len(report.files)
    if report.records == 0:
        out.write(f"OK   no records in {files} file(s)\n")
    else:
        out.write(
            f"OK   {report.records} record(s), seq {report.first_seq}..{report.last_seq}, "
            f"{files} file(s), chain anchored at {report.anchor}\n"
            f"     last hash {report.last_hash}\n"
        )
    if report.anchor and report.anchor.startswith("rotation from "):
        previous = report.anchor.removeprefix("rotation from ")
        out.write(f"note: records before seq {report.first_seq} are in {previous} (not given)\n")
    if report.torn_tail is not None:
        torn = report.torn_tail
        out.write(
            f"note: {torn.path}:{torn.line}: torn final line ({torn.size} bytes) ignored "
            "(a write cut short by a crash)\n"
        )


def print_export_report(exported: ExportReport, out: TextIO) -> None:
    """The human form of an export's verification."""
    report = exported.report
    if report.failure is not None:
        out.write(f"FAIL {report.failure}\n")
        return
    chosen = ", ".join(f"{k}={v}" for k, v in sorted(exported.selection.items())) or "everything"
    out.write(
        f"OK   export of {report.records} record(s) ({chosen}), seq {report.first_seq}.."
        f"{report.last_seq}, anchored at {report.anchor}; {exported.omitted} record(s) left "
        f"out in {exported.runs} run(s), by their hashes\n"
        f"     last hash {report.last_hash}\n"
    )


def _cmd_verify(args: argparse.Namespace) -> int:
    if not args.files:
        return _error("give the audit file(s) to verify, e.g. audit.jsonl audit.jsonl.*")
    exports = [p for p in args.files if is_export(Path(p))]
    if exports:
        if len(args.files) > 1:
            return _error("verify an export on its own (it holds its chain, from first to last)")
        try:
            exported = verify_export(Path(exports[0]))
        except AuditFileError as error:
            return _error(str(error))
        if args.json:
            sys.stdout.write(
                json.dumps(
                    {
                        **exported.report.to_json(),
                        "omitted": exported.omitted,
                        "selection": dict(exported.selection),
                    },
                    sort_keys=True,
                )
                + "\n"
            )
        else:
            print_export_report(exported, sys.stdout)
        return EXIT_OK if exported.report.ok else EXIT_BROKEN
    try:
        report = verify_files([Path(p) for p in args.files])
    except AuditFileError as error:
        return _error(str(error))
    if args.json:
        sys.stdout.write(json.dumps(report.to_json(), sort_keys=True) + "\n")
    else:
        print_verify_report(report, sys.stdout)
    return EXIT_OK if report.ok else EXIT_BROKEN


# --- over the admin socket -------------------------------------------------------


def _cmd_export(args: argparse.Namespace) -> int:
    query = QueryFilter.from_args(args)
    if not query.selection():
        return _error("choose what to export (--tenant, --event, --spawn, --since, --until)")
    try:
        if args.file:
            files = [Path(p) for p in args.file]
            if query.spawn_id is not None:
                ids = (r.get("spawn_id") for r in RecordReader(files))
                query = replace(
                    query,
                    spawn_id=resolve_spawn(query.spawn_id, (i for i in ids if isinstance(i, str))),
                )
            return _write_export(RecordReader(files), query, args.output)
        socket = _admin_socket(args)
        if socket is None:
            return _error("give the audit file(s) with --file, or the daemon's --admin-socket")
        if query.spawn_id is not None:
            return _error("--spawn exports from the files (--file): give them")
        with channel(Path(socket)) as ch:
            # Every record: the ones left out give their hashes.
            everything = daemon_records(_stub(ch).QueryAudit(admin_pb2.QueryAuditRequest()))
            return _write_export(everything, query, args.output)
    except (AuditFileError, DaemonStreamError, FilterError) as error:
        return _error(str(error))


def _write_export(
    records: Iterable[Mapping[str, Any]], query: QueryFilter, output: str | None
) -> int:
    known: set[str] = set()

    def marked() -> Iterator[tuple[Mapping[str, Any], bool]]:
        for record, _, matched in query.classify(records):
            known.update(tenants_of(record))
            yield record, matched

    lines = list(export_lines(marked(), query.selection()))
    if query.tenant is not None and query.tenant not in known:
        raise unknown_tenant(query.tenant, known)
    if output is None or output == "-":
        sys.stdout.buffer.writelines(lines)
        sys.stdout.flush()
    else:
        with open(output, "xb") as f:
            f.writelines(lines)
    return EXIT_OK
