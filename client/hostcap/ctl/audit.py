"""``hostcapctl audit``: verify, query and tail the audit log.

    hostcapctl audit verify /var/log/hostcap/audit.jsonl*
    hostcapctl audit query --file audit.jsonl --tenant dev --since 1h --event 'process.*'
    hostcapctl audit tail --file audit.jsonl -n 20

With ``--file`` (and always for ``verify``) these read the files directly: no
socket, no daemon. Without ``--file`` and with ``--admin-socket``, ``query``
and ``tail`` ask the daemon instead, and ``tail -f`` follows new records as
they are written:

    hostcapctl --admin-socket /run/hostcap/admin.sock audit tail -f
    hostcapctl --admin-socket /run/hostcap/admin.sock audit query --outcome TIMEOUT --since 2h

The record contract lives in `hostcap_proto.audit`; the functions here that
print records take any iterable of records (`run_query`, `print_records`),
from a file or from the daemon alike.
"""

from __future__ import annotations

import argparse
import datetime as dt
import fnmatch
import json
import re
import shlex
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, TextIO

import grpc
from google.protobuf import timestamp_pb2
from hostcap_proto.audit import (
    OUTCOMES,
    AuditFileError,
    AuditRecordError,
    FilterError,
    RecordReader,
    VerifyReport,
    argv_sha256,
    check_event,
    encode_line,
    parse_line,
    resolve_spawn,
    tail_records,
    tenants_of,
    unknown_tenant,
    verify_files,
)
from hostcap_proto.audit.export import ExportReport, export_lines, is_export, verify_export
from hostcap_proto.v1 import admin_pb2, admin_pb2_grpc

from hostcap.ctl.common import channel, wire_error

EXIT_OK = 0
#: The chain is broken (verify), or a record could not be read.
EXIT_BROKEN = 1
#: Bad usage or an unreadable file.
EXIT_ERROR = 2

Handler = Callable[[argparse.Namespace], int]

_RELATIVE = re.compile(r"(\d+)\s*([smhd])")
_UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days"}


_TIME_OF_DAY = re.compile(r"\d{1,2}:\d{2}(?::\d{2}(?:\.\d+)?)?(?:Z|[+-]\d{2}:?\d{2})?")


def parse_time(text: str, *, now: dt.datetime | None = None) -> dt.datetime:
    """A --since/--until value: RFC 3339 / ISO 8601 (``2024-05-01T12:00:00Z``,
    ``2024-05-01``; without an offset it is UTC, like the log), a time of day
    (``14:00``, ``14:00:30``, ``14:00+02:00``: today's, UTC unless an offset
    says otherwise), or an age (``90s``, ``15m``, ``2h``, ``7d`` ago)."""
    text = text.strip()
    current = now or dt.datetime.now(dt.UTC)
    relative = _RELATIVE.fullmatch(text)
    if relative:
        amount, unit = int(relative.group(1)), relative.group(2)
        return current - dt.timedelta(**{_UNITS[unit]: amount})
    try:
        if _TIME_OF_DAY.fullmatch(text):
            of_day = dt.time.fromisoformat(text if len(text.split(":")[0]) == 2 else "0" + text)
            zone = of_day.tzinfo or dt.UTC
            value = dt.datetime.combine(current.astimezone(zone).date(), of_day, zone)
        else:
            value = dt.datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a time (use 2024-05-01T12:00:00Z, 2024-05-01, a time of day "
            "like 14:00, or an age like 2h)"
        ) from None
    if value.tzinfo is None:
        value = value.replace(tzinfo=dt.UTC)
    return value.astimezone(dt.UTC)


def _record_time(value: dt.datetime) -> str:
    # Records hold fixed-width UTC times, so bounds compare as strings.
    return value.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def outcome_name(text: str) -> str:
    """An --outcome value: a `hostcap.v1.Outcome` name, any case. Anything
    else is an error listing the valid names (never an empty answer)."""
    name = text.strip().upper()
    if name not in OUTCOMES:
        raise argparse.ArgumentTypeError(
            f"unknown outcome {text!r}: valid outcomes are {', '.join(OUTCOMES)}"
        )
    return name


