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


#: An opened executable: its fd, its stat, and its path when already known.
_Opened = tuple[int, os.stat_result, str]
_OPEN_FLAGS = os.O_RDONLY | os.O_CLOEXEC | os.O_NOCTTY | os.O_NONBLOCK


def _open_executable(path: str) -> _Opened | None:
    try:
        fd = os.open(path, _OPEN_FLAGS)
    except OSError:
        return None
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode) or not st.st_mode & 0o111:
        os.close(fd)
        return None
    return fd, st, ""


def _open_allowed(path: str, allowed_dirs: tuple[Path, ...], named: bool = False) -> _Opened | bool:
    """`path` opened if it is an executable file inside `allowed_dirs`; False
    if it is not an executable file, True if it is one outside them. It is
    looked at through an O_PATH fd first (no device's open runs before the
    checks), then opened through that fd: what is checked is the file
    opened, whatever its path's symlinks lead to (one lookup, where realpath
    took an lstat of every component and the open a second lookup). A
    `named` path that is not there is said to be outside, if it would be."""
    try:
        looked = os.open(path, os.O_PATH | os.O_CLOEXEC)
    except OSError:
        return named and not _inside(os.path.realpath(path), allowed_dirs)
    try:
        real = os.readlink(f"/proc/self/fd/{looked}")
        if not _inside(real, allowed_dirs):
            return True
        st = os.fstat(looked)
        if not stat.S_ISREG(st.st_mode) or not st.st_mode & 0o111:
            return False
        return os.open(f"/proc/self/fd/{looked}", _OPEN_FLAGS), st, real
    except OSError:
        return False
    finally:
        os.close(looked)


def resolve(
    name: str, search_path: tuple[Path, ...], allowed_dirs: tuple[Path, ...], cache: HashCache
) -> ResolvedExecutable:
    opened: _Opened | None = None
    if "/" in name:
        if not name.startswith("/"):
            raise Refusal("EXECUTABLE_NOT_ALLOWED", "argv[0] with a slash must be an absolute path")
        if allowed_dirs:
            checked = _open_allowed(name, allowed_dirs, named=True)
            if checked is True:
                raise Refusal(
                    "EXECUTABLE_NOT_ALLOWED",
                    f"{name} is not inside an allowed executable directory",
                )
            opened = None if isinstance(checked, bool) else checked
        else:
            opened = _open_executable(name)
        if opened is None:
            raise Refusal("EXECUTABLE_NOT_ALLOWED", f"{name} is not an executable file")
    else:
        if name in ("", ".", ".."):
            raise Refusal("EXECUTABLE_NOT_FOUND", f"{name!r} is not a command name")
        for directory in search_path:
            candidate = os.path.join(directory, name)
            if not allowed_dirs:
                opened = _open_executable(candidate)
            elif not isinstance(found := _open_allowed(candidate, allowed_dirs), bool):
                opened = found
            if opened is not None:
                break
        if opened is None:
            raise Refusal("EXECUTABLE_NOT_FOUND", f"{name}: command not found on the tenant's PATH")
    fd, st, path = opened
    # The path of the file actually opened, whatever symlinks led there.
    path = path or os.readlink(f"/proc/self/fd/{fd}")
    digest, is_script = cache.digest(fd, st)
    return ResolvedExecutable(fd, path, st.st_dev, st.st_ino, digest, is_script)
