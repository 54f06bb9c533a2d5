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
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

import grpc
from google.protobuf import timestamp_pb2
from hostcap_proto.audit import (
    AuditFileError,
    AuditRecordError,
    RecordReader,
    VerifyReport,
    encode_line,
    parse_line,
    tail_records,
    verify_files,
)
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


def parse_time(text: str, *, now: dt.datetime | None = None) -> dt.datetime:
    """A --since/--until value: RFC 3339 / ISO 8601 (``2024-05-01T12:00:00Z``,
    ``2024-05-01``; without an offset it is UTC, like the log), or an age
    (``90s``, ``15m``, ``2h``, ``7d`` ago)."""
    text = text.strip()
    relative = _RELATIVE.fullmatch(text)
    if relative:
        amount, unit = int(relative.group(1)), relative.group(2)
        return (now or dt.datetime.now(dt.UTC)) - dt.timedelta(**{_UNITS[unit]: amount})
    try:
        value = dt.datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a time (use 2024-05-01T12:00:00Z, 2024-05-01, or an age like 2h)"
        ) from None
    if value.tzinfo is None:
        value = value.replace(tzinfo=dt.UTC)
    return value.astimezone(dt.UTC)


def _record_time(value: dt.datetime) -> str:
    # Records hold fixed-width UTC times, so bounds compare as strings.
    return value.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@dataclass(frozen=True)
class QueryFilter:
    """Which records `audit query` prints; every set field must match."""

    tenant: str | None = None
    since: dt.datetime | None = None
    until: dt.datetime | None = None
    #: An event name or a glob (``process.*``).
    event: str | None = None
    outcome: str | None = None
    spawn_id: str | None = None

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> QueryFilter:
        return cls(
            tenant=args.tenant,
            since=args.since,
            until=args.until,
            event=args.event,
            outcome=args.outcome,
            spawn_id=args.spawn,
        )

    def select(self, records: Iterable[Mapping[str, Any]]) -> Iterator[Mapping[str, Any]]:
        since = _record_time(self.since) if self.since else None
        until = _record_time(self.until) if self.until else None
        outcome = self.outcome.upper() if self.outcome else None
        for record in records:
            time = str(record.get("time", ""))
            if since is not None and time < since:
                continue
            if until is not None and time > until:
                continue
            if self.tenant is not None and record.get("tenant") != self.tenant:
                continue
            if self.event is not None and not fnmatch.fnmatchcase(
                str(record.get("event", "")), self.event
            ):
                continue
            if outcome is not None and record.get("outcome") != outcome:
                continue
            if self.spawn_id is not None and record.get("spawn_id") != self.spawn_id:
                continue
            yield record


# --- printing ---------------------------------------------------------------------


def _printable(text: str) -> str:
    # Records hold attacker-influenced text (argv, paths): never let control
    # characters (terminal escapes, newlines) reach the operator's terminal raw.
    return "".join(c if c.isprintable() else ascii(c)[1:-1] for c in text)


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 3] + "..."


def _detail(record: Mapping[str, Any]) -> str:
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
    if event == "audit.recover":
        return f"removed a torn final line of {record.get('torn_bytes')} bytes"
    return ""


_HEADER = f"{'TIME (UTC)':<26} {'SEQ':>8}  {'EVENT':<14} {'TENANT':<12} {'SPAWN':<32} DETAIL"


def format_row(record: Mapping[str, Any]) -> str:
    """One record as a table row (fixed widths, so rows can stream)."""
    time = str(record.get("time", "")).replace("T", " ").rstrip("Z")
    cells = [
        f"{_printable(time):<26}",
        f"{record.get('seq', ''):>8} ",
        f"{_printable(str(record.get('event', ''))):<14}",
        f"{_printable(str(record.get('tenant', '-'))):<12}",
        f"{_printable(str(record.get('spawn_id', '-'))):<32}",
        _cut(_printable(_detail(record)), 160),
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


def run_query(
    records: Iterable[Mapping[str, Any]], query: QueryFilter, out: TextIO, *, json_lines: bool
) -> int:
    """Print the records `query` selects; the exit code."""
    print_records(query.select(records), out, json_lines=json_lines)
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


def _cmd_verify(args: argparse.Namespace) -> int:
    if not args.files:
        return _error("give the audit file(s) to verify, e.g. audit.jsonl audit.jsonl.*")
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


def _query_daemon(args: argparse.Namespace, socket: Any) -> int:
    query = QueryFilter.from_args(args)
    request = admin_pb2.QueryAuditRequest(
        tenant=query.tenant or "",
        since=_timestamp(query.since),
        until=_timestamp(query.until),
        event=query.event or "",
        outcome=query.outcome or "",
        spawn_id=query.spawn_id or "",
    )
    with channel(Path(socket)) as ch:
        try:
            # The daemon filters; the same filter here keeps one meaning of each flag.
            return run_query(
                daemon_records(_stub(ch).QueryAudit(request)),
                query,
                sys.stdout,
                json_lines=args.json,
            )
        except DaemonStreamError as error:
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
    try:
        reader = RecordReader([Path(p) for p in args.file])
        code = run_query(reader, QueryFilter.from_args(args), sys.stdout, json_lines=args.json)
    except AuditFileError as error:
        return _error(str(error))
    if reader.skipped:
        path, line = reader.skipped[0]
        sys.stderr.write(
            f"warning: {len(reader.skipped)} unreadable line(s) skipped (first {path}:{line}); "
            "run `hostcapctl audit verify`\n"
        )
    return code


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
        help="print the records that match (a table, or JSON lines with --json)",
        description="Print audit records matching every filter given, from the files (--file) "
        "or from the daemon (--admin-socket: every kept file, in chain order). Times are UTC.",
    )
    query.add_argument(
        "--file",
        action="append",
        metavar="FILE",
        help="audit file (repeat for rotated files); without it, ask the daemon (--admin-socket)",
    )
    query.add_argument("--tenant", metavar="T")
    query.add_argument("--since", type=parse_time, metavar="TIME", help="ISO time or age (2h)")
    query.add_argument("--until", type=parse_time, metavar="TIME", help="ISO time or age (2h)")
    query.add_argument("--event", metavar="E", help="event name or glob, e.g. 'process.*'")
    query.add_argument("--outcome", metavar="O", help="process.exit outcome, e.g. TIMEOUT")
    query.add_argument("--spawn", metavar="ID", help="one spawn's records")
    query.add_argument("--json", action="store_true", help="JSON lines, exactly as stored")
    query.set_defaults(func=_cmd_query)

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
