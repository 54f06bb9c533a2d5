"""A durable write whose fdatasync really fails (no seccomp stand-in): the
log lives on an ext4 file system on a loop device whose backing file sits
on a tmpfs that is then filled. `write(2)` still succeeds (the page cache),
the writeback of the new block fails in the block layer, and the fdatasync
returns the error, as a failing disk's would. Root only.

(Written for the AIO fsync tried on 2026-12-07, whose fdatasync ran on a
kernel worker that test_audit_writer.py's seccomp filter does not reach;
that way was not kept: bench/README.md, "the exec record's fsync without a
Python thread".)"""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from audit_helpers import SettingsFactory
from hostcapd.audit import AuditLog, AuditUnavailable


@pytest.fixture
def failing_volume(tmp_path: Path) -> Iterator[tuple[Path, Path]]:
    """(a directory on a volume whose new blocks cannot be written back,
    a file that fills its backing store once called `fill`)."""
    if os.geteuid() != 0:
        pytest.skip("a loop device needs root")
    for tool in ("losetup", "mkfs.ext4"):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} is not installed")
    backing, mounted = tmp_path / "backing", tmp_path / "volume"
    backing.mkdir()
    mounted.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", backing], check=True)
    device = ""
    try:
        image = backing / "image"
        with image.open("wb") as f:
            f.truncate(32 * 1024 * 1024)  # sparse: its holes need the tmpfs' room
        subprocess.run(
            ["mkfs.ext4", "-q", "-F", "-O", "^has_journal", "-N", "64", "-E", "nodiscard", image],
            check=True,
        )
        found = subprocess.run(
            ["losetup", "--find", "--show", image], check=False, capture_output=True, text=True
        )
        if found.returncode != 0:  # a container without loop devices
            pytest.skip(f"no loop device: {found.stderr.strip()}")
        device = found.stdout.strip()
        subprocess.run(["mount", "-o", "errors=continue", device, mounted], check=True)
        yield mounted, backing / "fill"
    finally:
        subprocess.run(["umount", mounted], check=False)
        if device:
            subprocess.run(["losetup", "-d", device], check=False)
        subprocess.run(["umount", backing], check=False)


def fill(path: Path) -> None:
    """Fill the loop device's backing tmpfs: every block not yet written fails."""
    with path.open("wb") as f:
        try:
            while True:
                f.write(b"\0" * 65536)
                f.flush()
        except OSError:
            pass


async def test_a_durable_write_whose_fdatasync_fails_writes_no_go_and_fails_closed(
    failing_volume: tuple[Path, Path], make_settings: SettingsFactory
) -> None:
    directory, filler = failing_volume
    log = AuditLog.open(make_settings(path=directory / "audit.jsonl", fsync_interval_ms=1000), "b")
    fill(filler)
    gos = [os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC) for _ in range(2)]
    settled: list[object] = []
    try:
        # Two durable writes, the second appended while the first's fsync is
        # in flight: each fsync on its own description, each sees the error.
        _, first = log.write_pending(
            "daemon.start", release_fd=gos[0], settled=settled.append, version="x"
        )
        _, second = log.write_pending(
            "daemon.start", release_fd=gos[1], settled=settled.append, version="y"
        )
        results = await asyncio.gather(first, second, return_exceptions=True)
        for result in results:
            assert isinstance(result, AuditUnavailable), results
            assert "fsync failed" in str(result)
        assert [type(error) for error in settled] == [AuditUnavailable, AuditUnavailable]
        for go in gos:
            with pytest.raises(BlockingIOError):
                os.eventfd_read(go)  # never written: no child would exec
        assert log.unwritable()  # failed closed
        with pytest.raises(AuditUnavailable):
            log.write("daemon.stop", version="x")
    finally:
        for go in gos:
            os.close(go)
        with pytest.raises(AuditUnavailable):
            await log.close()
