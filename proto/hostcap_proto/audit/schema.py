"""The names of the ``hostcapd.audit/v1`` schema: events, outcomes, the
header fields, journald message ids, and the error a bad record raises."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping, Sequence
from typing import Literal, get_args

from hostcap_proto import names
from hostcap_proto.names import OutcomeName as OutcomeName

SCHEMA = "hostcapd.audit/v1"
#: ``prev_hash`` of the very first record of a log.
GENESIS_HASH = "0" * 64
#: What a redacted secret (or the secret part of a value) is replaced with.
REDACTED = "[REDACTED]"


def argv_sha256(argv: Sequence[str]) -> str:
    """The digest an exec record's ``argv_sha256`` holds: sha256 over every
    element's UTF-8 bytes, each followed by one NUL byte, in order (the
    strings execve(2) copies into the new program's memory). ``["sh", "-c",
    "x"]`` hashes ``b"sh\\0-c\\0x\\0"``; an empty argv hashes no bytes."""
    if not argv:
        return hashlib.sha256().hexdigest()
    # One encode of the joined text: the same bytes as element by element.
    joined = "\0".join(argv) + "\0"
    return hashlib.sha256(joined.encode("utf-8", "surrogateescape")).hexdigest()


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
    "audit.prune",
    "fs.changes",
    "network.connect",
    "environment.open",
    "environment.close",
    "process.input",
    "admin.call",
]
EVENTS: tuple[str, ...] = get_args(EventName)

#: The names of ``hostcap.v1.Outcome`` (defined once, in `hostcap_proto.names`).
OUTCOMES: tuple[str, ...] = names.OUTCOMES

#: The fields the writer sets on every record; callers never pass them.
HEADER_FIELDS: frozenset[str] = frozenset(
    {"schema", "event", "seq", "time", "event_id", "boot_id", "run_id", "prev_hash", "hash"}
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
    "audit.prune": "6b3c1f0e8d2a4e0fa2b7c9d41e5f6a0a",
    "fs.changes": "6b3c1f0e8d2a4e0fa2b7c9d41e5f6a0b",
    "network.connect": "6b3c1f0e8d2a4e0fa2b7c9d41e5f6a0c",
    "environment.open": "6b3c1f0e8d2a4e0fa2b7c9d41e5f6a0d",
    "environment.close": "6b3c1f0e8d2a4e0fa2b7c9d41e5f6a0e",
    "process.input": "6b3c1f0e8d2a4e0fa2b7c9d41e5f6a0f",
    "admin.call": "6b3c1f0e8d2a4e0fa2b7c9d41e5f6a10",
}

_HASH = re.compile(r"[0-9a-f]{64}")
_TIME = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{6}Z")


class AuditRecordError(ValueError):
    """A record (or a line) is not a valid hostcapd.audit/v1 record."""
