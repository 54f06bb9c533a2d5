"""The audit record contract, ``hostcapd.audit/v1``: shared by the daemon (which
writes the log) and hostcapctl (which reads and verifies it).

A log is a JSON Lines file: one record a line, each line the *canonical
serialisation* of its record followed by ``\\n``::

    canonical(record) = json.dumps(record, sort_keys=True, separators=(",", ":"),
                                   ensure_ascii=False, allow_nan=False).encode("utf-8")

Every record carries ``prev_hash`` (the ``hash`` of the record before it, or
`GENESIS_HASH` for the first record ever written) and its own ``hash``::

    hash = sha256(prev_hash.encode("ascii") + canonical(record without "hash")).hexdigest()

so a line edited, deleted or moved breaks the chain at that point. The chain
continues across rotated files: the first record of every file after the
first is an ``audit.rotate`` naming the previous file, its last ``seq`` and
its last ``hash``. `verify_files` walks one or more files and returns a
`VerifyReport` naming the first bad line and why.

Fields whose value is unknown are absent, never ``null``. Readers accept fields
they do not know (a newer writer may add some); the writer accepts only the
fields of the event's model (`EVENT_FIELDS`).
"""

from __future__ import annotations

import copy
import hashlib
import json
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from types import UnionType
from typing import Any, Literal, NoReturn, Union, get_args, get_origin

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

SCHEMA = "hostcapd.audit/v1"
#: ``prev_hash`` of the very first record of a log.
GENESIS_HASH = "0" * 64
#: What a redacted secret (or the secret part of a value) is replaced with.
REDACTED = "[REDACTED]"

EventName = Literal[
    "process.exec",
    "process.exit",
    "file.write",
    "policy.deny",
    "daemon.start",
    "daemon.stop",
    "daemon.reload",
    "audit.rotate",
    "audit.recover",
]
EVENTS: tuple[str, ...] = get_args(EventName)

#: The names of ``hostcap.v1.Outcome`` (a test keeps the two in step).
OutcomeName = Literal[
    "EXITED",
    "SIGNALED",
    "TIMEOUT",
    "CPU_LIMIT",
    "MEMORY_LIMIT",
    "OUTPUT_LIMIT",
    "PIDS_LIMIT",
    "CANCELLED",
    "DAEMON_SHUTDOWN",
    "SPAWN_FAILED",
]
OUTCOMES: tuple[str, ...] = get_args(OutcomeName)

#: The fields the writer sets on every record; callers never pass them.
HEADER_FIELDS: frozenset[str] = frozenset(
    {"schema", "event", "seq", "time", "event_id", "boot_id", "prev_hash", "hash"}
)

#: journald MESSAGE_ID of each event type (``journalctl MESSAGE_ID=...``). Fixed forever.
JOURNAL_MESSAGE_IDS: Mapping[str, str] = {
    "process.exec": "6b3c1f0e8d2a4e0fa2b7c9d41e5f6a01",
    "process.exit": "6b3c1f0e8d2a4e0fa2b7c9d41e5f6a02",
    "file.write": "6b3c1f0e8d2a4e0fa2b7c9d41e5f6a03",
    "policy.deny": "6b3c1f0e8d2a4e0fa2b7c9d41e5f6a04",
    "daemon.start": "6b3c1f0e8d2a4e0fa2b7c9d41e5f6a05",
    "daemon.stop": "6b3c1f0e8d2a4e0fa2b7c9d41e5f6a06",
    "daemon.reload": "6b3c1f0e8d2a4e0fa2b7c9d41e5f6a07",
    "audit.rotate": "6b3c1f0e8d2a4e0fa2b7c9d41e5f6a08",
    "audit.recover": "6b3c1f0e8d2a4e0fa2b7c9d41e5f6a09",
}

_HASH = re.compile(r"[0-9a-f]{64}")
_TIME = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{6}Z")


class AuditRecordError(ValueError):
    """A record (or a line) is not a valid hostcapd.audit/v1 record."""


class AuditFileError(Exception):
    """An audit file cannot be read (missing, permission, I/O error)."""


# --- canonical form and hashing ----------------------------------------------


# The one encoder of the canonical form (stateless between calls, so shared).
_CANONICAL = json.JSONEncoder(
    sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
)


def canonical_bytes(record: Mapping[str, Any]) -> bytes:
    """The canonical serialisation of `record` (without the trailing newline)."""
    try:
        return _CANONICAL.encode(record).encode("utf-8")
    except (TypeError, ValueError) as error:
        raise AuditRecordError(f"record is not canonical JSON: {error}") from None


