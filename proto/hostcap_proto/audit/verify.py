"""Verifying audit files: each line on its own (`check_line`), then the chain
across lines and files (`verify_files`, which names the first bad line)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any, NoReturn

from hostcap_proto.audit.canonical import canonical_bytes, parse_line, record_hash
from hostcap_proto.audit.models import validate_record
from hostcap_proto.audit.reader import StoredLine, chain_order, read_lines
from hostcap_proto.audit.schema import GENESIS_HASH, AuditRecordError


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
