"""When the audit log cannot be written the writer says so (AuditUnavailable,
never swallowed), leaves no partial line behind, and recovers once the disk
can take writes again."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from audit_helpers import SettingsFactory, exec_fields, exit_fields, remount
from hostcap_proto.audit import verify_files
from hostcapd.audit import AuditLog, AuditUnavailable
from hostcapd.audit.files import rotated_files

Tmpfs = Callable[[str], Path]


def fill(directory: Path) -> Path:
    """Fill a filesystem until it refuses another byte; returns the filler file."""
    filler = directory / "filler"
    with filler.open("wb", buffering=0) as f:
        try:
            while True:
                f.write(b"\0" * 4096)
        except OSError:
            pass
        try:
            while True:
                f.write(b"\0")
        except OSError:
            pass
    return filler


async def test_a_full_disk_refuses_durable_writes_then_recovers(
    tmpfs: Tmpfs, make_settings: SettingsFactory
) -> None:
    directory = tmpfs("size=64k")
    s = make_settings(path=directory / "audit.jsonl")
    log = AuditLog.open(s, "b")
    await log.write_durable("process.exec", **exec_fields("a"))
    filler = fill(directory)
    size = s.path.stat().st_size
    # A record larger than what is left in the file's last page: a partial
    # write is possible, and must be cut off again.
    big = exec_fields("b", argv=["echo", "y" * 4000, "z" * 4000])
    with pytest.raises(AuditUnavailable, match="No space left"):
        await log.write_durable("process.exec", **big)
    with pytest.raises(AuditUnavailable):
        log.write("process.exit", **exit_fields("a", message="m" * 8000))
    assert s.path.stat().st_size == size  # nothing half-written
    filler.unlink()
    await log.write_durable("process.exec", **big)
    log.write("process.exit", **exit_fields("a"))
    await log.close()
    report = verify_files([s.path])
    assert report.ok, report.failure
    assert [json.loads(x)["seq"] for x in s.path.read_bytes().splitlines()] == [1, 2, 3]


async def test_an_unwritable_directory_refuses_open(
    tmpfs: Tmpfs, make_settings: SettingsFactory
) -> None:
    directory = tmpfs("size=1m")
    remount(directory, "ro")
    with pytest.raises(AuditUnavailable, match="Read-only file system"):
        AuditLog.open(make_settings(path=directory / "audit.jsonl"), "b")


@pytest.fixture
def immutable() -> Iterator[Callable[[Path], None]]:
    """Make paths immutable (chattr +i: even root cannot write them); undone after."""
    if shutil.which("chattr") is None or os.geteuid() != 0:
        pytest.skip("needs chattr and root")
    done: list[Path] = []

    def make(path: Path) -> None:
        result = subprocess.run(["chattr", "+i", str(path)], capture_output=True, text=True)
        if result.returncode != 0:
            pytest.skip(f"chattr +i not supported here: {result.stderr.strip()}")
        done.append(path)

    yield make
    for path in done:
        subprocess.run(["chattr", "-i", str(path)], check=False)


def unmake(path: Path) -> None:
    subprocess.run(["chattr", "-i", str(path)], check=True)


async def test_a_log_made_unwritable_while_open_refuses_then_recovers(
    make_settings: SettingsFactory, immutable: Callable[[Path], None]
) -> None:
    s = make_settings()
    log = AuditLog.open(s, "b")
    await log.write_durable("process.exec", **exec_fields("a"))
    immutable(s.path)
    immutable(s.path.parent)
    with pytest.raises(AuditUnavailable, match="Operation not permitted"):
        await log.write_durable("process.exec", **exec_fields("b"))
    unmake(s.path)
    unmake(s.path.parent)
    await log.write_durable("process.exec", **exec_fields("b"))
    await log.close()
    assert verify_files([s.path]).ok


async def test_rotation_into_an_unwritable_directory_refuses_and_keeps_the_chain(
    make_settings: SettingsFactory, immutable: Callable[[Path], None]
) -> None:
    s = make_settings(max_bytes=2048)
    log = AuditLog.open(s, "b")
    await log.write_durable("process.exec", **exec_fields("a"))
    immutable(s.path.parent)
    with pytest.raises(AuditUnavailable, match="cannot rotate"):
        for i in range(20):
            await log.write_durable("process.exec", **exec_fields(f"s{i}"))
    unmake(s.path.parent)
    await log.write_durable("process.exec", **exec_fields("after"))
    await log.close()
    files = [*rotated_files(s.path), s.path]
    assert len(files) >= 2
    assert verify_files(files).ok
