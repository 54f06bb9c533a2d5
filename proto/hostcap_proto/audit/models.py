"""The pydantic model of each event's fields and of the record header, and
validation by them (the reference the writer's fast path is held to)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from hostcap_proto.audit.schema import (
    _TIME,
    EVENTS,
    HEADER_FIELDS,
    AuditRecordError,
    OutcomeName,
)
from hostcap_proto.limits import LimitValues
from hostcap_proto.names import ProtectionName


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

    name: ProtectionName
    applied: bool
    reason: str = ""
    required: bool | None = None


# mypy reads a model as a non-frozen dataclass (frozenness is model_config's):
# what is inherited here is only the fields.
class AppliedLimits(_Fields, LimitValues):  # type: ignore[misc]
    """Limits as applied: the fields of `hostcap_proto.limits.LimitValues`
    (hostcap.v1.Limits field names)."""


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


class Caller(_Fields):
    """Who made the call that caused a record: the process at the other end
    of the client's connection, as the tenant's (or the admin socket's)
    front-end read it with SO_PEERCRED when it accepted the connection. The
    front-end's word, as trustworthy as the front-end (an unprivileged,
    confined process that parses clients' bytes); the pid is the process that
    connected, which may have exited since, or passed the connection on
    (docs/audit.md, "Who asked")."""

    uid: int
    gid: int
    pid: int


class _Correlated(_Fields):
    tenant: str
    spawn_id: str | None = None
    request_id: str | None = None
    labels: dict[str, str] = Field(default_factory=dict)
    #: Who asked (absent when not known: a record no call caused, or a
    #: daemon with record_callers = false).
    caller: Caller | None = None


class ProcessExec(_Correlated):
    """process.exec: written durably before the child is exec'd."""

    spawn_id: str
    #: Redacted (secret-shaped values replaced by REDACTED), then bounded.
    argv: list[str]
    #: Set by the writer: whether argv was cut to bound the record (then argc
    #: is the original number of arguments) and whether anything in it was
    #: redacted. Absent in records written before the flags existed.
    argv_truncated: bool | None = None
    argc: int | None = None
    argv_redacted: bool | None = None
    #: Set by the writer: `argv_sha256` of the argv as given, before any
    #: redaction or cut (hostcap_proto.audit.argv_sha256 says how).
    argv_sha256: str | None = None
    env_names: list[str] = Field(default_factory=list)
    executable: Executable
    cwd: str
    uid: int
    gid: int
    limits: AppliedLimits = AppliedLimits()
    protections: list[Protection] = Field(default_factory=list)
    #: Absent when the record is written before the clone.
    pid: int | None = None


class TerminalSize(_Fields):
    rows: int
    cols: int


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
    #: A tty spawn's terminal size at the end.
    tty: TerminalSize | None = None
    #: A spawn with its input open: the WriteStdin calls that wrote to it, and their bytes.
    input_writes: int | None = None
    input_bytes: int | None = None


class ProcessInput(_Correlated):
    """process.input: one WriteStdin to a spawn, written before its bytes
    reach the command (issue 31). `text` is the input as UTF-8 (other bytes
    backslash-escaped), redacted by the secret rules of argv and cut to the
    config's `[audit] input_text_bytes`; `bytes` and `sha256` are of the
    data as written."""

    spawn_id: str
    #: 1 for the spawn's first write, then 2, 3, ...
    index: int
    bytes: int
    sha256: str
    text: str = ""
    #: Set by the writer: something secret-shaped was redacted; the text was cut.
    text_redacted: bool | None = None
    text_truncated: bool | None = None
    #: The write closed its input (EOF) after the data.
    close: bool = False
    #: Its spawn runs on a terminal: the text is what was typed.
    tty: bool = False


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
    #: A refused spawn's argv: redacted and bounded as process.exec's, with
    #: the same flags and digest, set by the writer.
    argv: list[str] | None = None
    argv_truncated: bool | None = None
    argc: int | None = None
    argv_redacted: bool | None = None
    argv_sha256: str | None = None
    #: A refused spawn's executable as resolved, when resolution got that far;
    #: else `executable_requested`, argv[0] as asked (bounded).
    executable: Executable | None = None
    executable_requested: str | None = None
    #: A refused spawn's cwd: resolved when it was, else as asked.
    cwd: str | None = None
    #: The limits a refused spawn asked for (finite values only), not the tenant's.
    limits_requested: AppliedLimits | None = None
    path: str | None = None
    #: The file.write this refusal undoes (written, then not committed).
    write_id: str | None = None


ChangeKind = Literal["created", "modified", "deleted", "renamed_from", "renamed_to"]


class ChangedPath(_Fields):
    """One path a spawn changed, once, with every kind of change it saw."""

    path: str
    kinds: list[ChangeKind]
    #: A directory (absent for anything else).
    dir: bool | None = None
    #: A regular file that exists when the spawn ends: its size (and sha256
    #: when the tenant's fs_changes.sha256_max_bytes covers it).
    size: int | None = None
    sha256: str | None = None


class ChangeCounts(_Fields):
    """Events by kind (a kind with none is absent)."""

    created: int | None = None
    modified: int | None = None
    deleted: int | None = None
    renamed_from: int | None = None
    renamed_to: int | None = None


class FsChanges(_Correlated):
    """fs.changes: the paths beneath the tenant's roots a spawn created,
    modified, deleted or renamed, written before its process.exit."""

    spawn_id: str
    changes: list[ChangedPath] = Field(default_factory=list)
    paths_listed: int = 0
    #: Events on paths beyond the listed ones (the tenant's max_paths), by kind.
    events_beyond: ChangeCounts = ChangeCounts()
    truncated: bool = False
    #: Events whose directory was gone before it could be named.
    unresolved_events: int = 0
    #: Events on the tenant's file system while it ran that no spawn could be
    #: named for (a process gone before its event was read, without fork tracking).
    unattributed_events: int = 0
    #: Times the kernel's event queue overflowed while it ran (events lost).
    queue_overflows: int = 0
    #: Nothing above happened: the list (and the counts beyond it) is all it changed.
    complete: bool = True


class NetworkConnect(_Correlated):
    """network.connect: one connection a proxy-mode spawn asked its egress
    proxy for, written by the daemon when it ended (a refused one at once),
    from the proxy's report for a spawn the daemon gave that proxy."""

    #: "" for a connection from an environment's namespace (shared by its
    #: spawns: which one asked cannot be told), named by `environment_id`.
    spawn_id: str
    #: "connect" (HTTP CONNECT), "http" (plain HTTP proxying), "socks5"; or a
    #: packet sent past the proxy, always refused: "tcp" (a direct connect),
    #: "udp", "icmp" (a ping), "ip" (another protocol).
    protocol: str
    #: The host and port the spawn asked for, as it asked.
    host: str
    port: int
    #: The address connected to ("" when refused before one was chosen).
    address: str
    #: The rule that decided ("" when none matched).
    rule: str
    allowed: bool
    #: Why, as the spawn was told.
    reason: str
    bytes_up: int
    bytes_down: int
    duration_ms: int
    environment_id: str = ""


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
    #: daemon.reload asked for over the admin socket: who asked (a SIGHUP has none).
    caller: Caller | None = None


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


class PrunedFile(_Fields):
    """A rotated file retention removes: its name, size and sha256 as stored
    (compressed, if it was), and whether `archive_command` took it first."""

    file: str
    size: int
    sha256: str
    archived: bool


class AuditPrune(_Fields):
    """audit.prune: rotated files beyond `keep_files`, written (and fsynced)
    before they are removed, so no file leaves the host without a trace."""

    files: list[PrunedFile]
    keep_files: int
    archive_command: list[str] | None = None


class EnvironmentEvent(_Fields):
    """environment.open / environment.close: a session environment (issue 30)
    whose spawns share a network, IPC and mount namespace."""

    tenant: str
    environment_id: str
    #: open: as granted; close: as they were.
    idle_timeout_s: float
    lifetime_s: float
    labels: dict[str, str] = Field(default_factory=dict)
    #: close only: why ("closed by the client", "idle for 60 s", "lifetime of
    #: 3600 s reached", "the tenant was removed", "the daemon is shutting down").
    reason: str | None = None
    #: close only: the spawns still running in it, which the close ended.
    spawns_ended: list[str] | None = None
    #: Who opened it, or closed it (a client's close only).
    caller: Caller | None = None


class AdminCall(_Fields):
    """admin.call: a call on the admin socket (Kill, TailAudit, QueryAudit;
    a Reload's is its daemon.reload), naming its caller: a Kill's written
    when it arrives, a read's once it has read."""

    #: The AdminService method.
    method: str
    caller: Caller | None = None
    #: Kill: the live spawn it killed, and its tenant.
    spawn_id: str | None = None
    tenant: str | None = None
    #: What it asked for, as asked (never read as a spawn id or a tenant):
    #: QueryAudit's filters the daemon applies (tenant, spawn_id, event,
    #: outcome), a Kill's id that named no live spawn.
    asked: dict[str, str] | None = None
    #: TailAudit's.
    lines: int | None = None
    follow: bool | None = None


#: The model of each event's own fields (everything but HEADER_FIELDS).
EVENT_FIELDS: Mapping[str, type[_Fields]] = {
    "process.exec": ProcessExec,
    "process.exit": ProcessExit,
    "file.write": FileWrite,
    "policy.deny": PolicyDeny,
    "fs.changes": FsChanges,
    "daemon.start": DaemonEvent,
    "daemon.stop": DaemonEvent,
    "daemon.reload": DaemonEvent,
    "audit.rotate": AuditRotate,
    "audit.recover": AuditRecover,
    "audit.prune": AuditPrune,
    "network.connect": NetworkConnect,
    "environment.open": EnvironmentEvent,
    "environment.close": EnvironmentEvent,
    "process.input": ProcessInput,
    "admin.call": AdminCall,
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
    #: The kernel's boot id (/proc/sys/kernel/random/boot_id).
    boot_id: str
    #: The id of the daemon run that wrote the record (absent before it existed).
    run_id: str | None = Field(default=None, pattern=r"^[0-9a-f]{32}$")
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


def validate_event_fields_by_model(event: str, fields: Mapping[str, Any]) -> dict[str, Any]:
    """`validate_event_fields` with pydantic validation always: the reference
    its fast path is held to."""
    return _dump_by_model(event, _model_of(event, fields), fields)


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
