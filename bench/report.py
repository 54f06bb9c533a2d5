"""The printed table and the JSON written to bench/results/."""

from __future__ import annotations

import json
import operator
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

_OPS: dict[str, Callable[[float, float], bool]] = {
    "<=": operator.le,
    ">=": operator.ge,
    "<": operator.lt,
}


@dataclass(frozen=True)
class Target:
    op: str
    value: float

    def holds(self, ratio: float) -> bool:
        return _OPS[self.op](ratio, self.value)

    def __str__(self) -> str:
        return f"{self.op} {self.value:g}"


@dataclass(frozen=True)
class Line:
    """One line of the table: a ratio, what it divides, and its target."""

    row: str
    what: str
    ratio: float
    measured: str
    baseline: str
    #: The top-level JSON key this ratio is written under (headline figures).
    key: str = ""
    target: Target | None = None
    #: How the ratio column shows the figure: "x" for a ratio; the few
    #: figures the issue defines as absolute ("MiB", "%") say so.
    unit: str = "x"
    #: A floor line: the key of the target line it bounds. Its ratio is the
    #: floor of the design over that line's baseline, and `target` is that
    #: line's target, so the table says whether the target lies below it.
    floor_of: str = ""

    @property
    def holds(self) -> bool | None:
        return None if self.target is None else self.target.holds(self.ratio)

    @property
    def mark(self) -> str:
        if self.floor_of:
            # A floor that meets the target leaves room; one that does not
            # puts the target below what the design can reach.
            return "room" if self.holds else "FLOOR"
        return {True: "ok", False: "MISS", None: ""}[self.holds]


@dataclass
class Row:
    """A row's lines and every raw figure it measured (for the JSON)."""

    name: str
    lines: list[Line] = field(default_factory=list)
    figures: dict[str, float] = field(default_factory=dict)


def table(rows: list[Row]) -> str:
    header = ("row", "figure", "ratio", "target", "", "measured", "baseline")
    body: list[tuple[str, ...]] = []
    for row in rows:
        for line in row.lines:
            mark = line.mark
            body.append(
                (
                    line.row,
                    line.what,
                    f"{line.ratio:.2f}{line.unit if line.unit == 'x' else ' ' + line.unit}",
                    str(line.target or ""),
                    mark,
                    line.measured,
                    line.baseline,
                )
            )
    widths = [max(len(r[i]) for r in [header, *body]) for i in range(len(header))]
    out = []
    for index, r in enumerate([header, *body]):
        out.append(
            "  ".join(
                cell.ljust(widths[i]) if i != 2 else cell.rjust(widths[i])
                for i, cell in enumerate(r)
            ).rstrip()
        )
        if index == 0:
            out.append("  ".join("-" * w for w in widths))
    return "\n".join(out)


def document(rows: list[Row], meta: dict[str, Any]) -> dict[str, Any]:
    """The JSON: headline ratios as top-level keys, then every line and figure."""
    doc: dict[str, Any] = {}
    for row in rows:
        for line in row.lines:
            if line.key:
                doc[line.key] = round(line.ratio, 4)
    doc["targets"] = {
        line.key: {"target": str(line.target), "holds": line.holds}
        for row in rows
        for line in row.lines
        if line.key and line.target is not None and not line.floor_of
    }
    # Each floor beside the target it bounds: its ratio over the target
    # line's baseline, and whether the target lies below it.
    for row in rows:
        for line in row.lines:
            if line.floor_of and line.floor_of in doc["targets"]:
                doc["targets"][line.floor_of]["floor"] = round(line.ratio, 4)
                doc["targets"][line.floor_of]["floor_key"] = line.key
                doc["targets"][line.floor_of]["below_floor"] = not line.holds
    doc["meta"] = meta
    doc["rows"] = {
        row.name: {
            "lines": [
                {**asdict(line), "target": str(line.target or ""), "holds": line.holds}
                for line in row.lines
            ],
            "figures": {k: round(v, 6) for k, v in row.figures.items()},
        }
        for row in rows
    }
    return doc


def write(doc: dict[str, Any], directory: Path, stamp: str) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{stamp}.json"
    path.write_text(json.dumps(doc, indent=2, sort_keys=False) + "\n")
    return path


def ms(seconds_or_us: float, unit: str = "us") -> str:
    us = seconds_or_us if unit == "us" else seconds_or_us * 1e6
    return f"{us / 1000:.2f} ms" if us >= 1000 else f"{us:.0f} µs"


def targets_table(doc: dict[str, Any]) -> str:
    """Each target of a results document with its ratio and, where the run
    measured one, its floor (issue 35): `python -m bench.report FILE...`."""
    lines = [f"{'key':42} {'ratio':>7} {'target':>7} {'holds':>5} {'floor':>7}  floor says"]
    for key, t in doc["targets"].items():
        floor = t.get("floor")
        says = "" if floor is None else ("below the floor" if t["below_floor"] else "room")
        lines.append(
            f"{key:42} {doc.get(key, float('nan')):7.2f} {t['target']:>7} "
            f"{'yes' if t['holds'] else 'no':>5} {'' if floor is None else f'{floor:.2f}':>7}  {says}"
        )
    meta = doc.get("meta", {})
    lines.append(
        f"load {meta.get('loadavg_start', 0):.1f} -> {meta.get('loadavg_end', 0):.1f},"
        f" {'quick' if meta.get('quick') else 'full'} run at {meta.get('commit', '?')},"
        f" {meta.get('date', '?')}"
    )
    return "\n".join(lines)


if __name__ == "__main__":
    import sys

    for name in sys.argv[1:]:
        print(f"{name}:")
        print(targets_table(json.loads(Path(name).read_text())))
