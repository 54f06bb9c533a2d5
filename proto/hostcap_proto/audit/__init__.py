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

The package by job: `schema` (the names: events, outcomes, header fields,
journald ids), `canonical` (canonical bytes, hash, seal, the strict line
parser), `models` (the pydantic model of each event), `fast` (the writer's
check, a fast path held to the models), `reader` (files, chain order, the
tail) and `verify` (`check_line`, `verify_files`). Every public name is
importable from the package itself.
"""

from hostcap_proto.audit.canonical import (
    canonical_bytes,
    encode_line,
    fast_encodable,
    parse_line,
    record_hash,
    seal,
    sealed_line,
)
from hostcap_proto.audit.fast import (
    checked_event_fields,
    fast_event_fields,
    validate_event_fields,
)
from hostcap_proto.audit.filters import (
    FilterError,
    check_event,
    resolve_spawn,
    tenants_of,
    unknown_tenant,
)
from hostcap_proto.audit.models import (
    EVENT_FIELDS,
    AppliedLimits,
    AuditRecover,
    AuditRotate,
    DaemonEvent,
    EnvironmentEvent,
    Executable,
    FileWrite,
    NetworkConnect,
    OpenSpawn,
    PolicyDeny,
    ProcessExec,
    ProcessExit,
    Protection,
    RecordHeader,
    Rusage,
    StreamBytes,
    validate_event_fields_by_model,
    validate_record,
)
from hostcap_proto.audit.reader import (
    COMPRESSED_SUFFIX,
    AuditFileError,
    RecordReader,
    StoredLine,
    chain_order,
    iter_records,
    open_audit_file,
    read_audit_bytes,
    read_lines,
    tail_records,
)
from hostcap_proto.audit.schema import (
    EVENTS,
    GENESIS_HASH,
    HEADER_FIELDS,
    JOURNAL_MESSAGE_IDS,
    OUTCOMES,
    REDACTED,
    SCHEMA,
    AuditRecordError,
    EventName,
    OutcomeName,
    argv_sha256,
)
from hostcap_proto.audit.verify import (
    Failure,
    Problem,
    TornTail,
    VerifyReport,
    check_line,
    verify_files,
)

__all__ = [
    "COMPRESSED_SUFFIX",
    "EVENTS",
    "EVENT_FIELDS",
    "GENESIS_HASH",
    "HEADER_FIELDS",
    "JOURNAL_MESSAGE_IDS",
    "OUTCOMES",
    "REDACTED",
    "SCHEMA",
    "AppliedLimits",
    "AuditFileError",
    "AuditRecordError",
    "AuditRecover",
    "AuditRotate",
    "DaemonEvent",
    "EnvironmentEvent",
    "EventName",
    "Executable",
    "Failure",
    "FileWrite",
    "FilterError",
    "NetworkConnect",
    "OpenSpawn",
    "OutcomeName",
    "PolicyDeny",
    "Problem",
    "ProcessExec",
    "ProcessExit",
    "Protection",
    "RecordHeader",
    "RecordReader",
    "Rusage",
    "StoredLine",
    "StreamBytes",
    "TornTail",
    "VerifyReport",
    "argv_sha256",
    "canonical_bytes",
    "chain_order",
    "check_event",
    "check_line",
    "checked_event_fields",
    "encode_line",
    "fast_encodable",
    "fast_event_fields",
    "iter_records",
    "open_audit_file",
    "parse_line",
    "read_audit_bytes",
    "read_lines",
    "record_hash",
    "resolve_spawn",
    "seal",
    "sealed_line",
    "tail_records",
    "tenants_of",
    "unknown_tenant",
    "validate_event_fields",
    "validate_event_fields_by_model",
    "validate_record",
    "verify_files",
]
