"""Executable resolution: argv[0] to an opened, hashed file the child execs by fd.

A bare name is looked up on the tenant's PATH; a name with a slash must be
absolute (and inside an allowed executable dir when the tenant lists any).
The file is opened once here; its device/inode/sha256 are what the audit
record and the Started event report, and the child execs that very fd, so a
binary swapped on disk in between cannot slip in.
"""

from __future__ import annotations

import hashlib
import os
import stat
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path

from hostcapd.errors import Refusal


@dataclass(frozen=True)
class ResolvedExecutable:
    fd: int
    path: str
    device: int
    inode: int
    sha256: str
    #: A "#!" script: it must be exec'd by path (the kernel's interpreter
    #: lookup cannot use a close-on-exec fd).
    is_script: bool

    def close(self) -> None:
        os.close(self.fd)


_Key = tuple[int, int, int, int, int]


class HashCache:
    """sha256 of executables by (dev, ino, size, mtime_ns, ctime_ns): any write
    to the file changes ctime, so a stale hash is never reported."""

    def __init__(self, size: int = 512) -> None:
        self._entries: OrderedDict[_Key, tuple[str, bool]] = OrderedDict()
        self._size = size

    def digest(self, fd: int, st: os.stat_result) -> tuple[str, bool]:
        key = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
        hit = self._entries.get(key)
        if hit is not None:
            self._entries.move_to_end(key)
            return hit
        h = hashlib.sha256()
        head = b""
        offset = 0
        while True:
            chunk = os.pread(fd, 1 << 20, offset)
            if not chunk:
                break
            if offset == 0:
                head = chunk[:2]
            h.update(chunk)
            offset += len(chunk)
        value = (h.hexdigest(), head == b"#!")
        self._entries[key] = value
        if len(self._entries) > self._size:
            self._entries.popitem(last=False)
        return value


def _inside(path: str, dirs: tuple[Path, ...]) -> bool:
    return any(os.path.commonpath([path, str(d)]) == str(d) for d in dirs)


def _open_executable(path: str) -> tuple[int, os.stat_result] | None:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOCTTY | os.O_NONBLOCK)
    except OSError:
        return None
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode) or not st.st_mode & 0o111:
        os.close(fd)
        return None
    return fd, st


def resolve(
    name: str, search_path: tuple[Path, ...], allowed_dirs: tuple[Path, ...], cache: HashCache
) -> ResolvedExecutable:
    if "/" in name:
        if not name.startswith("/"):
            raise Refusal("EXECUTABLE_NOT_ALLOWED", "argv[0] with a slash must be an absolute path")
        real = os.path.realpath(name)
        if allowed_dirs and not _inside(real, allowed_dirs):
            raise Refusal(
                "EXECUTABLE_NOT_ALLOWED", f"{name} is not inside an allowed executable directory"
            )
        opened = _open_executable(real)
        if opened is None:
            raise Refusal("EXECUTABLE_NOT_ALLOWED", f"{name} is not an executable file")
    else:
        if name in ("", ".", ".."):
            raise Refusal("EXECUTABLE_NOT_FOUND", f"{name!r} is not a command name")
        opened = None
        for directory in search_path:
            candidate = os.path.join(directory, name)
            opened = _open_executable(candidate)
            if opened is not None:
                # (realpath is an lstat per component: only when it is needed)
                if allowed_dirs and not _inside(os.path.realpath(candidate), allowed_dirs):
                    os.close(opened[0])
                    opened = None
                    continue
                break
        if opened is None:
            raise Refusal("EXECUTABLE_NOT_FOUND", f"{name}: command not found on the tenant's PATH")
    fd, st = opened
    # The path of the file actually opened, whatever symlinks led there.
    path = os.readlink(f"/proc/self/fd/{fd}")
    digest, is_script = cache.digest(fd, st)
    return ResolvedExecutable(fd, path, st.st_dev, st.st_ino, digest, is_script)
