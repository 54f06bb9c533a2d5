"""``hostcapctl audit verify|query|tail`` on files, with no socket and no daemon."""

from __future__ import annotations

import argparse
import datetime as dt
import gzip
import json
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from audit_helpers import SettingsFactory, exec_fields, exit_fields
from hostcap.ctl import audit as ctl
from hostcap_proto.audit import encode_line, seal
from hostcapd.audit import AuditLog
from hostcapd.audit.files import rotated_files


async def sample_log(settings: SettingsFactory, **overrides: object) -> Path:
    s = settings(**overrides)
    log = AuditLog.open(s, "boot-1")
    log.write("daemon.start", version="0.1.0", tenants=["dev", "ci"])
    await log.write_durable("process.exec", **exec_fields("sp-a"))
    log.write("process.exit", **exit_fields("sp-a"))
    await log.write_durable(
        "process.exec", **exec_fields("sp-b", tenant="ci", argv=["sleep", "99"])
    )
    log.write("process.exit", **exit_fields("sp-b", tenant="ci", outcome="TIMEOUT", exit_code=None,
                                            signal=9, signal_name="SIGKILL",
                                            message="wall-clock limit of 5 s exceeded"))  # fmt: skip
    log.write("policy.deny", tenant="dev", method="Spawn", reason="EXECUTABLE_NOT_ALLOWED",
              message="/opt/x is outside the allowed dirs", labels={})  # fmt: skip
    await log.close()
    return s.path


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = ctl.main(argv)
    out, err = capsys.readouterr()
    return code, out, err


async def test_verify_exits_zero_on_an_intact_log(
    make_settings: SettingsFactory, capsys: pytest.CaptureFixture[str]
) -> None:
    path = await sample_log(make_settings)
    code, out, _ = run(["audit", "verify", str(path)], capsys)
    assert code == 0
    assert out.startswith("OK   6 record(s), seq 1..6")


async def test_verify_names_the_first_bad_line_and_why(
    make_settings: SettingsFactory, capsys: pytest.CaptureFixture[str]
) -> None:
    path = await sample_log(make_settings)
    content = path.read_bytes().splitlines(keepends=True)
    del content[2]
    path.write_bytes(b"".join(content))
    code, out, _ = run(["audit", "verify", str(path)], capsys)
    assert code == 1
    assert out.startswith(f"FAIL {path}:3: deleted:")
    code, out, _ = run(["audit", "verify", "--json", str(path)], capsys)
    report = json.loads(out)
    assert code == 1 and report["ok"] is False
    assert (report["failure"]["line"], report["failure"]["problem"]) == (3, "deleted")


async def test_verify_walks_rotated_files_in_any_order(
    make_settings: SettingsFactory, capsys: pytest.CaptureFixture[str]
) -> None:
    s = make_settings(max_bytes=4096, keep_files=50)
    log = AuditLog.open(s, "b")
    for i in range(30):
        await log.write_durable("process.exec", **exec_fields(f"s{i}"))
    await log.close()
    files = [str(s.path), *map(str, rotated_files(s.path))]  # as a shell glob lists them
    code, out, _ = run(["audit", "verify", *files], capsys)
    assert code == 0, out
    assert f"{len(files)} file(s)" in out


def test_verify_of_a_missing_file_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = run(["audit", "verify", str(tmp_path / "nope.jsonl")], capsys)
    assert code == 2
    assert "nope.jsonl" in err
    code, _, err = run(["audit", "verify"], capsys)
    assert code == 2 and "give the audit file" in err


async def test_query_filters_and_prints_a_table(
    make_settings: SettingsFactory, capsys: pytest.CaptureFixture[str]
) -> None:
    path = await sample_log(make_settings)
    code, out, _ = run(["audit", "query", "--file", str(path), "--tenant", "ci"], capsys)
    assert code == 0
    rows = out.splitlines()
    assert rows[0].split()[:3] == ["TIME", "(UTC)", "SEQ"]
    assert len(rows) == 3
    assert "sleep 99" in rows[1]
    assert "TIMEOUT signal=SIGKILL" in rows[2] and "wall-clock limit" in rows[2]


async def test_query_json_lines_are_the_stored_lines(
    make_settings: SettingsFactory, capsys: pytest.CaptureFixture[str]
) -> None:
    path = await sample_log(make_settings)
    stored = path.read_text().splitlines()
    code, out, _ = run(
        ["audit", "query", "--file", str(path), "--event", "process.*", "--json"], capsys
    )
    assert code == 0
    assert out.splitlines() == [line for line in stored if '"event":"process.' in line]
    _, out, _ = run(
        ["audit", "query", "--file", str(path), "--outcome", "timeout", "--json"], capsys
    )
    assert [json.loads(x)["spawn_id"] for x in out.splitlines()] == ["sp-b"]
    _, out, _ = run(["audit", "query", "--file", str(path), "--spawn", "sp-a", "--json"], capsys)
    assert [json.loads(x)["event"] for x in out.splitlines()] == ["process.exec", "process.exit"]