def event_pattern(text: str) -> str:
    """An --event value: an event name or a glob naming at least one event;
    anything else is an error listing the valid names."""
    try:
        return check_event(text)
    except FilterError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def _matches_exe(pattern: str, path: str) -> bool:
    """--exe: a glob on the executable's full path, or on its name when the
    pattern has no slash (`--exe python3` matches /usr/bin/python3)."""
    if "/" in pattern:
        return fnmatch.fnmatchcase(path, pattern)
    return fnmatch.fnmatchcase(path.rsplit("/", 1)[-1], pattern)


def _matches_path(pattern: str, path: str) -> bool:
    """--path: a glob, or a plain path that matches itself and what is beneath it."""
    if any(c in pattern for c in "*?["):
        return fnmatch.fnmatchcase(path, pattern)
    base = pattern.rstrip("/") or "/"
    return path == base or path.startswith(base if base.endswith("/") else base + "/")


def failed(record: Mapping[str, Any]) -> bool:
    """--failed: a process.exit other than EXITED with code 0 (a non-zero
    exit, a signal, a limit, a timeout, a cancel, a shutdown, a failed start)."""
    return record.get("event") == "process.exit" and not (
        record.get("outcome") == "EXITED" and record.get("exit_code") == 0
    )


@dataclass(frozen=True)
class QueryFilter:
    """Which records `audit query` prints; every set field must match. A
    filter that is about one kind of record selects only that kind: --path
    file writes; --failed, --exit-code and --outcome process exits; --exe and
    --uid the exec and exit records of the spawns whose exec matches."""

    tenant: str | None = None
    since: dt.datetime | None = None
    until: dt.datetime | None = None
    #: An event name or a glob (``process.*``).
    event: str | None = None
    outcome: str | None = None
    spawn_id: str | None = None
    exe: str | None = None
    failed: bool = False
    exit_code: int | None = None
    uid: int | None = None
    path: str | None = None

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> QueryFilter:
        return cls(
            tenant=args.tenant,
            since=args.since,
            until=args.until,
            event=args.event,
            outcome=args.outcome,
            spawn_id=args.spawn,
            exe=getattr(args, "exe", None),
            failed=getattr(args, "failed", False),
            exit_code=getattr(args, "exit_code", None),
            uid=getattr(args, "uid", None),
            path=getattr(args, "path", None),
        )

    def select(self, records: Iterable[Mapping[str, Any]]) -> Iterator[Mapping[str, Any]]:
        """The matching records, in order. One pass: each exit is joined to
        its spawn's exec (`exec_of`), whenever the exec was written."""
        return (record for record, _ in self.select_joined(records))

    def select_joined(
        self, records: Iterable[Mapping[str, Any]]
    ) -> Iterator[tuple[Mapping[str, Any], Mapping[str, Any] | None]]:
        """(record, the exec record of its spawn or None) for each match.
        Only the execs of spawns not yet ended are held."""
        for record, exec_record, matched in self.classify(records):
            if matched:
                yield record, exec_record

    def classify(
        self, records: Iterable[Mapping[str, Any]]
    ) -> Iterator[tuple[Mapping[str, Any], Mapping[str, Any] | None, bool]]:
        """(record, its spawn's exec record or None, whether it matches) for
        every record (an export needs the ones left out too)."""
        since = _record_time(self.since) if self.since else None
        until = _record_time(self.until) if self.until else None
        execs: dict[str, Mapping[str, Any]] = {}
        for record in records:
            event = record.get("event")
            spawn = record.get("spawn_id")
            exec_record: Mapping[str, Any] | None = None
            if isinstance(spawn, str):
                if event == "process.exec":
                    execs[spawn] = record
                    exec_record = record
                elif event == "process.exit":
                    exec_record = execs.pop(spawn, None)
            time = str(record.get("time", ""))
            in_window = not (
                (until is not None and time > until) or (since is not None and time < since)
            )
            yield record, exec_record, in_window and self._matches(record, exec_record)

    def _matches(self, record: Mapping[str, Any], exec_record: Mapping[str, Any] | None) -> bool:
        event = record.get("event")
        if self.tenant is not None and record.get("tenant") != self.tenant:
            return False
        if self.event is not None and not fnmatch.fnmatchcase(str(event or ""), self.event):
            return False
        if self.spawn_id is not None and not str(record.get("spawn_id", "")).startswith(
            self.spawn_id
        ):
            return False  # the daemon resolved a prefix to one spawn; a file query did here
        if self.outcome is not None and record.get("outcome") != self.outcome.upper():
            return False
        if self.failed and not failed(record):
            return False
        if self.exit_code is not None and not (
            # An exit code means something only for a program that exited.
            event == "process.exit"
            and record.get("outcome") == "EXITED"
            and record.get("exit_code") == self.exit_code
        ):
            return False
        if self.path is not None and not (
            event == "file.write" and _matches_path(self.path, str(record.get("path", "")))
        ):
            return False
        if self.exe is not None or self.uid is not None:
            if event not in ("process.exec", "process.exit") or exec_record is None:
                return False
            executable = exec_record.get("executable")
            exe_path = str(executable.get("path", "")) if isinstance(executable, Mapping) else ""
            if self.exe is not None and not _matches_exe(self.exe, exe_path):
                return False
            if self.uid is not None and exec_record.get("uid") != self.uid:
                return False
        return True

    def selection(self) -> dict[str, Any]:
        """The filters set, as JSON values (an export's header names them)."""
        chosen: dict[str, Any] = {}
        for name, value in vars(self).items():
            if value is None or value is False:
                continue
            chosen[name] = _record_time(value) if isinstance(value, dt.datetime) else value
        return chosen

    def daemon_request(self) -> admin_pb2.QueryAuditRequest:
        """What the daemon filters: only what keeps each exit's exec in the
        stream (tenant, spawn, the upper time bound); the rest is done here."""
        return admin_pb2.QueryAuditRequest(
            tenant=self.tenant or "",
            until=_timestamp(self.until),
            spawn_id=self.spawn_id or "",
        )