def record_hash(record: Mapping[str, Any]) -> str:
    """The ``hash`` a record must carry: sha256 over its ``prev_hash`` and its
    canonical form with the ``hash`` field left out."""
    body = {key: value for key, value in record.items() if key != "hash"}
    return hashlib.sha256(_prev_hash_bytes(record) + canonical_bytes(body)).hexdigest()


def _prev_hash_bytes(record: Mapping[str, Any]) -> bytes:
    prev = record.get("prev_hash")
    if not isinstance(prev, str) or not _HASH.fullmatch(prev):
        raise AuditRecordError("prev_hash must be 64 lowercase hex digits")
    return prev.encode("ascii")


def seal(record: Mapping[str, Any]) -> dict[str, Any]:
    """`record` (which holds ``prev_hash``) with its ``hash`` set."""
    sealed = {key: value for key, value in record.items() if key != "hash"}
    sealed["hash"] = record_hash(sealed)
    return sealed


def encode_line(record: Mapping[str, Any]) -> bytes:
    """The line as stored: canonical form plus newline."""
    return canonical_bytes(record) + b"\n"


def sealed_line(record: Mapping[str, Any]) -> tuple[dict[str, Any], bytes]:
    """``seal(record)`` and its stored line ``encode_line(seal(record))``, with
    the record encoded once instead of twice (the writer's path).

    The canonical form sorts the top-level keys, so the form without ``hash``
    and the one with it differ only by the ``"hash":...`` pair between the
    keys before and after it: both are joined from those two encodings."""
    if set(map(type, record)) - {str}:
        # Keys json would convert (ints, ...) sort differently: the plain path.
        sealed = seal(record)
        return sealed, encode_line(sealed)
    prev = _prev_hash_bytes(record)
    before = {key: value for key, value in record.items() if key < "hash"}
    after = {key: value for key, value in record.items() if key > "hash"}
    try:
        head = _CANONICAL.encode(before)[1:-1]
        tail = _CANONICAL.encode(after)[1:-1]
    except (TypeError, ValueError) as error:
        raise AuditRecordError(f"record is not canonical JSON: {error}") from None
    unsealed = "{" + ",".join(part for part in (head, tail) if part) + "}"
    try:
        digest = hashlib.sha256(prev + unsealed.encode("utf-8")).hexdigest()
        pair = f'"hash":"{digest}"'
        line = "{" + ",".join(part for part in (head, pair, tail) if part) + "}\n"
        data = line.encode("utf-8")
    except UnicodeEncodeError as error:
        raise AuditRecordError(f"record is not canonical JSON: {error}") from None
    sealed = dict(record)
    sealed.pop("hash", None)
    sealed["hash"] = digest  # last, as seal() puts it
    return sealed, data


def _no_constants(name: str) -> Any:
    raise AuditRecordError(f"{name} is not valid in an audit record")


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise AuditRecordError(f"duplicate key {key!r}")
        result[key] = value
    return result


def parse_line(raw: bytes) -> dict[str, Any]:
    """Parse one stored line (without its newline) into a record dict.

    Raises `AuditRecordError` for anything that is not a single JSON object.
    Does not check the hash or the schema (see `check_line`)."""
    try:
        value = json.loads(
            raw.decode("utf-8"), object_pairs_hook=_unique_keys, parse_constant=_no_constants
        )
    except UnicodeDecodeError:
        raise AuditRecordError("line is not UTF-8") from None
    except json.JSONDecodeError as error:
        raise AuditRecordError(f"line is not JSON ({error.msg} at column {error.colno})") from None
    if not isinstance(value, dict):
        raise AuditRecordError("line is not a JSON object")
    return value


# --- the record models ---------------------------------------------------------


class _Fields(BaseModel):
    # Readers tolerate fields a newer writer added; the writer checks for
    # unknown fields itself (see `validate_event_fields`).
    model_config = ConfigDict(extra="allow", frozen=True)


class Executable(_Fields):
    """The executable resolved, opened and exec'd by fd."""

    path: str
    sha256: str
    device: int
    inode: int


class Protection(_Fields):
    """One sandbox protection and whether it was applied to this spawn."""

    name: str
    applied: bool
    reason: str = ""
    required: bool | None = None


class AppliedLimits(_Fields):
    """Limits as applied (hostcap.v1.Limits field names)."""

    cpu_seconds: float | None = None
    memory_bytes: int | None = None
    wall_seconds: float | None = None
    pids: int | None = None
    output_bytes: int | None = None
    file_size_bytes: int | None = None
    open_files: int | None = None
    total_output_bytes: int | None = None


