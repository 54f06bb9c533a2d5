"""Mirror of audit records to the systemd journal (native protocol, stdlib only).

Each record becomes one journal entry with a fixed ``MESSAGE_ID`` per event
type (`hostcap_proto.audit.JOURNAL_MESSAGE_IDS`), ``HOSTCAP_*`` fields for
the common ones, and ``HOSTCAP_RECORD`` holding the canonical line itself.
The mirror is never required and never blocks: the socket is non-blocking
and an entry journald cannot take right now is dropped and counted.
"""

from __future__ import annotations

import array
import contextlib
import errno
import fcntl
import os
import socket
import struct
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from hostcap_proto.audit import JOURNAL_MESSAGE_IDS

#: Where journald listens for native-protocol datagrams.
JOURNAL_SOCKET = Path("/run/systemd/journal/socket")

_PRIORITY_INFO = 6
_PRIORITY_NOTICE = 5
_PRIORITY_WARNING = 4
_MESSAGE_MAX = 1024

# Common record fields copied into HOSTCAP_<NAME> journal fields.
_COPIED = (
    "event",
    "seq",
    "event_id",
    "boot_id",
    "run_id",
    "hash",
    "prev_hash",
    "tenant",
    "spawn_id",
    "request_id",
    "outcome",
    "exit_code",
    "signal",
    "pid",
    "method",
    "reason",
    "path",
)


def _field(name: str, value: str) -> bytes:
    return _field_bytes(name.encode(), value.encode("utf-8", "replace"))


def _field_bytes(name: bytes, data: bytes) -> bytes:
    if b"\n" not in data:
        return name + b"=" + data + b"\n"
    # Values with newlines: name, newline, little-endian 64-bit size, bytes, newline.
    return name + b"\n" + struct.pack("<Q", len(data)) + data + b"\n"


# What is the same in every entry, encoded once.
_COPIED_NAMES = tuple((key, b"HOSTCAP_" + key.upper().encode()) for key in _COPIED)
_IDENTIFIER = _field("SYSLOG_IDENTIFIER", "hostcapd")
_MESSAGE_ID_FIELDS = {
    event: _field("MESSAGE_ID", message_id) for event, message_id in JOURNAL_MESSAGE_IDS.items()
}
_PRIORITY_FIELDS = {
    priority: _field("PRIORITY", str(priority))
    for priority in (_PRIORITY_INFO, _PRIORITY_NOTICE, _PRIORITY_WARNING)
}


def _summary(record: Mapping[str, Any]) -> str:
    event = record.get("event", "?")
    parts = [f"audit {event}"]
    for key in ("tenant", "spawn_id", "outcome", "reason", "method", "path"):
        if key in record:
            parts.append(f"{key}={record[key]}")
    if "argv" in record:
        parts.append("argv=" + " ".join(str(a) for a in record["argv"]))
    text = " ".join(parts)
    return text if len(text) <= _MESSAGE_MAX else text[: _MESSAGE_MAX - 3] + "..."


def journal_entry(record: Mapping[str, Any], line: bytes) -> bytes:
    """The native-protocol datagram for one record (`line` is its canonical form)."""
    event = str(record.get("event", ""))
    priority = _PRIORITY_INFO
    if event == "policy.deny":
        priority = _PRIORITY_NOTICE
    elif event == "audit.recover":
        priority = _PRIORITY_WARNING
    fields = [_field("MESSAGE", _summary(record)), _PRIORITY_FIELDS[priority], _IDENTIFIER]
    message_id = _MESSAGE_ID_FIELDS.get(event)
    if message_id is not None:
        fields.append(message_id)
    for key, name in _COPIED_NAMES:
        if key in record:
            fields.append(_field_bytes(name, str(record[key]).encode("utf-8", "replace")))
    record_bytes = line.rstrip(b"\n")
    # The journal wants text; the check costs less than decoding and encoding
    # the line again.
    if not record_bytes.isascii():
        record_bytes.decode("utf-8")  # raises on a line that is not UTF-8, as before
    fields.append(_field_bytes(b"HOSTCAP_RECORD", record_bytes))
    return b"".join(fields)


class JournalMirror:
    """Sends entries to journald's socket, never blocking, dropping on failure."""

    def __init__(self, socket_path: Path = JOURNAL_SOCKET) -> None:
        self.socket_path = socket_path
        #: Entries journald did not take (absent, busy, too large).
        self.dropped = 0
        self.sent = 0
        self._sock = socket.socket(
            socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_NONBLOCK | socket.SOCK_CLOEXEC
        )

    @classmethod
    def for_setting(cls, setting: str, socket_path: Path = JOURNAL_SOCKET) -> JournalMirror | None:
        """The mirror the audit setting asks for: "off" none, "on" always (entries
        are dropped while journald is absent), "auto" when the socket exists."""
        if setting == "off" or (setting == "auto" and not socket_path.exists()):
            return None
        return cls(socket_path)

    def send(self, record: Mapping[str, Any], line: bytes) -> None:
        """Mirror one record. Never raises, never blocks."""
        try:
            payload = journal_entry(record, line)
        except (UnicodeDecodeError, ValueError):
            self.dropped += 1
            return
        try:
            self._sock.sendto(payload, str(self.socket_path))
            self.sent += 1
            return
        except OSError as error:
            if error.errno not in (errno.EMSGSIZE, errno.ENOBUFS):
                self.dropped += 1  # absent, refused, or busy (EAGAIN): never wait
                return
        self._send_memfd(payload)

    def _send_memfd(self, payload: bytes) -> None:
        # Too large for a datagram: journald accepts a sealed memfd instead.
        try:
            fd = os.memfd_create("hostcap-audit", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
        except OSError:
            self.dropped += 1
            return
        try:
            os.write(fd, payload)
            seals = fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_WRITE | fcntl.F_SEAL_SEAL
            fcntl.fcntl(fd, fcntl.F_ADD_SEALS, seals)
            rights = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [fd]).tobytes())]
            self._sock.sendmsg([], rights, 0, str(self.socket_path))
            self.sent += 1
        except OSError:
            self.dropped += 1
        finally:
            os.close(fd)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self._sock.close()