# --- printing ---------------------------------------------------------------------


def _printable(text: str) -> str:
    # Records hold attacker-influenced text (argv, paths): never let control
    # characters (terminal escapes, newlines) reach the operator's terminal raw.
    return "".join(c if c.isprintable() else ascii(c)[1:-1] for c in text)


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 3] + "..."


def command_of(exec_record: Mapping[str, Any] | None) -> str:
    """The command line an exec record ran, as a shell would read it."""
    if exec_record is None:
        return ""
    return shlex.join(str(a) for a in exec_record.get("argv", []))


def _detail(record: Mapping[str, Any], exec_record: Mapping[str, Any] | None = None) -> str:
    event = record.get("event")
    if event == "process.exec":
        text = shlex.join(str(a) for a in record.get("argv", []))
        if record.get("argv_truncated"):
            text += f"  (argv cut, {record.get('argc')} args)"
        return text
    if event == "process.exit":
        parts = [str(record.get("outcome", "?"))]
        if record.get("exit_code") is not None:
            parts.append(f"exit={record['exit_code']}")
        if record.get("signal_name") or record.get("signal"):
            parts.append(f"signal={record.get('signal_name') or record.get('signal')}")
        if record.get("duration_s") is not None:
            parts.append(f"{record['duration_s']:.3f}s")
        if record.get("message"):
            parts.append(str(record["message"]))
        if exec_record is not None:
            parts.append(f"<- {command_of(exec_record)}")
        return " ".join(parts)
    if event == "file.write":
        return f"{record.get('path')} ({record.get('size')} bytes)"
    if event == "policy.deny":
        return f"{record.get('method')} {record.get('reason')}: {record.get('message')}"
    if event in ("daemon.start", "daemon.stop", "daemon.reload"):
        text = f"version {record.get('version')} tenants {','.join(record.get('tenants', []))}"
        return f"{text} {record['message']}" if record.get("message") else text
    if event == "audit.rotate":
        return f"continues {record.get('previous_file')} (seq {record.get('previous_seq')})"
    if event == "audit.prune":
        files = record.get("files") or []
        names = ", ".join(
            f"{f.get('file')}{'' if f.get('archived') else ' (not archived)'}"
            for f in files
            if isinstance(f, Mapping)
        )
        return f"removed {len(files)} rotated file(s): {names}"
    if event == "audit.recover":
        return f"removed a torn final line of {record.get('torn_bytes')} bytes"
    return ""