class Rusage(_Fields):
    """wait4(2) resource usage (hostcap.v1.Rusage field names)."""

    user_seconds: float
    system_seconds: float
    max_rss_bytes: int
    voluntary_context_switches: int = 0
    involuntary_context_switches: int = 0
    block_input_ops: int = 0
    block_output_ops: int = 0


class StreamBytes(_Fields):
    """Byte accounting of one output stream."""

    total: int
    kept: int
    dropped: int


class OpenSpawn(_Fields):
    """A spawn whose process.exec has no process.exit yet, as carried by an
    audit.rotate header so the job ledger never needs older files."""

    spawn_id: str
    tenant: str
    request_id: str | None = None
    labels: dict[str, str] = Field(default_factory=dict)
    exec_seq: int


class _Correlated(_Fields):
    tenant: str
    spawn_id: str | None = None
    request_id: str | None = None
    labels: dict[str, str] = Field(default_factory=dict)


class ProcessExec(_Correlated):
    """process.exec: written durably before the child is exec'd."""

    spawn_id: str
    #: Redacted (secret-shaped values replaced by REDACTED), then bounded.
    argv: list[str]
    #: Set by the writer when argv was cut to bound the record; then argc is
    #: the original number of arguments.
    argv_truncated: bool | None = None
    argc: int | None = None
    env_names: list[str] = Field(default_factory=list)
    executable: Executable
    cwd: str
    uid: int
    gid: int
    limits: AppliedLimits = AppliedLimits()
    protections: list[Protection] = Field(default_factory=list)
    #: Absent when the record is written before the clone.
    pid: int | None = None


class ProcessExit(_Correlated):
    """process.exit: how a spawn ended."""

    spawn_id: str
    outcome: OutcomeName
    message: str = ""
    exit_code: int | None = None
    signal: int | None = None
    signal_name: str | None = None
    failed_step: str | None = None
    errno: int | None = None
    pid: int | None = None
    rusage: Rusage | None = None
    peak_memory_bytes: int | None = None
    oom_kills: int | None = None
    duration_s: float | None = None
    stdout: StreamBytes | None = None
    stderr: StreamBytes | None = None


class FileWrite(_Correlated):
    """file.write: one atomic write through FsService.WriteFile."""

    path: str
    size: int
    #: Absent when the file did not exist before.
    sha256_before: str | None = None
    sha256_after: str
    #: Ties this record to a policy.deny saying the write was not committed.
    write_id: str | None = None


class PolicyDeny(_Correlated):
    """policy.deny: a refused request and its hostcap.v1.ErrorReason name."""

    method: str
    reason: str
    message: str
    argv: list[str] | None = None
    path: str | None = None
    #: The file.write this refusal undoes (written, then not committed).
    write_id: str | None = None


class DaemonEvent(_Fields):
    """daemon.start / daemon.stop / daemon.reload."""

    version: str
    tenants: list[str] = Field(default_factory=list)
    config_path: str | None = None
    pid: int | None = None
    #: daemon.stop: why; daemon.reload: "rejected: ..." when a bad config was refused.
    message: str | None = None
    #: daemon.reload only.
    added: list[str] | None = None
    removed: list[str] | None = None
    changed: list[str] | None = None


class AuditRotate(_Fields):
    """audit.rotate: the first record of every rotated-to file."""

    previous_file: str
    previous_seq: int
    previous_hash: str = Field(pattern=r"^[0-9a-f]{64}$")
    open_spawns: list[OpenSpawn] = Field(default_factory=list)


class AuditRecover(_Fields):
    """audit.recover: the writer found a torn final line (a crash mid-write) and
    removed it before continuing the chain."""

    file: str
    torn_bytes: int
    torn_sha256: str


#: The model of each event's own fields (everything but HEADER_FIELDS).
EVENT_FIELDS: Mapping[str, type[_Fields]] = {
    "process.exec": ProcessExec,
    "process.exit": ProcessExit,
    "file.write": FileWrite,
    "policy.deny": PolicyDeny,
    "daemon.start": DaemonEvent,
    "daemon.stop": DaemonEvent,
    "daemon.reload": DaemonEvent,
    "audit.rotate": AuditRotate,
    "audit.recover": AuditRecover,
}
assert set(EVENT_FIELDS) == set(EVENTS)
_FIELD_NAMES = {event: frozenset(model.model_fields) for event, model in EVENT_FIELDS.items()}


