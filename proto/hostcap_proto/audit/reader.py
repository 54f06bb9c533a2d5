"""Reading audit files: stored lines, records in chain order, the tail."""

from __future__ import annotations

import gzip
import hashlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, cast

from hostcap_proto.audit.canonical import parse_line
from hostcap_proto.audit.schema import AuditRecordError


class AuditFileError(Exception):
    """An audit file cannot be read (missing, permission, I/O error)."""


@dataclass(frozen=True)
class StoredLine:
    """One line of an audit file: its 1-based number and bytes (no newline);
    `complete` is False for a final line with no newline (a torn write)."""

    number: int
    raw: bytes
    complete: bool


#: What a rotated file compressed by retention ends with.
COMPRESSED_SUFFIX = ".gz"


def open_audit_file(path: Path) -> IO[bytes]:
    """`path` opened for reading its lines: a `.gz` one (a rotated file that
    retention compressed) decompressed as it is read."""
    if path.name.endswith(COMPRESSED_SUFFIX):
        return cast(IO[bytes], gzip.open(path, "rb"))
    return path.open("rb")


def read_audit_bytes(path: Path) -> bytes:
    """The whole content of an audit file, decompressed if it is `.gz`.
    Raises OSError (a corrupt `.gz` too: EOFError and BadGzipFile become one)."""
    if not path.name.endswith(COMPRESSED_SUFFIX):
        return path.read_bytes()
    try:
        with gzip.open(path, "rb") as f:
            return f.read()
    except (EOFError, gzip.BadGzipFile) as error:
        raise OSError(0, f"corrupt compressed file: {error}") from None


def read_lines(path: Path) -> list[StoredLine]:
    """Every line of `path`; a final line without a newline is marked incomplete."""
    try:
        data = read_audit_bytes(path)
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
                with open_audit_file(path) as f:
                    for number, raw in enumerate(f, 1):
                        if not raw.endswith(b"\n"):
                            self.torn_tail = True
                            break
                        try:
                            yield parse_line(raw[:-1])
                        except AuditRecordError:
                            self.skipped.append((path, number))
            except (OSError, EOFError) as error:
                reason = getattr(error, "strerror", None) or str(error)
                raise AuditFileError(f"{path}: {reason}") from None


def iter_records(paths: Sequence[Path]) -> Iterator[dict[str, Any]]:
    """The records of `paths` in chain order; unreadable lines are skipped."""
    yield from RecordReader(paths)


def tail_records(path: Path, count: int, *, block: int = 64 * 1024) -> list[dict[str, Any]]:
    """The last `count` records of one file, read from its end (a torn final
    line and unreadable lines are skipped)."""
    if count <= 0:
        return []
    if path.name.endswith(COMPRESSED_SUFFIX):
        try:
            lines = read_audit_bytes(path).split(b"\n")[:-1]
        except OSError as error:
            raise AuditFileError(f"{path}: {error.strerror}") from None
        found: list[dict[str, Any]] = []
        for raw in reversed(lines):
            if len(found) == count:
                break
            try:
                found.append(parse_line(raw))
            except AuditRecordError:
                continue
        return found[::-1]
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
        with open_audit_file(path) as f:
            first = f.readline()
    except (EOFError, gzip.BadGzipFile):
        return None
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
    is unreadable keep their place after the readable ones.

    A duplicate is the same path given twice, or a file whose content
    (decompressed) is that of another file given: an archived copy of a file
    still kept beside the log (``verify ARCHIVE/* audit.jsonl*``), a plain
    file and its ``.gz``. The first given is kept. Only files that start at
    the same seq are compared, so this reads nothing more in the usual case."""
    unique: dict[Path, None] = {}
    for path in paths:
        unique.setdefault(Path(path), None)
    keyed = [(_first_seq(p), i, p) for i, p in enumerate(unique)]
    starts: dict[int, list[Path]] = {}
    for seq, _, path in keyed:
        if seq is not None:
            starts.setdefault(seq, []).append(path)
    copies: set[Path] = set()
    for same_start in starts.values():
        if len(same_start) > 1:
            copies.update(_copies(same_start))
    ordered = sorted(keyed, key=lambda k: (k[0] is None, k[0] or 0, k[1]))
    return [p for _, _, p in ordered if p not in copies]


def _copies(paths: list[Path]) -> list[Path]:
    """The paths whose content is that of a path before them."""
    seen: set[bytes] = set()
    copies: list[Path] = []
    for path in paths:
        try:
            digest = hashlib.sha256(read_audit_bytes(path)).digest()
        except OSError:
            continue  # unreadable: verify reports it where it reads it
        if digest in seen:
            copies.append(path)
        seen.add(digest)
    return copies