_HEADER = f"{'TIME (UTC)':<26} {'SEQ':>8}  {'EVENT':<14} {'TENANT':<12} {'SPAWN':<32} DETAIL"


def format_row(record: Mapping[str, Any], exec_record: Mapping[str, Any] | None = None) -> str:
    """One record as a table row (fixed widths, so rows can stream); an exit
    row ends with the command it ended (`<- argv`) when its exec is known."""
    time = str(record.get("time", "")).replace("T", " ").rstrip("Z")
    cells = [
        f"{_printable(time):<26}",
        f"{record.get('seq', ''):>8} ",
        f"{_printable(str(record.get('event', ''))):<14}",
        f"{_printable(str(record.get('tenant', '-'))):<12}",
        f"{_printable(str(record.get('spawn_id', '-'))):<32}",
        _cut(_printable(_detail(record, exec_record)), 160),
    ]
    return " ".join(cells).rstrip()


def print_records(
    records: Iterable[Mapping[str, Any]], out: TextIO, *, json_lines: bool, live: bool = False
) -> int:
    """Print records as a table or as JSON lines (exactly as stored); returns
    how many were printed. `live` flushes after every record (a follower)."""
    count = 0
    for record in records:
        if json_lines:
            out.write(encode_line(record).decode("utf-8"))
        else:
            if count == 0:
                out.write(_HEADER + "\n")
            out.write(format_row(record) + "\n")
        count += 1
        if live:
            out.flush()
    out.flush()
    return count


FORMATS = ("table", "json", "jsonl")


def run_query(
    records: Iterable[Mapping[str, Any]],
    query: QueryFilter,
    out: TextIO,
    *,
    json_lines: bool = False,
    output: str | None = None,
    check_tenant: bool = True,
) -> int:
    """Print the records `query` selects; the exit code. `output`: table,
    json (one array; each exit gains `command`, the argv of its exec: added
    by the query, not stored) or jsonl (the stored lines, verbatim).

    A --tenant that no record names is an error listing those that are
    (raises FilterError, having printed nothing). `check_tenant` False when
    the daemon checks it (it knows its config, and sends one tenant's records)."""
    output = output or ("jsonl" if json_lines else "table")
    known: set[str] = set()
    tenant = query.tenant if check_tenant else None

    def watched() -> Iterator[Mapping[str, Any]]:
        for record in records:
            if tenant is not None and tenant not in known:
                known.update(tenants_of(record))
            yield record

    count = 0
    for record, exec_record in query.select_joined(watched()):
        if output == "jsonl":
            out.write(encode_line(record).decode("utf-8"))
        elif output == "json":
            item = dict(record)
            if record.get("event") == "process.exit" and exec_record is not None:
                item["command"] = list(exec_record.get("argv", []))
            out.write(("," if count else "[") + "\n" + json.dumps(item, sort_keys=True))
        else:
            if count == 0:
                out.write(_HEADER + "\n")
            out.write(format_row(record, exec_record) + "\n")
        count += 1
    if count == 0 and tenant is not None and tenant not in known:
        raise unknown_tenant(tenant, known)
    if output == "json":
        out.write("\n]\n" if count else "[\n]\n")
    out.flush()
    return EXIT_OK


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