class RecordHeader(_Fields):
    """The fields every record carries."""

    schema_: Literal["hostcapd.audit/v1"] = Field(alias="schema")
    event: str
    seq: int = Field(ge=1)
    time: str = Field(pattern=_TIME.pattern)
    event_id: str = Field(min_length=1)
    boot_id: str
    prev_hash: str = Field(pattern=r"^[0-9a-f]{64}$")
    hash: str = Field(pattern=r"^[0-9a-f]{64}$")


def _first_error(error: ValidationError) -> str:
    item = error.errors()[0]
    loc = ".".join(str(p) for p in item["loc"]) or "(record)"
    more = f" (and {error.error_count() - 1} more)" if error.error_count() > 1 else ""
    return f"{loc}: {item['msg']}{more}"


def _model_of(event: str, fields: Mapping[str, Any]) -> type[_Fields]:
    """The event's model, once the field names are ones the writer accepts."""
    model = EVENT_FIELDS.get(event)
    if model is None:
        raise AuditRecordError(f"unknown audit event {event!r}")
    reserved = sorted(HEADER_FIELDS & fields.keys())
    if reserved:
        raise AuditRecordError(f"{event}: {', '.join(reserved)} set by the writer, not the caller")
    unknown = sorted(fields.keys() - _FIELD_NAMES[event])
    if unknown:
        raise AuditRecordError(f"{event}: unknown field(s) {', '.join(unknown)}")
    return model


def _dump_by_model(event: str, model: type[_Fields], fields: Mapping[str, Any]) -> dict[str, Any]:
    try:
        validated = model.model_validate(dict(fields))
    except ValidationError as error:
        raise AuditRecordError(f"{event}: {_first_error(error)}") from None
    return validated.model_dump(mode="json", exclude_none=True)


def validate_event_fields(event: str, fields: Mapping[str, Any]) -> dict[str, Any]:
    """The writer's check: `fields` validated against the event's model, unknown
    and header fields refused, returned as JSON values with unknown values
    (None) left out.

    Plain values of exactly the model's types (what the daemon passes) take
    a fast path; anything else is validated by the model itself. Either way
    the result, or the `AuditRecordError`, is the model's
    (`validate_event_fields_by_model`)."""
    model = _model_of(event, fields)
    fast = _FAST_MODELS.get(event)
    if fast is not None:
        try:
            return fast.convert(fields)
        except _ModelDecides:
            pass
    return _dump_by_model(event, model, fields)


def validate_event_fields_by_model(event: str, fields: Mapping[str, Any]) -> dict[str, Any]:
    """`validate_event_fields` with pydantic validation always: the reference
    its fast path is held to."""
    return _dump_by_model(event, _model_of(event, fields), fields)


def fast_event_fields(event: str, fields: Mapping[str, Any]) -> dict[str, Any] | None:
    """The fast path of `validate_event_fields` alone: its result, or None when
    it leaves the answer to the model (and for names the writer refuses)."""
    fast = _FAST_MODELS.get(event)
    if fast is None:
        return None
    try:
        _model_of(event, fields)
        return fast.convert(fields)
    except (AuditRecordError, _ModelDecides):
        return None


# --- the writer's fast path -----------------------------------------------------
#
# Validating with pydantic and dumping back to JSON values is a large part of
# what a record costs the writer. A check compiled from the same models
# handles values of exactly the declared types: it copies them, adds the
# defaults the dump would add and leaves out None. Anything else (a value
# pydantic would coerce or refuse, an extra nested key, a constrained field)
# it leaves to the model, so the answer is always the model's.


class _ModelDecides(Exception):
    """The fast path cannot vouch for a value: the model must validate it."""


_MISSING: Any = object()
_Convert = Callable[[Any], Any]


def _decline() -> NoReturn:
    raise _ModelDecides


def _str_list(value: Any) -> Any:
    if type(value) is not list or not all(type(item) is str for item in value):
        _decline()
    return list(value)


def _str_dict(value: Any) -> Any:
    if type(value) is not dict or not all(
        type(key) is str and type(item) is str for key, item in value.items()
    ):
        _decline()
    return dict(value)


def _list_of(item: _Convert) -> _Convert:
    def convert(value: Any) -> Any:
        if type(value) is not list:
            _decline()
        return [item(element) for element in value]

    return convert


def _literal(values: frozenset[str]) -> _Convert:
    def convert(value: Any) -> Any:
        if type(value) is not str or value not in values:
            _decline()
        return value

    return convert


