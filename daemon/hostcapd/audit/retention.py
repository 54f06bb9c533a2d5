"""Retention of rotated audit files, without silent loss.

After each rotation (and once at start-up) a pass runs on a thread of its
own, never on the event loop:

1. **compress** (`audit.compress = "gzip"`): every rotated file but the
   newest becomes `NAME.gz` (written to a temporary name, fsynced, renamed,
   then the plain file is removed). The newest stays plain: a start-up with
   an empty current file continues the chain from it.
2. **archive** (`audit.archive_command`, an argv run without a shell, the
   file's path appended): every rotated file in its final form, once. A file
   the command took (exit 0) is marked (`user.hostcap.archived` holds its
   sha256; in memory where the filesystem keeps no user xattrs).
3. **prune**: files beyond `audit.keep_files`, oldest first, that are
   archived (or all, without an `archive_command`). An `audit.prune` record
   naming each (name, size, sha256, archived) is written and fsynced
   *before* any is removed. A file the command failed on is kept, past
   `keep_files`, and tried again on the next pass; the failure is logged.

`hostcapctl audit verify` over the kept files still anchors: the oldest kept
file starts with an `audit.rotate` naming its predecessor ("anchored at
rotation from NAME"), and the `audit.prune` records say where it went.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import gzip
import hashlib
import logging
import os
import shutil
import subprocess
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hostcapd.audit.files import apply_ownership, rotated_files
from hostcapd.config import AuditSettings

_log = logging.getLogger("hostcapd.audit")

ARCHIVED_XATTR = "user.hostcap.archived"
#: Bytes of the archive command's output kept for the log line of a failure.
OUTPUT_KEPT = 2000
#: How long close() lets a pass in progress finish before it is abandoned.
CLOSE_WAIT_S = 5.0


@dataclass(frozen=True)
class Removal:
    path: Path
    size: int
    sha256: str
    archived: bool

    def record(self) -> dict[str, Any]:
        return {
            "file": self.path.name,
            "size": self.size,
            "sha256": self.sha256,
            "archived": self.archived,
        }


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def compress(path: Path, mode: int, gid: int | None) -> Path:
    """`path` as `path.gz`, durable before the plain file is removed."""
    target = path.with_name(path.name + ".gz")
    temp = path.with_name(f".{path.name}.gz.tmp")
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
    try:
        apply_ownership(fd, temp, mode, gid)
        with (
            os.fdopen(fd, "wb", closefd=False) as raw,
            gzip.GzipFile(filename=path.name, mode="wb", fileobj=raw, mtime=0) as packed,
            path.open("rb") as source,
        ):
            shutil.copyfileobj(source, packed, 1 << 20)
        os.fsync(fd)
    except BaseException:
        os.close(fd)
        with contextlib.suppress(OSError):
            temp.unlink()
        raise
    os.close(fd)
    os.rename(temp, target)
    _sync_directory(path.parent)
    path.unlink()
    return target


def _sync_directory(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class Retention:
    """The retention passes of one log. Use `kick()` from the loop's thread."""

    def __init__(
        self,
        settings: AuditSettings,
        gid: int | None,
        write_durable: Callable[..., Awaitable[Any]],
    ) -> None:
        self._settings = settings
        self._gid = gid
        self._write_durable = write_durable
        self._executor = concurrent.futures.ThreadPoolExecutor(
            max_workers=1, thread_name_prefix="hostcapd-audit-retention"
        )
        self._task: asyncio.Task[None] | None = None
        self._again = False
        self._closed = False
        #: Archived files, where the filesystem keeps no user xattrs.
        self._archived: set[str] = set()
        #: How many passes have finished (tests wait on it).
        self.passes = 0

    @property
    def path(self) -> Path:
        return self._settings.path

    def kick(self) -> None:
        """Run a pass soon (one at a time; a kick during a pass runs another after it)."""
        if self._closed:
            return
        if self._task is not None and not self._task.done():
            self._again = True
            return
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def _run(self) -> None:
        while True:
            self._again = False
            try:
                await self._pass()
            except asyncio.CancelledError:
                raise
            except Exception:
                _log.exception("audit retention pass failed; the files are kept")
            self.passes += 1
            if not self._again:
                return

    async def _pass(self) -> None:
        loop = asyncio.get_running_loop()
        removals = await loop.run_in_executor(self._executor, self._prepare)
        if not removals:
            return
        # The trace first, durable; only then are the files removed.
        await self._write_durable(
            "audit.prune",
            files=[r.record() for r in removals],
            keep_files=self._settings.keep_files,
            archive_command=list(self._settings.archive_command) or None,
        )
        await loop.run_in_executor(self._executor, self._remove, removals)

    async def close(self) -> None:
        """Let the running pass finish, and the passes it starts: its own
        audit.prune record can rotate the file, and that rotation's excess is
        pruned before the log closes. Bounded by `CLOSE_WAIT_S` in all."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + CLOSE_WAIT_S
        while (task := self._task) is not None and not task.done():
            try:
                await asyncio.wait_for(asyncio.shield(task), max(0.0, deadline - loop.time()))
            except (TimeoutError, asyncio.CancelledError):
                task.cancel()
                _log.warning("audit retention pass abandoned at close; the next start resumes it")
                break
            except Exception:
                pass
        # No pass runs now, and none starts after this line (same thread as kick).
        self._closed = True
        self._executor.shutdown(wait=False)

    # --- on the retention thread ------------------------------------------------

    def _prepare(self) -> list[Removal]:
        """Compress and archive what is due; the files that may go now."""
        settings = self._settings
        files = rotated_files(self.path)
        if settings.compress == "gzip":
            for index, path in enumerate(files[:-1]):
                if not path.name.endswith(".gz"):
                    try:
                        files[index] = compress(path, settings.file_mode, self._gid)
                    except OSError as error:
                        _log.error("cannot compress %s (kept as it is): %s", path, error)
        final = files[:-1] if settings.compress == "gzip" else files
        if settings.archive_command:
            for path in final:
                if not self._is_archived(path):
                    self._archive(path)
        excess = files[: max(0, len(files) - settings.keep_files)]
        removals: list[Removal] = []
        for path in excess:
            archived = self._is_archived(path)
            if settings.archive_command and not archived:
                _log.error(
                    "audit file %s is past audit.keep_files but not archived: kept", path.name
                )
                continue
            try:
                removals.append(Removal(path, path.stat().st_size, _sha256(path), archived))
            except OSError as error:
                _log.warning("cannot read %s to prune it: %s", path, error.strerror)
        return removals

    def _is_archived(self, path: Path) -> bool:
        if path.name in self._archived:
            return True
        try:
            return bool(os.getxattr(path, ARCHIVED_XATTR))
        except OSError:
            return False

    def _archive(self, path: Path) -> None:
        argv = [*self._settings.archive_command, str(path)]
        try:
            done = subprocess.run(
                argv,
                stdin=subprocess.DEVNULL,
                capture_output=True,
                timeout=self._settings.archive_timeout_seconds,
                env={"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8"},
                cwd=path.parent,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired) as error:
            _log.error("archive_command failed on %s (kept): %s", path.name, error)
            return
        if done.returncode != 0:
            output = (done.stderr or done.stdout)[-OUTPUT_KEPT:].decode(errors="replace").strip()
            _log.error(
                "archive_command exited %d on %s (kept): %s", done.returncode, path.name, output
            )
            return
        digest = _sha256(path)
        try:
            os.setxattr(path, ARCHIVED_XATTR, digest.encode())
        except OSError:
            self._archived.add(path.name)
        _log.info("archived %s", path.name)

    def _remove(self, removals: list[Removal]) -> None:
        for removal in removals:
            try:
                removal.path.unlink()
            except FileNotFoundError:
                pass
            except OSError as error:
                _log.warning("cannot remove old audit file %s: %s", removal.path, error.strerror)
            self._archived.discard(removal.path.name)
        with contextlib.suppress(OSError):
            _sync_directory(self.path.parent)