# --- handlers ---------------------------------------------------------------------


def _error(message: str) -> int:
    sys.stderr.write(f"hostcapctl audit: {message}\n")
    return EXIT_ERROR


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


class DaemonStreamError(Exception):
    """The daemon refused or broke off an audit stream; the message says why."""


def _admin_socket(args: argparse.Namespace) -> Any:
    # None when run as `python -m hostcap.ctl.audit` (no global options).
    return getattr(args, "admin_socket", None)


def _timestamp(value: dt.datetime | None) -> timestamp_pb2.Timestamp | None:
    if value is None:
        return None
    stamp = timestamp_pb2.Timestamp()
    stamp.FromDatetime(value.astimezone(dt.UTC))
    return stamp


def daemon_records(lines: Iterable[admin_pb2.AuditLine]) -> Iterator[dict[str, Any]]:
    """The records of a TailAudit/QueryAudit stream. Raises DaemonStreamError
    when the daemon refuses or ends the stream with an error, or sends a line
    that is not a record."""
    try:
        for line in lines:
            try:
                yield parse_line(line.json.encode("utf-8"))
            except AuditRecordError as error:
                raise DaemonStreamError(f"the daemon sent an unreadable record: {error}") from None
    except grpc.RpcError as error:
        wire = wire_error(error)
        raise DaemonStreamError(f"{wire.reason}: {wire.message}") from None


def _stub(ch: grpc.Channel) -> admin_pb2_grpc.AdminServiceStub:
    return admin_pb2_grpc.AdminServiceStub(ch)  # type: ignore[no-untyped-call]


def _output(args: argparse.Namespace) -> str:
    return "jsonl" if args.json else str(args.format or "table")


def _query_daemon(args: argparse.Namespace, socket: Any) -> int:
    query = QueryFilter.from_args(args)
    with channel(Path(socket)) as ch:
        try:
            # The daemon narrows the stream; the filter here gives each flag its meaning.
            return run_query(
                daemon_records(_stub(ch).QueryAudit(query.daemon_request())),
                query,
                sys.stdout,
                output=_output(args),
                check_tenant=False,
            )
        except (DaemonStreamError, FilterError) as error:
            return _error(str(error))


def _tail_daemon(args: argparse.Namespace, socket: Any) -> int:
    request = admin_pb2.TailAuditRequest(lines=args.lines, follow=args.follow)
    with channel(Path(socket)) as ch:
        call = _stub(ch).TailAudit(request)
        try:
            print_records(daemon_records(call), sys.stdout, json_lines=args.json, live=True)
        except DaemonStreamError as error:
            return _error(str(error))
        except KeyboardInterrupt:
            call.cancel()
            raise
    if args.follow:
        # A follow ends only when the daemon ends it: it is stopping.
        sys.stderr.write("hostcapctl audit: the daemon closed the stream (it is stopping)\n")
    return EXIT_OK


def _cmd_query(args: argparse.Namespace) -> int:
    if not args.file:
        socket = _admin_socket(args)
        if socket is not None:
            return _query_daemon(args, socket)
        return _error("give the audit file(s) with --file, or the daemon's --admin-socket")
    files = [Path(p) for p in args.file]
    try:
        query = QueryFilter.from_args(args)
        if query.spawn_id is not None:
            # An id or a unique prefix of one (as kill takes it): one pass to find it.
            ids = (r.get("spawn_id") for r in RecordReader(files))
            query = replace(
                query,
                spawn_id=resolve_spawn(query.spawn_id, (i for i in ids if isinstance(i, str))),
            )
        reader = RecordReader(files)
        code = run_query(reader, query, sys.stdout, output=_output(args))
    except (AuditFileError, FilterError) as error:
        return _error(str(error))
    if reader.skipped:
        path, line = reader.skipped[0]
        sys.stderr.write(
            f"warning: {len(reader.skipped)} unreadable line(s) skipped (first {path}:{line}); "
            "run `hostcapctl audit verify`\n"
        )
    return code


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