def _exact(kind: type) -> _Convert:
    def convert(value: Any) -> Any:
        if type(value) is not kind:
            _decline()
        return value

    return convert


def _converter(annotation: Any) -> _Convert | None:
    """How to check one value of `annotation`, or None when the fast path does
    not handle the type (the model then always decides)."""
    origin, args = get_origin(annotation), get_args(annotation)
    if annotation in (str, int, float, bool):
        # Exactly: pydantic turns a bool into an int, an int into a float.
        return _exact(annotation)
    if origin is Literal and all(type(a) is str for a in args):
        return _literal(frozenset(args))
    if origin is list and len(args) == 1:
        if args[0] is str:
            return _str_list
        item = _converter(args[0])
        return None if item is None else _list_of(item)
    if origin is dict and args == (str, str):
        return _str_dict
    if isinstance(annotation, type) and issubclass(annotation, _Fields):
        nested = _FastModel.compile(annotation)
        return None if nested is None else nested.convert
    return None


# One field: name; the exact type a value must have to be kept as it is (str,
# int, float, bool), or None to use the converter; the converter; whether None is
# left out (an optional field); the dumped default, or _MISSING when a missing
# value is left out; whether it is required.
_Slot = tuple[str, type | None, _Convert, bool, Any, bool]


class _FastModel:
    """One model's fields, compiled to plain type checks."""

    def __init__(self, slots: Sequence[_Slot]) -> None:
        self._slots = tuple(slots)
        self._names = frozenset(slot[0] for slot in slots)

    @classmethod
    def compile(cls, model: type[_Fields]) -> _FastModel | None:
        """The fast check of `model`, or None if it has anything beyond plain
        typed fields (constraints, aliases, validators, other config)."""
        decorators = model.__pydantic_decorators__
        if set(model.model_config) - {"extra", "frozen"} or any(
            (
                decorators.validators,
                decorators.field_validators,
                decorators.root_validators,
                decorators.model_validators,
                decorators.field_serializers,
                decorators.model_serializers,
                decorators.computed_fields,
            )
        ):
            return None
        slots: list[_Slot] = []
        for name, info in model.model_fields.items():
            if info.metadata or info.alias or info.validation_alias or info.serialization_alias:
                return None
            declared: Any = info.annotation
            annotation, optional = declared, False
            if get_origin(annotation) in (Union, UnionType):
                members = [a for a in get_args(annotation) if a is not type(None)]
                if len(members) != 1 or len(get_args(annotation)) != 2:
                    return None
                annotation, optional = members[0], True
            convert = _converter(annotation)
            if convert is None:
                return None
            default = _MISSING
            if not info.is_required():
                dumped = TypeAdapter(declared).dump_python(
                    info.get_default(call_default_factory=True), mode="json", exclude_none=True
                )
                if dumped is not None:
                    default = dumped
            exact = annotation if annotation in (str, int, float, bool) else None
            slots.append((name, exact, convert, optional, default, info.is_required()))
        return cls(slots)

    def convert(self, value: Any) -> dict[str, Any]:
        """`value` as the model would dump it; raises _ModelDecides otherwise."""
        if type(value) is not dict or not self._names.issuperset(value):
            _decline()  # extra keys: the model keeps or refuses them
        out: dict[str, Any] = {}
        get = value.get
        for name, exact, convert, optional, default, required in self._slots:
            item = get(name, _MISSING)
            if item is _MISSING:
                if required:
                    _decline()
                if default is not _MISSING:
                    # Defaults are {}, [], "" or 0: copy the mutable ones.
                    out[name] = copy.deepcopy(default) if type(default) in (dict, list) else default
            elif item is None and optional:
                continue
            elif exact is not None:
                # Inline for the commonest fields: one call less each.
                if type(item) is not exact:
                    _decline()
                out[name] = item
            else:
                out[name] = convert(item)
        return out


_FAST_MODELS: Mapping[str, _FastModel] = {
    event: fast
    for event, model in EVENT_FIELDS.items()
    if (fast := _FastModel.compile(model)) is not None
}


def validate_record(record: Mapping[str, Any]) -> None:
    """The reader's check of a whole record: header and, for a known event, its
    fields. Unknown events and unknown fields are accepted (forward compatibility)."""
    try:
        RecordHeader.model_validate(record)
        model = EVENT_FIELDS.get(str(record.get("event")))
        if model is not None:
            model.model_validate(record)
    except ValidationError as error:
        raise AuditRecordError(_first_error(error)) from None


