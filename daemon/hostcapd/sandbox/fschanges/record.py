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
    its size and, up to `sha256_max_bytes`, its sha256. A file's directory is
    opened beneath its root without following any symlink (once for all its
    files), the file itself without following one. Runs off the loop."""
    dir_fds: dict[str, int] = {}
    out: list[dict[str, Any]] = []
    try:
        for path, kinds, is_dir in changes.listed():
            entry: dict[str, Any] = {"path": path, "kinds": kinds}
            if is_dir:
                entry["dir"] = True
            elif sizes and ("created" in kinds or "modified" in kinds or "renamed_to" in kinds):
                _measure(entry, path, roots, dir_fds, sha256_max_bytes)
            out.append(entry)
    finally:
        for fd in dir_fds.values():
            if fd >= 0:
                os.close(fd)
    return out


def _directory(parent: str, roots: tuple[Path, ...], dir_fds: dict[str, int]) -> int:
    """An O_PATH fd of directory `parent` (kept in `dir_fds`), opened beneath
    the root it is in without following any symlink; -1: beneath no root, or
    gone."""
    fd = dir_fds.get(parent)
    if fd is not None:
        return fd
    fd = -1
    for root in map(str, roots):
        if parent != root and not parent.startswith(root + "/"):
            continue
        root_fd = dir_fds.get(root)
        if root_fd is None:
            try:
                root_fd = os.open(root, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
            except OSError:
                root_fd = -1
            dir_fds[root] = root_fd
        if parent == root or root_fd < 0:
            return root_fd
        try:
            fd = linux.openat2(
                root_fd,
                parent[len(root) + 1 :],
                os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC,
                linux.BENEATH | linux.RESOLVE_NO_SYMLINKS,
            )
        except OSError:
            fd = -1
        break
    dir_fds[parent] = fd
    return fd


def _measure(
    entry: dict[str, Any],
    path: str,
    roots: tuple[Path, ...],
    dir_fds: dict[str, int],
    sha256_max_bytes: int,
) -> None:
    parent, _, name = path.rpartition("/")
    if not name or name in (".", ".."):
        return
    dir_fd = _directory(parent, roots, dir_fds)
    if dir_fd < 0:
        return  # beneath no root, or its directory is gone
    try:
        st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except OSError:
        return  # gone since
    if not stat.S_ISREG(st.st_mode):
        return  # a symlink (not followed), a fifo, ...
    if sha256_max_bytes <= 0 or st.st_size > sha256_max_bytes:
        entry["size"] = st.st_size
        return
    try:
        fd = os.open(
            name,
            os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY,
            dir_fd=dir_fd,
        )
    except OSError:
        return
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return
        entry["size"] = st.st_size
        if st.st_size <= sha256_max_bytes:
            digest = hashlib.sha256()
            offset = 0
            while chunk := os.pread(fd, 1 << 20, offset):
                digest.update(chunk)
                offset += len(chunk)
            entry["sha256"] = digest.hexdigest()
    finally:
        os.close(fd)
