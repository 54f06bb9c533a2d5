"""The fs.changes record's `changes` (decision 0030): each path a spawn
changed with its kinds, and for a regular file that exists now its size and
sha256, read beneath its root without following any symlink."""

from __future__ import annotations

import hashlib
import os
import stat
from pathlib import Path
from typing import Any

from hostcapd import linux
from hostcapd.sandbox.fschanges.changes import Changes


def describe(
    changes: Changes, roots: tuple[Path, ...], sizes: bool, sha256_max_bytes: int
) -> list[dict[str, Any]]:
    """The record's `changes`: each listed path with its kinds, and for a
    regular file that exists now (created or modified, not since removed),
    its size and, up to `sha256_max_bytes`, its sha256. Files are opened
    beneath their root without following any symlink. Runs off the loop."""
    root_fds: dict[str, int] = {}
    out: list[dict[str, Any]] = []
    try:
        for path, kinds, is_dir in changes.listed():
            entry: dict[str, Any] = {"path": path, "kinds": kinds}
            if is_dir:
                entry["dir"] = True
            elif sizes and ("created" in kinds or "modified" in kinds or "renamed_to" in kinds):
                _measure(entry, path, roots, root_fds, sha256_max_bytes)
            out.append(entry)
    finally:
        for fd in root_fds.values():
            os.close(fd)
    return out


def _measure(
    entry: dict[str, Any],
    path: str,
    roots: tuple[Path, ...],
    root_fds: dict[str, int],
    sha256_max_bytes: int,
) -> None:
    for root in map(str, roots):
        if path.startswith(root + "/"):
            break
    else:
        return
    if root not in root_fds:
        root_fds[root] = os.open(root, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        fd = linux.openat2(
            root_fds[root],
            path[len(root) + 1 :],
            os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY,
            linux.BENEATH | linux.RESOLVE_NO_SYMLINKS,
        )
    except OSError:
        return  # gone since (removed, or a symlink: not followed)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return
        entry["size"] = st.st_size
        if sha256_max_bytes > 0 and st.st_size <= sha256_max_bytes:
            digest = hashlib.sha256()
            offset = 0
            while chunk := os.pread(fd, 1 << 20, offset):
                digest.update(chunk)
                offset += len(chunk)
            entry["sha256"] = digest.hexdigest()
    finally:
        os.close(fd)
