"""No hand-written module of the daemon (`hostcapd`), the client (`hostcap`)
or the wire package (`hostcap_proto`) is over 650 lines (issue 28): a module
that long holds more than one room. Generated modules (`*_pb2*.py`,
`_version.py`) do not count."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
ROOTS = (
    REPO / "daemon" / "hostcapd",
    REPO / "client" / "hostcap",
    REPO / "proto" / "hostcap_proto",
)
MAX_LINES = 650


def _generated(path: Path) -> bool:
    return "_pb2" in path.name or path.name == "_version.py"


def hand_written_modules() -> list[Path]:
    return sorted(path for root in ROOTS for path in root.rglob("*.py") if not _generated(path))


def _lines(path: Path) -> int:
    with path.open("rb") as f:
        return sum(1 for _ in f)


def test_the_walk_finds_the_modules_and_leaves_out_the_generated() -> None:
    modules = hand_written_modules()
    assert len(modules) > 100, "the walk found too few modules to mean anything"
    names = {path.name for path in modules}
    assert "__init__.py" in names
    assert not any(_generated(path) for path in modules)
    # The generated modules exist and were left out (the rule is not vacuous
    # about them either way).
    generated = [p for root in ROOTS for p in root.rglob("*.py") if _generated(p)]
    assert any(p.name.endswith("_pb2.py") for p in generated)


def test_no_hand_written_module_is_over_650_lines() -> None:
    over = [
        f"{path.relative_to(REPO)}: {lines} lines"
        for path in hand_written_modules()
        if (lines := _lines(path)) > MAX_LINES
    ]
    assert over == [], f"modules over {MAX_LINES} lines (split them):\n" + "\n".join(over)


def test_the_count_is_of_lines(tmp_path: Path) -> None:
    short = tmp_path / "short.py"
    short.write_text("x = 1\n" * MAX_LINES)
    long = tmp_path / "long.py"
    long.write_text("x = 1\n" * (MAX_LINES + 1))
    assert _lines(short) == MAX_LINES
    assert _lines(long) == MAX_LINES + 1
