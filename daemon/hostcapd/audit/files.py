"""The log's files: rotated names, the tail read at start-up, mode and group,
the writer's lock, and where a chain continues from when the current file is empty."""

from __future__ import annotations

import fcntl
import grp
import logging
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hostcap_proto.audit import SCHEMA, AuditRecordError, parse_line

from hostcapd.audit.errors import AuditUnavailable

_log = logging.getLogger("hostcapd.audit")

_TAIL_BLOCK = 64 * 1024


@dataclass
class Recovered:
    torn_bytes: int
    torn_sha256: str


def _rotated_pattern(name: str) -> re.Pattern[str]:
    return re.compile(re.escape(name) + r"\.(\d+)(\.gz)?")


def rotated_seq(path: Path) -> int:
    """The last seq a rotated file holds: its name's number (`audit.jsonl.000000012345[.gz]`)."""
    return int(path.name.removesuffix(".gz").rsplit(".", 1)[1])


def rotated_files(path: Path) -> list[Path]:
    """The rotated files of the log at `path`, oldest first. A file being
    compressed shows once: the plain one, until it is gone."""
    pattern = _rotated_pattern(path.name)
    try:
        names = os.listdir(path.parent)
    except OSError:
        return []
    found: dict[int, str] = {}
    for n in names:
        m = pattern.fullmatch(n)
        if m and (int(m.group(1)) not in found or not m.group(2)):
            found[int(m.group(1))] = n
    return [path.parent / found[seq] for seq in sorted(found)]


def read_tail(fd: int, size: int) -> tuple[bytes | None, int, bytes]:
    """The last complete line of the file (None if none), the offset where the
    bytes after it start, and those bytes (a torn line, normally empty)."""
    buf = b""
    pos = size
    while buf.count(b"\n") < 2 and pos > 0:
        step = min(_TAIL_BLOCK, pos)
        pos -= step
        buf = os.pread(fd, step, pos) + buf
    last_nl = buf.rfind(b"\n")
    if last_nl < 0:
        return None, pos, buf
    prev_nl = buf.rfind(b"\n", 0, last_nl)
    return buf[prev_nl + 1 : last_nl], pos + last_nl + 1, buf[last_nl + 1 :]


def chain_head(line: bytes, path: Path) -> dict[str, Any]:
    """The chain head a log's last line gives: fails closed on garbage."""
    try:
        record = parse_line(line)
    except AuditRecordError as error:
        raise AuditUnavailable(
            f"the last line of {path} is not an audit record ({error}); "
            "move the file aside to start a new chain"
        ) from None
    seq, digest = record.get("seq"), record.get("hash")
    if not isinstance(seq, int) or not isinstance(digest, str) or record.get("schema") != SCHEMA:
        raise AuditUnavailable(
            f"the last record of {path} is not a chained {SCHEMA} record; "
            "move the file aside to start a new chain"
        )
    return record


def resolve_group(group: int | str | None) -> int | None:
    if group is None or isinstance(group, int):
        return group
    try:
        return grp.getgrnam(group).gr_gid
    except KeyError:
        return None  # "when it exists": a host without the group keeps root's


def apply_ownership(fd: int, path: Path, mode: int, gid: int | None) -> None:
    """Give an audit file its configured mode and group (also an existing one)."""
    os.fchmod(fd, mode)
    if gid is not None and os.fstat(fd).st_gid != gid:
        try:
            os.fchown(fd, -1, gid)
        except PermissionError:
            _log.warning("cannot give %s group %d (not permitted)", path, gid)


def open_lock(path: Path, mode: int, gid: int | None) -> int:
    lock_path = path.with_name(f".{path.name}.lock")
    try:
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    except OSError as error:
        raise AuditUnavailable(f"cannot open audit log {path}: {error.strerror}") from None
    try:
        apply_ownership(fd, lock_path, mode, gid)
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise AuditUnavailable(
            f"audit log {path} is held by another writer (another hostcapd?)"
        ) from None
    except OSError as error:
        os.close(fd)
        raise AuditUnavailable(f"cannot lock audit log {path}: {error.strerror}") from None
    return fd