def check_line(raw: bytes) -> dict[str, Any]:
    """Parse a stored line and check it on its own: canonical form, hash,
    schema. Raises `AuditRecordError`; its message says which."""
    record = parse_line(raw)
    if canonical_bytes(record) != raw:
        raise _Edited("the line is not in canonical form: its bytes were changed")
    if "hash" not in record:
        raise AuditRecordError("record has no hash")
    if record_hash(record) != record["hash"]:
        raise _Edited("its content does not match its hash")
    validate_record(record)
    return record


class _Edited(AuditRecordError):
    pass


# --- reading -------------------------------------------------------------------


@dataclass(frozen=True)
class StoredLine:
    """One line of an audit file: its 1-based number and bytes (no newline);
    `complete` is False for a final line with no newline (a torn write)."""

    number: int
    raw: bytes
    complete: bool


def read_lines(path: Path) -> list[StoredLine]:
    """Every line of `path`; a final line without a newline is marked incomplete."""
    try:
        data = path.read_bytes()
    except OSError as error:
        raise AuditFileError(f"{path}: {error.strerror}") from None
    parts = data.split(b"\n")
    lines = [StoredLine(i, raw, True) for i, raw in enumerate(parts[:-1], 1)]
    if parts[-1]:
        lines.append(StoredLine(len(parts), parts[-1], False))
    return lines


class RecordReader:
    """The records of audit files in chain order (see `chain_order`), read
    leniently and streamed line by line (for query and tail): unreadable lines
    are skipped and listed in `skipped`, a torn final line sets `torn_tail`.

    Iterate it once; `skipped` and `torn_tail` are complete after that."""

    def __init__(self, paths: Sequence[Path]) -> None:
        self.paths = chain_order(paths)
        self.skipped: list[tuple[Path, int]] = []
        self.torn_tail = False

    def __iter__(self) -> Iterator[dict[str, Any]]:
        for path in self.paths:
            try:
                with path.open("rb") as f:
                    for number, raw in enumerate(f, 1):
                        if not raw.endswith(b"\n"):
                            self.torn_tail = True
                            break
                        try:
                            yield parse_line(raw[:-1])
                        except AuditRecordError:
                            self.skipped.append((path, number))
            except OSError as error:
                raise AuditFileError(f"{path}: {error.strerror}") from None


def iter_records(paths: Sequence[Path]) -> Iterator[dict[str, Any]]:
    """The records of `paths` in chain order; unreadable lines are skipped."""
    yield from RecordReader(paths)


def tail_records(path: Path, count: int, *, block: int = 64 * 1024) -> list[dict[str, Any]]:
    """The last `count` records of one file, read from its end (a torn final
    line and unreadable lines are skipped)."""
    if count <= 0:
        return []
    try:
        with path.open("rb") as f:
            end = f.seek(0, 2)
            data = b""
            pos = end
            # Read backwards until count + 1 newlines are in hand (the +1 makes
            # the earliest line complete) or the start of the file is reached.
            while pos > 0 and data.count(b"\n") <= count:
                step = min(block, pos)
                pos -= step
                f.seek(pos)
                data = f.read(step) + data
    except OSError as error:
        raise AuditFileError(f"{path}: {error.strerror}") from None
    parts = data.split(b"\n")
    complete = parts[:-1]  # the last part is b"" or a torn line
    if pos > 0:
        complete = complete[1:]  # may start mid-line
    records: list[dict[str, Any]] = []
    for raw in complete[-count:]:
        try:
            records.append(parse_line(raw))
        except AuditRecordError:
            continue
    return records


def _first_seq(path: Path) -> int | None:
    try:
        with path.open("rb") as f:
            first = f.readline()
    except OSError as error:
        raise AuditFileError(f"{path}: {error.strerror}") from None
    if not first.endswith(b"\n"):
        return None
    try:
        seq = parse_line(first[:-1]).get("seq")
    except AuditRecordError:
        return None
    return seq if isinstance(seq, int) else None


def chain_order(paths: Sequence[Path]) -> list[Path]:
    """`paths` without duplicates, ordered by the seq of each file's first
    record (the order the chain runs through them). Files whose first line
    is unreadable keep their place after the readable ones."""
    unique: dict[Path, None] = {}
    for path in paths:
        unique.setdefault(Path(path), None)
    keyed = [(_first_seq(p), i, p) for i, p in enumerate(unique)]
    return [p for _, _, p in sorted(keyed, key=lambda k: (k[0] is None, k[0] or 0, k[1]))]


