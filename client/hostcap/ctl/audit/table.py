"""Printing audit records: the table, JSON and the stored JSON lines
(`print_records`, `run_query`), for records from a file or the daemon alike."""

from __future__ import annotations

import json
import shlex
from collections.abc import Iterable, Iterator, Mapping
from typing import Any, TextIO

from hostcap_proto.audit import encode_line, tenants_of, unknown_tenant

from hostcap.ctl.audit.common import EXIT_OK
from hostcap.ctl.audit.filters import QueryFilter, changed_paths


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


def _changes_detail(record: Mapping[str, Any], path: str | None) -> str:
    """`created,modified /w/f; deleted /w/g` (the ones at --path, with it), and
    what the record says it could not list."""
    shown = changed_paths(record, path)
    text = "; ".join(
        f"{','.join(map(str, c.get('kinds', [])))} {c.get('path')}{'/' if c.get('dir') else ''}"
        for c in shown
    )
    listed = len(changed_paths(record, None))
    if path is not None and listed > len(shown):
        text += f"  ({listed - len(shown)} other path(s))"
    beyond = record.get("events_beyond")
    if isinstance(beyond, Mapping) and beyond:
        text += "  (beyond the list: " + ", ".join(f"{v} {k}" for k, v in beyond.items()) + ")"
    if record.get("complete") is False:
        text += "  (incomplete)"
    return text or "nothing changed"


def caller_of(record: Mapping[str, Any]) -> str:
    """`by uid 1000 pid 4242` of a record that names its caller (the
    front-end's word: docs/audit.md, "Who asked"), else ""."""
    caller = record.get("caller")
    if not isinstance(caller, Mapping):
        return ""
    return f"by uid {caller.get('uid')} pid {caller.get('pid')}"


def _detail(
    record: Mapping[str, Any],
    exec_record: Mapping[str, Any] | None = None,
    path: str | None = None,
) -> str:
    text = _what(record, exec_record, path)
    who = caller_of(record)
    return f"{text}  [{who}]" if who else text


def _what(
    record: Mapping[str, Any],
    exec_record: Mapping[str, Any] | None = None,
    path: str | None = None,
) -> str:
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
    if event == "process.input":
        # repr() shows the typed control characters (\x03, \r) as escapes.
        text = f"#{record.get('index')} {record.get('bytes')} bytes {record.get('text', '')!r}"
        if record.get("text_truncated"):
            text += " (cut)"
        if record.get("text_redacted"):
            text += " (redacted)"
        return text + (" +EOF" if record.get("close") else "")
    if event == "policy.deny":
        return f"{record.get('method')} {record.get('reason')}: {record.get('message')}"
    if event == "fs.changes":
        return _changes_detail(record, path)
    if event == "network.connect":
        where = f"{record.get('host')}:{record.get('port')}"
        if not record.get("allowed"):
            return f"DENIED {where} ({record.get('protocol')}): {record.get('reason')}"
        return (
            f"{where} -> {record.get('address')} by {record.get('rule')!r}, "
            f"{record.get('bytes_up')} up {record.get('bytes_down')} down, "
            f"{record.get('duration_ms')} ms"
        )
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
    if event == "admin.call":
        asked = " ".join(
            f"{name}={record[name]}"
            for name in ("spawn_id", "tenant", "lines", "follow")
            if record.get(name) is not None
        )
        if isinstance(record.get("asked"), Mapping):
            asked += " " + " ".join(f"{k}={v}" for k, v in record["asked"].items())
        return f"{record.get('method')} {asked}".rstrip()
    return ""


_HEADER = f"{'TIME (UTC)':<26} {'SEQ':>8}  {'EVENT':<14} {'TENANT':<12} {'SPAWN':<32} DETAIL"


def format_row(
    record: Mapping[str, Any],
    exec_record: Mapping[str, Any] | None = None,
    path: str | None = None,
) -> str:
    """One record as a table row (fixed widths, so rows can stream); an exit
    row ends with the command it ended (`<- argv`) when its exec is known."""
    time = str(record.get("time", "")).replace("T", " ").rstrip("Z")
    cells = [
        f"{_printable(time):<26}",
        f"{record.get('seq', ''):>8} ",
        f"{_printable(str(record.get('event', ''))):<14}",
        f"{_printable(str(record.get('tenant', '-'))):<12}",
        f"{_printable(str(record.get('spawn_id', '-'))):<32}",
        _cut(_printable(_detail(record, exec_record, path)), 160),
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
            out.write(format_row(record, exec_record, query.path) + "\n")
        count += 1
    if count == 0 and tenant is not None and tenant not in known:
        raise unknown_tenant(tenant, known)
    if output == "json":
        out.write("\n]\n" if count else "[\n]\n")
    out.flush()
    return EXIT_OK
