"""Retention of rotated files against the real writer: archive_command runs
on each rotated file before it may be removed, a failure keeps the file,
compression keeps every file readable, and an audit.prune record names what
was removed before it is; verify still anchors the kept chain."""

from __future__ import annotations

import asyncio
import gzip
import hashlib
import json
import stat
import sys
import threading
from pathlib import Path
from typing import Any

from audit_helpers import SettingsFactory, exec_fields, exit_fields
from hostcap_proto.audit import RecordReader, tail_records, verify_files
from hostcapd.audit import AuditLog
from hostcapd.audit.files import rotated_files


def archiver(tmp_path: Path, fail: bool = False) -> tuple[list[str], Path]:
    """An archive_command (a script: copies the file it is given, or fails)."""
    store = tmp_path / "archive"
    store.mkdir(exist_ok=True)
    script = tmp_path / ("fail.py" if fail else "archive.py")
    body = "sys.exit(3)" if fail else "shutil.copy(sys.argv[2], sys.argv[1])"
    script.write_text(
        f"import shutil, sys\nprint('archiving', sys.argv[2], file=sys.stderr)\n{body}\n"
    )
    return [sys.executable, str(script), str(store)], store


async def fill(log: AuditLog, spawns: int, start: int = 0) -> None:
    for i in range(start, start + spawns):
        await log.write_durable("process.exec", **exec_fields(f"s{i}"))
        log.write("process.exit", **exit_fields(f"s{i}"))


def all_records(path: Path) -> list[dict[str, Any]]:
    return list(RecordReader([*rotated_files(path), path]))


def prune_records(path: Path) -> list[dict[str, Any]]:
    return [r for r in all_records(path) if r["event"] == "audit.prune"]


async def settle(log: AuditLog) -> None:
    """Let the retention pass that the last rotation started finish."""
    for _ in range(2000):
        task = log.retention._task
        if task is None or task.done():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("the retention pass did not finish")


async def test_each_removed_file_was_archived_first_and_is_named_in_a_prune_record(
    make_settings: SettingsFactory, tmp_path: Path
) -> None:
    command, store = archiver(tmp_path)
    settings = make_settings(max_bytes=4096, keep_files=2, archive_command=command)
    log = AuditLog.open(settings, "b")
    await fill(log, 60)
    await settle(log)
    await log.close()
    prunes = prune_records(settings.path)
    removed = [f for r in prunes for f in r["files"]]
    assert removed and all(f["archived"] for f in removed)
    assert all(r["archive_command"] == command for r in prunes)
    for f in removed:
        copy = store / f["file"]
        assert hashlib.sha256(copy.read_bytes()).hexdigest() == f["sha256"]
        assert copy.stat().st_size == f["size"]
        assert not (settings.path.parent / f["file"]).exists()
    kept = rotated_files(settings.path)
    assert len(kept) == 2
    # Kept files are archived too (each rotated file, once).
    assert all((store / p.name).read_bytes() == p.read_bytes() for p in kept)
    report = verify_files([*kept, settings.path])
    assert report.ok, report.failure
    assert report.anchor is not None and report.anchor.startswith("rotation from ")
    # The archive and the kept files together are the whole chain from genesis.
    whole = verify_files([*store.iterdir(), settings.path])
    assert whole.ok and whole.anchor == "genesis", whole.failure


async def test_a_file_the_archive_command_fails_on_is_kept(
    make_settings: SettingsFactory, tmp_path: Path
) -> None:
    failing, _ = archiver(tmp_path, fail=True)
    settings = make_settings(max_bytes=4096, keep_files=1, archive_command=failing)
    log = AuditLog.open(settings, "b")
    await fill(log, 40)
    await settle(log)
    await log.close()
    rotated = rotated_files(settings.path)
    assert len(rotated) > 1  # past keep_files: nothing unarchived is removed
    assert prune_records(settings.path) == []
    assert verify_files([*rotated, settings.path]).anchor == "genesis"

    # A working command at the next start catches up: archived, then pruned.
    command, store = archiver(tmp_path)
    settings = make_settings(max_bytes=4096, keep_files=1, archive_command=command)
    log = AuditLog.open(settings, "c")
    await settle(log)
    await log.close()
    removed = [f["file"] for r in prune_records(settings.path) for f in r["files"]]
    # (The prune record itself may rotate the current file once more.)
    assert set(removed) >= {p.name for p in rotated[:-1]}
    archived = {p.name for p in store.iterdir()}
    assert set(removed) <= archived and {p.name for p in rotated} <= archived
    assert len(rotated_files(settings.path)) == 1


