"""The audit query's filters: the flags' parsing (times, outcomes, events)
and `QueryFilter`, which selects records from a file or the daemon alike."""

from __future__ import annotations

import argparse
import datetime as dt
import fnmatch
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from google.protobuf import timestamp_pb2
from hostcap_proto.audit import OUTCOMES, FilterError, check_event
from hostcap_proto.v1 import admin_pb2

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
    #: --changed-by: one spawn's fs.changes (its id or a unique prefix).
    changed_by: str | None = None
    #: network.connect records of this host (a name, or a glob: *.github.com).
    host: str | None = None
    #: Records of calls made by this uid / pid (their `caller`, the front-end's
    #: word; an exit by its exec's).
    caller_uid: int | None = None
    caller_pid: int | None = None

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
            changed_by=getattr(args, "changed_by", None),
            host=getattr(args, "host", None),
            caller_uid=getattr(args, "caller_uid", None),
            caller_pid=getattr(args, "caller_pid", None),
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
            (event == "file.write" and _matches_path(self.path, str(record.get("path", ""))))
            or (event == "fs.changes" and bool(changed_paths(record, self.path)))
        ):
            return False
        if self.changed_by is not None and not (
            event == "fs.changes" and str(record.get("spawn_id", "")).startswith(self.changed_by)
        ):
            return False
        if self.host is not None and not (
            event == "network.connect"
            and fnmatch.fnmatchcase(
                str(record.get("host", "")).lower().rstrip("."), self.host.lower().rstrip(".")
            )
        ):
            return False
        if self.caller_uid is not None or self.caller_pid is not None:
            caller = record.get("caller")
            if caller is None and event == "process.exit" and exec_record is not None:
                caller = exec_record.get("caller")
            if not isinstance(caller, Mapping):
                return False
            if self.caller_uid is not None and caller.get("uid") != self.caller_uid:
                return False
            if self.caller_pid is not None and caller.get("pid") != self.caller_pid:
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
            spawn_id=self.spawn_id or self.changed_by or "",
        )


def _timestamp(value: dt.datetime | None) -> timestamp_pb2.Timestamp | None:
    if value is None:
        return None
    stamp = timestamp_pb2.Timestamp()
    stamp.FromDatetime(value.astimezone(dt.UTC))
    return stamp


def changed_paths(record: Mapping[str, Any], pattern: str | None) -> list[Mapping[str, Any]]:
    """The entries of an fs.changes record's `changes` at `pattern` or beneath
    it (all of them without a pattern)."""
    changes = record.get("changes")
    if not isinstance(changes, list):
        return []
    return [
        c
        for c in changes
        if isinstance(c, Mapping)
        and (pattern is None or _matches_path(pattern, str(c.get("path", ""))))
    ]
