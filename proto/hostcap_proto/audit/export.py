"""Exports that verify: some records of a log, with the chain hashes of the
ones left out (``hostcapd.audit-export/v1``).

An export is JSON Lines, each line canonical JSON:

1. a header: ``{"export": "hostcapd.audit-export/v1", "selection": {...},
   "first_seq": A, "last_seq": B, "records": N, "omitted": M}``;
2. then, in seq order from A to B, every record of the log either as it is
   stored (a selected record: its line, byte for byte) or inside a run of
   left-out records, ``{"omitted": {"first_seq": a, "last_seq": b,
   "prev_hash": P, "hash": H}}``: P is the ``prev_hash`` of seq a (the hash
   of the record before the run), H the ``hash`` of seq b. Nothing else of a
   left-out record is in the export.

`verify_export` checks each selected record on its own (canonical bytes,
its hash recomputed, its schema) and the chain through the whole export:
seq runs from A to B with no gap, and every entry's ``prev_hash`` is the
``hash`` of the entry before it. What that shows, and what it cannot, is in
docs/audit.md ("Exports that verify").
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hostcap_proto.audit.canonical import canonical_bytes, encode_line, parse_line
from hostcap_proto.audit.reader import read_lines
from hostcap_proto.audit.schema import GENESIS_HASH, AuditRecordError
from hostcap_proto.audit.verify import Failure, Problem, VerifyReport, _Edited, check_line

EXPORT_FORMAT = "hostcapd.audit-export/v1"


def export_lines(
    records: Iterable[tuple[Mapping[str, Any], bool]], selection: Mapping[str, Any]
) -> Iterator[bytes]:
    """The lines of an export of `records` (every record of the log, in chain
    order, each with whether it is selected), header last-computed: the
    header is yielded first, so the records are held until the end. Held are
    only the selected lines and one entry per run of left-out ones."""
    body: list[bytes] = []
    first_seq: int | None = None
    last_seq: int | None = None
    selected = omitted = 0
    run: dict[str, Any] | None = None
    for record, chosen in records:
        seq = record.get("seq")
        if not isinstance(seq, int):
            continue
        first_seq = seq if first_seq is None else first_seq
        last_seq = seq
        if chosen:
            if run is not None:
                body.append(encode_line({"omitted": run}))
                run = None
            body.append(encode_line(record))
            selected += 1
            continue
        omitted += 1
        if run is None:
            run = {"first_seq": seq, "prev_hash": record.get("prev_hash")}
        run["last_seq"] = seq
        run["hash"] = record.get("hash")
    if run is not None:
        body.append(encode_line({"omitted": run}))
    header = {
        "export": EXPORT_FORMAT,
        "selection": dict(selection),
        "records": selected,
        "omitted": omitted,
    }
    if first_seq is not None:
        header["first_seq"] = first_seq
        header["last_seq"] = last_seq
    yield encode_line(header)
    yield from body


def is_export(path: Path) -> bool:
    """Whether `path` starts with an export header (else it is a log file)."""
    try:
        with path.open("rb") as f:
            first = f.readline()
        return parse_line(first.rstrip(b"\n")).get("export") is not None
    except (OSError, AuditRecordError):
        return False


@dataclass(frozen=True)
class ExportReport:
    """`verify_export`'s answer: the chain report of the whole export, and
    what the export left out."""

    report: VerifyReport
    omitted: int
    runs: int
    selection: Mapping[str, Any]


class _Bad(Exception):
    def __init__(self, line: int, problem: Problem, detail: str, seq: int | None) -> None:
        self.where = (line, problem, detail, seq)


def verify_export(path: Path) -> ExportReport:
    """Check an export (module docstring). Raises `AuditFileError` when the
    file cannot be read."""
    lines = read_lines(path)
    state: dict[str, Any] = {"records": 0, "omitted": 0, "runs": 0, "first": None, "seq": None,
                             "hash": None, "anchor": None}  # fmt: skip
    selection: Mapping[str, Any] = {}
    failure: Failure | None = None
    try:
        if not lines or not lines[0].complete:
            raise _Bad(1, Problem.MALFORMED, "no export header", None)
        try:
            header = parse_line(lines[0].raw)
        except AuditRecordError as error:
            raise _Bad(
                1, Problem.MALFORMED, f"the export header is unreadable: {error}", None
            ) from None
        if header.get("export") != EXPORT_FORMAT or canonical_bytes(header) != lines[0].raw:
            raise _Bad(1, Problem.MALFORMED, f"not a {EXPORT_FORMAT} header", None)
        selection = header.get("selection") or {}
        for stored in lines[1:]:
            if not stored.complete:
                raise _Bad(
                    stored.number, Problem.TORN, "the export ends in an incomplete line", None
                )
            _walk(stored.raw, stored.number, state)
        _check_totals(header, state, len(lines))
    except _Bad as bad:
        line, problem, detail, seq = bad.where
        failure = Failure(path, line, problem, detail, seq)
    report = VerifyReport(
        files=(path,),
        records=state["records"],
        first_seq=state["first"],
        last_seq=state["seq"],
        last_hash=state["hash"],
        anchor=state["anchor"],
        torn_tail=None,
        failure=failure,
    )
    return ExportReport(report, state["omitted"], state["runs"], selection)


def _walk(raw: bytes, number: int, state: dict[str, Any]) -> None:
    """One entry after the header: a selected record, or a run left out."""
    try:
        entry = parse_line(raw)
    except AuditRecordError as error:
        raise _Bad(number, Problem.MALFORMED, f"not a record: {error}", None) from None
    run = entry.get("omitted")
    if run is not None:
        if (
            set(entry) != {"omitted"}
            or not isinstance(run, dict)
            or canonical_bytes(entry) != raw
            or not all(isinstance(run.get(k), int) for k in ("first_seq", "last_seq"))
            or not all(isinstance(run.get(k), str) for k in ("prev_hash", "hash"))
            or run["last_seq"] < run["first_seq"]
        ):
            raise _Bad(number, Problem.MALFORMED, "a run of left-out records that is not one", None)
        first, last, prev, digest = run["first_seq"], run["last_seq"], run["prev_hash"], run["hash"]
        state["omitted"] += last - first + 1
        state["runs"] += 1
    else:
        try:
            record = check_line(raw)
        except _Edited as error:
            raise _Bad(number, Problem.EDITED, str(error), None) from None
        except AuditRecordError as error:
            raise _Bad(number, Problem.MALFORMED, str(error), None) from None
        first = last = record["seq"]
        prev, digest = record["prev_hash"], record["hash"]
        state["records"] += 1
    if state["seq"] is None:
        state["first"] = first
        state["anchor"] = "genesis" if first == 1 and prev == GENESIS_HASH else f"seq {first}"
    else:
        expected = state["seq"] + 1
        if first != expected:
            problem = Problem.DELETED if first > expected else Problem.REORDERED
            raise _Bad(
                number, problem, f"starts at seq {first} where seq {expected} was expected", first
            )
        if prev != state["hash"]:
            raise _Bad(
                number,
                Problem.EDITED,
                f"seq {first} does not link to the hash of seq {state['seq']} before it: "
                "a record was altered (or a hash was)",
                first,
            )
    state["seq"], state["hash"] = last, digest


def _check_totals(header: Mapping[str, Any], state: dict[str, Any], lines: int) -> None:
    said = (
        header.get("first_seq"),
        header.get("last_seq"),
        header.get("records"),
        header.get("omitted"),
    )
    found = (state["first"], state["seq"], state["records"], state["omitted"])
    if said != found:
        raise _Bad(
            lines,
            Problem.DELETED,
            f"the header says seq {said[0]}..{said[1]}, {said[2]} record(s) and {said[3]} left "
            f"out; the export holds seq {found[0]}..{found[1]}, {found[2]} and {found[3]}: "
            "it was cut or added to",
            None,
        )