# --- verification --------------------------------------------------------------


class Problem(StrEnum):
    """Why a line breaks the chain."""

    #: The line's bytes changed (hash mismatch, not canonical), or it was
    #: rewritten with a recomputed hash (the next line no longer links to it).
    EDITED = "edited"
    #: One or more records are missing before this line.
    DELETED = "deleted"
    #: Records are out of seq order (moved or duplicated).
    REORDERED = "reordered"
    #: An incomplete line that is not the final line of the log.
    TORN = "torn"
    #: A JSON object that is not a valid record (hash intact: a writer bug or forgery).
    MALFORMED = "malformed"
    #: A file does not continue the chain of the file before it.
    CHAIN_BROKEN = "chain-broken"


@dataclass(frozen=True)
class Failure:
    """The first bad line found: where, what kind of damage, in words."""

    path: Path
    line: int
    problem: Problem
    detail: str
    seq: int | None = None

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.problem.value}: {self.detail}"


@dataclass(frozen=True)
class TornTail:
    """An incomplete final line (a crash mid-write), tolerated and ignored."""

    path: Path
    line: int
    size: int


@dataclass(frozen=True)
class VerifyReport:
    """The result of walking a chain through one or more files."""

    files: tuple[Path, ...]
    records: int
    first_seq: int | None
    last_seq: int | None
    last_hash: str | None
    #: "genesis" when the chain starts at the first record ever written, else
    #: "rotation from NAME" (the files before it were not given or were pruned).
    anchor: str | None
    torn_tail: TornTail | None
    failure: Failure | None

    @property
    def ok(self) -> bool:
        return self.failure is None

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready form (for ``hostcapctl audit verify --json``)."""
        failure = self.failure
        torn = self.torn_tail
        return {
            "ok": self.ok,
            "files": [str(p) for p in self.files],
            "records": self.records,
            "first_seq": self.first_seq,
            "last_seq": self.last_seq,
            "last_hash": self.last_hash,
            "anchor": self.anchor,
            "torn_tail": None
            if torn is None
            else {"file": str(torn.path), "line": torn.line, "bytes": torn.size},
            "failure": None
            if failure is None
            else {
                "file": str(failure.path),
                "line": failure.line,
                "problem": failure.problem.value,
                "detail": failure.detail,
                "seq": failure.seq,
            },
        }


class _Stop(Exception):
    def __init__(self, failure: Failure) -> None:
        self.failure = failure


class _Walker:
    """Walks records in order, keeping the chain head."""

    def __init__(self) -> None:
        self.records = 0
        self.first_seq: int | None = None
        self.anchor: str | None = None
        self.seq: int | None = None
        self.hash: str | None = None
        self.line: int = 0  # line of the chain head in the current file
        self.path: Path | None = None

    def fail(
        self, path: Path, line: int, problem: Problem, detail: str, seq: int | None
    ) -> NoReturn:
        raise _Stop(Failure(path, line, problem, detail, seq))

    def accept(self, record: dict[str, Any], path: Path, line: int) -> None:
        seq = record["seq"]
        if self.first_seq is None:
            self.first_seq = seq
        self.records += 1
        self.seq = seq
        self.hash = record["hash"]
        self.line = line
        self.path = path

    def start_file(self, path: Path, record: dict[str, Any], first_file: bool) -> None:
        """Check the first record of a file: the chain's anchor or a rotation link."""
        seq = record["seq"]
        if record["event"] == "audit.rotate":
            self._check_rotate_header(path, record)
            if first_file:
                self.anchor = f"rotation from {record['previous_file']}"
            elif record["previous_seq"] != self.seq or record["previous_hash"] != self.hash:
                self.fail(
                    path,
                    1,
                    Problem.CHAIN_BROKEN,
                    f"continues from {record['previous_file']} at seq {record['previous_seq']}, "
                    f"but the file before it ({self.path}) ends at seq {self.seq} with another "
                    "hash: a file is missing or was altered",
                    seq,
                )
            return
        if first_file and seq == 1 and record["prev_hash"] == GENESIS_HASH:
            self.anchor = "genesis"
            return
        if first_file and seq <= 1:
            self.fail(path, 1, Problem.EDITED, "seq 1 does not link to the genesis hash", seq)
        if first_file:
            missing = "seq 1" if seq == 2 else f"seq 1..{seq - 1}"
            self.fail(
                path,
                1,
                Problem.DELETED,
                f"record(s) {missing} missing: the file starts at seq {seq} with neither "
                "the genesis record nor an audit.rotate",
                1,
            )
        self.fail(
            path,
            1,
            Problem.CHAIN_BROKEN,
            f"the file does not start with an audit.rotate record continuing {self.path}",
            seq,
        )

    def _check_rotate_header(self, path: Path, record: dict[str, Any]) -> None:
        if record["prev_hash"] != record["previous_hash"] or record["seq"] != (
            record["previous_seq"] + 1
        ):
            self.fail(
                path,
                1,
                Problem.MALFORMED,
                "audit.rotate does not link to the previous file it names",
                record["seq"],
            )

    def next_record(
        self, path: Path, lines: list[StoredLine], index: int, record: dict[str, Any]
    ) -> None:
        """Check a record that follows the chain head in the same file."""
        line = lines[index].number
        seq = record["seq"]
        assert self.seq is not None
        expected = self.seq + 1
        if record["event"] == "audit.rotate":
            self.fail(
                path,
                line,
                Problem.MALFORMED,
                "audit.rotate inside a file (it may only start one)",
                seq,
            )
        if seq != expected:
            where = _find_seq(lines, index + 1, expected)
            if seq < expected:
                self.fail(
                    path,
                    line,
                    Problem.REORDERED,
                    f"holds seq {seq} after seq {self.seq}: the line was moved or duplicated",
                    seq,
                )
            if where is not None:
                self.fail(
                    path,
                    line,
                    Problem.REORDERED,
                    f"holds seq {seq} where seq {expected} was expected; seq {expected} "
                    f"is at line {where}: lines were reordered",
                    seq,
                )
            missing = f"seq {expected}" if seq == expected + 1 else f"seq {expected}..{seq - 1}"
            self.fail(
                path,
                line,
                Problem.DELETED,
                f"record(s) {missing} missing before this line (it holds seq {seq})",
                expected,
            )
        if record["prev_hash"] != self.hash:
            self.fail(
                path,
                self.line,
                Problem.EDITED,
                f"line {line} (seq {seq}) does not link to this line's hash: this line "
                "was rewritten with a recomputed hash (or line "
                f"{line}'s prev_hash was)",
                self.seq,
            )