def _cmd_tail(args: argparse.Namespace) -> int:
    if args.lines < 0:
        return _error("-n must be 0 or more")
    if args.file is None:
        socket = _admin_socket(args)
        if socket is None:
            return _error("give the audit file with --file, or the daemon's --admin-socket")
        return _tail_daemon(args, socket)
    if args.follow:
        return _error("-f follows through the daemon: give --admin-socket instead of --file")
    try:
        records = tail_records(Path(args.file), args.lines)
    except AuditFileError as error:
        return _error(str(error))
    print_records(records, sys.stdout, json_lines=args.json)
    return EXIT_OK


# --- verify-argv ------------------------------------------------------------------


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


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``audit verify|query|tail`` to hostcapctl's subcommands. Each sets
    ``func`` to a handler taking the parsed args and returning the exit code."""
    audit = subparsers.add_parser(
        "audit",
        help="verify, query and tail the audit log",
        description="Verify, query and tail the audit log: from its files (no daemon needed), "
        "or query and tail through the daemon's --admin-socket.",
    )
    commands = audit.add_subparsers(dest="audit_command", metavar="COMMAND", required=True)

    verify = commands.add_parser(
        "verify",
        help="walk the hash chain; exit 0 if intact, 1 naming the first bad line",
        description="Walk the hash chain through the given files (in any order; rotated files "
        "are put in chain order). Exit 0 if intact, 1 naming the first bad line and why "
        "(edited, deleted, reordered, torn, chain broken), 2 if a file cannot be read.",
    )
    verify.add_argument(
        "files", nargs="*", metavar="FILE", help="audit files (current and rotated)"
    )
    verify.add_argument("--json", action="store_true", help="print the report as JSON")
    verify.set_defaults(func=_cmd_verify)

    query = commands.add_parser(
        "query",
        help="print the records that match (a table, JSON, or the stored JSON lines)",
        description="Print audit records matching every filter given, from the files (--file) "
        "or from the daemon (--admin-socket: every kept file, in chain order). Times are UTC. "
        "Exit rows show the command they ended. What the log cannot show: files written by "
        "the spawned commands themselves (only FsService writes are file.write records), and "
        "which engine user of a tenant made a call (grpcio exposes no peer credentials).",
    )
    query.add_argument(
        "--file",
        action="append",
        metavar="FILE",
        help="audit file (repeat for rotated files); without it, ask the daemon (--admin-socket)",
    )
    query.add_argument(
        "--tenant", metavar="T", help="one tenant's records (one no record names is an error)"
    )
    query.add_argument(
        "--since", type=parse_time, metavar="TIME", help="ISO time, time of day (14:00) or age (2h)"
    )
    query.add_argument(
        "--until", type=parse_time, metavar="TIME", help="ISO time, time of day (14:00) or age (2h)"
    )
    query.add_argument(
        "--event",
        type=event_pattern,
        metavar="E",
        help="event name or glob, e.g. 'process.*' (one naming no event is an error)",
    )
    query.add_argument(
        "--outcome",
        type=outcome_name,
        metavar="O",
        help=f"process.exit outcome: {', '.join(OUTCOMES)}",
    )
    query.add_argument(
        "--spawn", metavar="ID", help="one spawn's records: its id or a unique prefix of it"
    )
    query.add_argument(
        "--exe",
        metavar="PATH",
        help="spawns of this executable: a path or glob, or a name (python3) matching any dir",
    )
    query.add_argument(
        "--failed",
        action="store_true",
        help="exits that failed: non-zero code, a signal, a limit, a timeout, a cancel",
    )
    query.add_argument(
        "--exit-code", type=int, metavar="N", help="programs that exited with this code"
    )
    query.add_argument("--uid", type=int, metavar="UID", help="spawns run as this uid")
    query.add_argument(
        "--path", metavar="PATH", help="file writes at PATH or beneath it (or a glob)"
    )
    query.add_argument(
        "--format",
        choices=FORMATS,
        default=None,
        help="table (default), json (an array; exits gain `command`), jsonl (as stored)",
    )
    query.add_argument("--json", action="store_true", help="the same as --format jsonl")
    query.set_defaults(func=_cmd_query)

    export = commands.add_parser(
        "export",
        help="write chosen records with the chain hashes of the rest (verify checks it)",
        description="Write the records that match every filter given, and for the records "
        "between them only their chain hashes (runs of left-out records), so that "
        "`hostcapctl audit verify EXPORT` checks the chosen records against the chain without "
        "the other records' content. From the files (--file) or the daemon (--admin-socket).",
    )
    export.add_argument(
        "--file",
        action="append",
        metavar="FILE",
        help="audit file (repeat for rotated files); without it, ask the daemon (--admin-socket)",
    )
    export.add_argument("--tenant", metavar="T", help="one tenant's records")
    export.add_argument("--event", type=event_pattern, metavar="E", help="event name or glob")
    export.add_argument("--spawn", metavar="ID", help="one spawn's records (id or unique prefix)")
    export.add_argument("--since", type=parse_time, metavar="TIME", help="as for query")
    export.add_argument("--until", type=parse_time, metavar="TIME", help="as for query")
    export.add_argument(
        "-o", "--output", metavar="FILE", help="write here (a new file) instead of stdout"
    )
    export.set_defaults(func=_cmd_export, outcome=None)

    verify_argv = commands.add_parser(
        "verify-argv",
        help="check that an argv is the one a record was written for (by its argv_sha256)",
        description="Check an argv against a process.exec (--spawn ID, or --seq N) or a refused "
        "spawn's policy.deny (--seq N): exit 0 when its sha256 (each element's UTF-8 bytes, "
        "each followed by a NUL) is the record's argv_sha256, 1 when not. The record's argv "
        "may be redacted or cut; its digest is of the argv as given.",
    )
    verify_argv.add_argument(
        "--file",
        action="append",
        metavar="FILE",
        help="audit file (repeat for rotated files); without it, ask the daemon (--admin-socket)",
    )
    verify_argv.add_argument("--seq", type=int, metavar="N", help="the record with this seq")
    verify_argv.add_argument("--spawn", metavar="ID", help="the process.exec of this spawn")
    verify_argv.add_argument(
        "--argv-json", metavar="JSON", help="the argv as a JSON array (instead of after --)"
    )
    verify_argv.add_argument("argv", nargs=argparse.REMAINDER, help="-- then the argv")
    verify_argv.set_defaults(func=_cmd_verify_argv)

    tail = commands.add_parser(
        "tail",
        help="print the last records (-f: then follow, over the admin socket)",
        description="Print the last records of a file (--file), or ask the daemon over "
        "--admin-socket; with -f keep printing new records as they are written.",
    )
    tail.add_argument("--file", metavar="FILE", help="audit file (no daemon needed)")
    tail.add_argument("-n", "--lines", type=int, default=10, metavar="N", help="how many (10)")
    tail.add_argument(
        "-f", "--follow", action="store_true", help="then follow new records (admin socket)"
    )
    tail.add_argument("--json", action="store_true", help="JSON lines, exactly as stored")
    tail.set_defaults(func=_cmd_tail)


def main(argv: list[str] | None = None) -> int:
    """``python -m hostcap.ctl.audit``: the audit commands on their own."""
    parser = argparse.ArgumentParser(prog="hostcapctl")
    register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    handler: Handler = args.func
    return handler(args)


if __name__ == "__main__":
    sys.exit(main())