async def test_compressed_rotated_files_stay_readable_and_verifiable(
    make_settings: SettingsFactory,
) -> None:
    settings = make_settings(max_bytes=4096, keep_files=4, compress="gzip", file_mode=0o640)
    log = AuditLog.open(settings, "b")
    await fill(log, 50)
    await settle(log)
    await log.close()
    rotated = rotated_files(settings.path)
    assert len(rotated) == 4
    # All but the newest compressed (the newest is what a restart continues from).
    assert [p.name.endswith(".gz") for p in rotated] == [True, True, True, False]
    for p in rotated[:-1]:
        assert stat.S_IMODE(p.stat().st_mode) == 0o640
        with gzip.open(p) as f:
            assert json.loads(f.readline())["event"] == "audit.rotate"
        assert not p.with_name(p.name.removesuffix(".gz")).exists()
    report = verify_files([*rotated, settings.path])
    assert report.ok, report.failure
    assert tail_records(rotated[0], 2)[-1]["seq"] == int(rotated[0].name.split(".")[2])
    seqs = [r["seq"] for r in all_records(settings.path)]
    assert seqs == list(range(seqs[0], seqs[0] + len(seqs)))
    # The log continues after a restart (the chain head is the newest, plain).
    log = AuditLog.open(settings, "c")
    await fill(log, 20, start=50)
    await settle(log)
    await log.close()
    assert verify_files([*rotated_files(settings.path), settings.path]).ok


async def test_without_an_archive_command_pruning_is_still_recorded(
    make_settings: SettingsFactory,
) -> None:
    settings = make_settings(max_bytes=4096, keep_files=1)
    log = AuditLog.open(settings, "b")
    await fill(log, 30)
    await settle(log)
    await log.close()
    prunes = prune_records(settings.path)
    assert prunes and all(r.get("archive_command") is None for r in prunes)
    assert all(not f["archived"] for r in prunes for f in r["files"])
    names = [f["file"] for r in prunes for f in r["files"]]
    assert len(names) == len(set(names))
    assert not any((settings.path.parent / n).exists() for n in names)


async def test_a_rotation_the_closing_pass_causes_is_pruned_before_close_returns(
    make_settings: SettingsFactory,
) -> None:
    """The pass still running at close writes its audit.prune into a full
    file, which rotates: that rotation's excess goes too, not at next start."""
    settings = make_settings(max_bytes=4096, keep_files=2)
    log = AuditLog.open(settings, "b")
    held = threading.Event()
    prepare = log.retention._prepare

    def held_prepare() -> Any:
        held.wait(30)
        return prepare()

    spawns = 0
    while len(rotated_files(settings.path)) < 2:
        await fill(log, 1, start=spawns)
        spawns += 1
    await settle(log)
    # One more rotation starts one pass, held; nothing is queued after it.
    log.retention._prepare = held_prepare  # type: ignore[method-assign]
    while len(rotated_files(settings.path)) < 3:
        await fill(log, 1, start=spawns)
        spawns += 1

    # Fill the current file to 40 bytes short of max_bytes: any record rotates.
    def deny(message: str) -> None:
        log.write("policy.deny", tenant="dev", method="Spawn", reason="EXECUTABLE_NOT_FOUND",
                  message=message, labels={}, request_id="r")  # fmt: skip

    before = settings.path.stat().st_size
    deny("x")
    probe = settings.path.stat().st_size - before
    room = settings.max_bytes - settings.path.stat().st_size
    assert room > probe + 40, "the probe rotated the file; the test needs it not to"
    deny("x" * (room - probe - 40 + 1))
    assert settings.max_bytes - settings.path.stat().st_size == 40
    assert len(rotated_files(settings.path)) == 3

    closing = asyncio.create_task(log.close())
    await asyncio.sleep(0.05)  # close is now waiting on the held pass
    held.set()
    await closing
    assert len(rotated_files(settings.path)) == settings.keep_files
    assert len(prune_records(settings.path)) >= 2
    report = verify_files([*rotated_files(settings.path), settings.path])
    assert report.ok, report.failure