def _find_seq(lines: list[StoredLine], start: int, seq: int) -> int | None:
    for line in lines[start:]:
        if not line.complete:
            break
        try:
            if parse_line(line.raw).get("seq") == seq:
                return line.number
        except AuditRecordError:
            continue
    return None


def verify_files(paths: Sequence[Path]) -> VerifyReport:
    """Walk the chain through `paths` (given in any order: they are put in
    chain order) and report the first bad line, if any.

    Tolerates exactly one torn final line, at the end of the last file. Raises
    `AuditFileError` when a file cannot be read."""
    order = chain_order(paths)
    walker = _Walker()
    torn: TornTail | None = None
    failure: Failure | None = None
    try:
        first_file = True
        for position, path in enumerate(order):
            lines = read_lines(path)
            last_file = position == len(order) - 1
            for index, stored in enumerate(lines):
                if not stored.complete:
                    if not last_file:
                        walker.fail(
                            path,
                            stored.number,
                            Problem.TORN,
                            "the file ends in an incomplete line, yet a later file continues "
                            "the chain",
                            None,
                        )
                    torn = TornTail(path, stored.number, len(stored.raw))
                    break
                try:
                    record = check_line(stored.raw)
                except _Edited as error:
                    walker.fail(path, stored.number, Problem.EDITED, str(error), None)
                except AuditRecordError as error:
                    problem = Problem.MALFORMED
                    detail = str(error)
                    try:
                        parse_line(stored.raw)
                    except AuditRecordError:
                        problem = Problem.TORN if stored.raw else Problem.MALFORMED
                        detail = (
                            f"not a complete record ({error}): a torn write followed by more "
                            "records, or garbage"
                            if stored.raw
                            else "empty line"
                        )
                    walker.fail(path, stored.number, problem, detail, None)
                if index == 0:
                    walker.start_file(path, record, first_file)
                    first_file = False
                else:
                    walker.next_record(path, lines, index, record)
                walker.accept(record, path, stored.number)
    except _Stop as stop:
        failure = stop.failure
    return VerifyReport(
        files=tuple(order),
        records=walker.records,
        first_seq=walker.first_seq,
        last_seq=walker.seq,
        last_hash=walker.hash,
        anchor=walker.anchor,
        torn_tail=torn,
        failure=failure,
    )