async def test_query_time_bounds(
    make_settings: SettingsFactory, capsys: pytest.CaptureFixture[str]
) -> None:
    path = await sample_log(make_settings)
    _, out, _ = run(["audit", "query", "--file", str(path), "--since", "1h", "--json"], capsys)
    assert len(out.splitlines()) == 6
    _, out, _ = run(
        ["audit", "query", "--file", str(path), "--until", "2000-01-01", "--json"], capsys
    )
    assert out == ""
    with pytest.raises(SystemExit) as exit_info:
        ctl.main(["audit", "query", "--file", str(path), "--since", "yesterday-ish"])
    assert exit_info.value.code == 2
    assert "is not a time" in capsys.readouterr().err


def test_parse_time_forms() -> None:
    now = dt.datetime(2024, 5, 1, 12, 0, tzinfo=dt.UTC)
    assert ctl.parse_time("2h", now=now) == dt.datetime(2024, 5, 1, 10, 0, tzinfo=dt.UTC)
    assert ctl.parse_time("2024-05-01T12:00:00Z") == now
    assert ctl.parse_time("2024-05-01T14:00:00+02:00") == now
    assert ctl.parse_time("2024-05-01") == dt.datetime(2024, 5, 1, tzinfo=dt.UTC)
    with pytest.raises(argparse.ArgumentTypeError):
        ctl.parse_time("soon")
    # A time of day: today's, in UTC unless an offset is given.
    assert ctl.parse_time("14:00", now=now) == dt.datetime(2024, 5, 1, 14, 0, tzinfo=dt.UTC)
    assert ctl.parse_time("9:05:30", now=now) == dt.datetime(2024, 5, 1, 9, 5, 30, tzinfo=dt.UTC)
    assert ctl.parse_time("14:00Z", now=now) == dt.datetime(2024, 5, 1, 14, 0, tzinfo=dt.UTC)
    assert ctl.parse_time("14:00+02:00", now=now) == now
    for bad in ("25:00", "14:61", "14:0"):
        with pytest.raises(argparse.ArgumentTypeError):
            ctl.parse_time(bad, now=now)


async def test_misspelt_filters_are_errors_listing_the_valid_values(
    make_settings: SettingsFactory, capsys: pytest.CaptureFixture[str]
) -> None:
    path = str(await sample_log(make_settings))
    with pytest.raises(SystemExit) as exit_info:
        ctl.main(["audit", "query", "--file", path, "--event", "proces.exec"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "unknown event 'proces.exec'" in err and "process.exec, process.exit" in err
    code, out, err = run(
        ["audit", "query", "--file", path, "--tenant", "dve", "--format", "json"], capsys
    )
    assert (code, out) == (2, "")
    assert "unknown tenant 'dve': valid tenants are ci, dev" in err
    code, out, _ = run(
        ["audit", "query", "--file", path, "--tenant", "ci", "--format", "json"], capsys
    )
    assert code == 0 and [r["spawn_id"] for r in json.loads(out)] == ["sp-b", "sp-b"]
    code, out, _ = run(
        ["audit", "query", "--file", path, "--spawn", "sp-a", "--format", "json"], capsys
    )
    assert code == 0 and len(json.loads(out)) == 2
    code, out, err = run(["audit", "query", "--file", path, "--spawn", "sp-"], capsys)
    assert (code, out) == (2, "")
    assert "spawn id prefix 'sp-' is ambiguous: 2 spawns match: sp-a, sp-b" in err


async def test_tail_prints_the_last_records(
    make_settings: SettingsFactory, capsys: pytest.CaptureFixture[str]
) -> None:
    path = await sample_log(make_settings)
    with path.open("ab") as f:
        f.write(b'{"torn')  # a crash mid-write: ignored
    code, out, _ = run(["audit", "tail", "--file", str(path), "-n", "2", "--json"], capsys)
    assert code == 0
    assert out.splitlines() == path.read_text().splitlines()[4:6]
    _, out, _ = run(["audit", "tail", "--file", str(path)], capsys)
    assert len(out.splitlines()) == 7  # header and all six


async def test_control_characters_never_reach_the_terminal(
    make_settings: SettingsFactory, capsys: pytest.CaptureFixture[str]
) -> None:
    s = make_settings()
    log = AuditLog.open(s, "b")
    await log.write_durable(
        "process.exec", **exec_fields("x", argv=["echo", "\x1b[2J\x1b]0;pwned\x07\n"])
    )
    await log.close()
    _, out, _ = run(["audit", "query", "--file", str(s.path)], capsys)
    assert "\x1b" not in out and "\x07" not in out
    assert "\\x1b[2J" in out
    assert len(out.splitlines()) == 2


def test_register_adds_the_audit_commands_to_a_parser() -> None:
    parser = argparse.ArgumentParser(prog="hostcapctl")
    ctl.register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["audit", "tail", "--file", "x", "-n", "3"])
    assert args.func is not None and args.lines == 3


async def test_runs_as_a_module(make_settings: SettingsFactory) -> None:
    path = await sample_log(make_settings)
    result = subprocess.run(
        [sys.executable, "-m", "hostcap.ctl.audit", "audit", "verify", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("OK")


async def test_query_skips_unreadable_lines_and_says_so(
    make_settings: SettingsFactory, capsys: pytest.CaptureFixture[str]
) -> None:
    path = await sample_log(make_settings)
    content = path.read_bytes().splitlines(keepends=True)
    content.insert(2, b"garbage\n")
    path.write_bytes(b"".join(content))
    code, out, err = run(["audit", "query", "--file", str(path), "--json"], capsys)
    assert code == 0
    assert len(out.splitlines()) == 6
    assert f"1 unreadable line(s) skipped (first {path}:3)" in err


CLOAKS = [
    ["sh", "-c", "API_TOKEN=1; echo payload; touch ~/x"],
    ["sh", "-c", " " * 4096 + "echo payload; touch ~/x"],
    ["sh", "-c", " " * 4096 + "echo payload; touch ~/x" + " " * 4096],
]


@pytest.mark.parametrize("argv", CLOAKS, ids=["assignment", "padding", "padding-both-sides"])
async def test_verify_argv_proves_the_argv_a_record_was_written_for(
    argv: list[str], make_settings: SettingsFactory, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 29's cloaks: the record shows the payload, or flags what it hid,
    and its digest tells the argv that ran from any other."""
    s = make_settings()
    log = AuditLog.open(s, "b")
    await log.write_durable("process.exec", **exec_fields("sp-c", argv=argv))
    await log.close()
    stored = json.loads(s.path.read_text())
    shown = "echo payload; touch ~/x" in stored["argv"][2]
    assert shown or stored["argv_truncated"] or stored["argv_redacted"]
    if argv is CLOAKS[0] or argv is CLOAKS[1]:
        assert shown  # these two cannot hide it at all
    code, out, _ = run(
        ["audit", "verify-argv", "--file", str(s.path), "--spawn", "sp-c", "--", *argv], capsys
    )
    assert code == 0 and out.startswith("OK   the argv given is the argv of seq 1"), out
    code, out, _ = run(
        [
            "audit",
            "verify-argv",
            "--file",
            str(s.path),
            "--seq",
            "1",
            "--argv-json",
            json.dumps(argv),
        ],
        capsys,
    )
    assert code == 0, out
    other = [*argv[:2], argv[2].replace("payload", "harmless")]
    code, out, _ = run(
        ["audit", "verify-argv", "--file", str(s.path), "--spawn", "sp-c", "--", *other], capsys
    )
    assert code == 1 and out.startswith("FAIL"), out


async def test_verify_argv_refuses_a_record_it_cannot_check(
    make_settings: SettingsFactory, capsys: pytest.CaptureFixture[str]
) -> None:
    path = await sample_log(make_settings)
    code, out, _ = run(
        ["audit", "verify-argv", "--file", str(path), "--seq", "1", "--", "x"], capsys
    )
    assert code == 1 and "holds no argv_sha256" in out
    code, _, err = run(
        ["audit", "verify-argv", "--file", str(path), "--seq", "99", "--", "x"], capsys
    )
    assert code == 2 and "no record is seq 99" in err
    code, _, err = run(["audit", "verify-argv", "--file", str(path), "--", "x"], capsys)
    assert code == 2 and "exactly one of" in err


def _rewrite_line(
    path: Path, index: int, change: Callable[[dict[str, Any]], None], *, rehash: bool
) -> None:
    lines = path.read_bytes().splitlines(keepends=True)
    record = json.loads(lines[index])
    change(record)
    if rehash:
        record = seal({k: v for k, v in record.items() if k != "hash"})
    lines[index] = encode_line(record)
    path.write_bytes(b"".join(lines))


async def test_a_one_tenant_export_verifies_and_an_altered_one_fails(
    make_settings: SettingsFactory, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """Issue 33: `audit query --tenant beta --format jsonl` failed verify with
    "deleted"; an export carries the hashes of what it leaves out."""
    path = await sample_log(make_settings)
    exported = tmp_path / "ci.export.jsonl"
    code, _, err = run(
        ["audit", "export", "--file", str(path), "--tenant", "ci", "-o", str(exported)], capsys
    )
    assert code == 0, err
    text = exported.read_text()
    assert (
        "sleep" in text and "sp-a" not in text and "/opt/x" not in text
    )  # dev's content is not there
    code, out, _ = run(["audit", "verify", str(exported)], capsys)
    assert code == 0, out
    assert out.startswith("OK   export of 2 record(s) (tenant=ci), seq 1..6, anchored at genesis")
    assert "4 record(s) left out in 2 run(s)" in out

    # Its bytes changed: the record no longer matches its hash.
    altered = tmp_path / "altered.jsonl"
    altered.write_bytes(exported.read_bytes().replace(b'"sleep"', b'"sleeq"'))
    code, out, _ = run(["audit", "verify", str(altered)], capsys)
    assert code == 1 and out.startswith(f"FAIL {altered}:") and "edited" in out, out

    # Rewritten with a recomputed hash: the next entry no longer links to it.
    forged = tmp_path / "forged.jsonl"
    forged.write_bytes(exported.read_bytes())
    _rewrite_line(forged, 2, lambda r: r.update(argv=["true"]), rehash=True)
    code, out, _ = run(["audit", "verify", "--json", str(forged)], capsys)
    report = json.loads(out)
    assert code == 1 and report["failure"]["problem"] == "edited", report
    assert "does not link to the hash" in report["failure"]["detail"]

    # A left-out run removed: the gap shows.
    cut = tmp_path / "cut.jsonl"
    kept = exported.read_bytes().splitlines(keepends=True)
    cut.write_bytes(b"".join(kept[:1] + kept[2:]))
    code, out, _ = run(["audit", "verify", str(cut)], capsys)
    assert code == 1 and "FAIL" in out

    # An export is verified on its own.
    code, _, err = run(["audit", "verify", str(exported), str(path)], capsys)
    assert code == 2 and "on its own" in err


async def test_verify_of_archived_and_kept_copies_of_the_same_files(
    make_settings: SettingsFactory, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """docs/audit.md's whole-history command: an archive holding copies of
    files still kept beside the log (one compressed) verifies."""
    s = make_settings(max_bytes=4096, keep_files=50)
    log = AuditLog.open(s, "b")
    for i in range(30):
        await log.write_durable("process.exec", **exec_fields(f"s{i}"))
    await log.close()
    rotated = rotated_files(s.path)
    archive = tmp_path / "archive"
    archive.mkdir()
    for file in rotated:
        shutil.copy(file, archive / file.name)
    with gzip.open(archive / (rotated[0].name + ".gz"), "wb") as f:
        f.write(rotated[0].read_bytes())
    (archive / rotated[0].name).unlink()
    files = [*map(str, sorted(archive.iterdir())), str(s.path), *map(str, rotated)]
    code, out, _ = run(["audit", "verify", *files], capsys)
    assert code == 0, out
    assert f"{len(rotated) + 1} file(s), chain anchored at genesis" in out
    # A copy that differs is not a duplicate: the chain breaks where it is.
    (archive / rotated[1].name).write_bytes(rotated[1].read_bytes()[:-1] + b" \n")
    code, out, _ = run(["audit", "verify", *files], capsys)
    assert code == 1, out


@pytest.mark.parametrize(
    ("args", "records", "omitted"),
    [
        (["--event", "daemon.start"], 1, 5),  # the first record chosen, the rest one run
        (["--event", "audit.prune"], 0, 6),  # nothing chosen: one run, still a chain
        (["--tenant", "dev", "--event", "process.*"], 2, 4),
    ],
)
async def test_exports_of_any_shape_verify(
    args: list[str],
    records: int,
    omitted: int,
    make_settings: SettingsFactory,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
) -> None:
    path = await sample_log(make_settings)
    exported = tmp_path / "e.jsonl"
    code, _, err = run(["audit", "export", "--file", str(path), *args, "-o", str(exported)], capsys)
    assert code == 0, err
    code, out, _ = run(["audit", "verify", "--json", str(exported)], capsys)
    report = json.loads(out)
    assert code == 0 and report["ok"], report
    assert (report["records"], report["omitted"]) == (records, omitted)
    assert (report["first_seq"], report["last_seq"], report["anchor"]) == (1, 6, "genesis")


def test_an_export_needs_a_choice(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, _, err = run(["audit", "export", "--file", str(tmp_path / "x")], capsys)
    assert code == 2 and "choose what to export" in err
