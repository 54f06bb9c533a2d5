"""Resolution beneath the tenant's roots, for every file operation (the
rooms of `FsOperations`: fs/ops.py, listing.py, writing.py): openat2 beneath
a root fd, the real path read back from /proc/self/fd, the tier and pattern
checks on both, and a checked fd reopened through its own /proc entry."""

from __future__ import annotations

import errno
import hashlib
import os
import stat
from collections.abc import Sequence

from hostcapd import linux
from hostcapd.errors import Refusal
from hostcapd.fs.errors import refusal_from_errno
from hostcapd.fs.policy import PathPolicy
from hostcapd.fs.scope import FsScope, Located

#: openat2 returns EAGAIN when a rename raced a lookup; retried this often.
RESOLVE_RETRIES = 16
_HASH_CHUNK = 1 << 20
READ_FLAGS = os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY


def proc_path(fd: int) -> str:
    return f"/proc/self/fd/{fd}"


#: This process's /proc/self/fd, held as an O_PATH fd once first used: an fd's
#: entry is then one lookup in it (readlinkat, openat), where its path walks
#: /proc, self and fd again each time. The same magic links, the same checks
#: by the kernel; a forked child opens its own (its "self" is another).
_proc_fds = -1


def _proc_fd_dir() -> int:
    global _proc_fds
    if _proc_fds < 0:
        _proc_fds = os.open("/proc/self/fd", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    return _proc_fds


def _forget_proc_fd_dir() -> None:
    global _proc_fds
    if _proc_fds >= 0:
        os.close(_proc_fds)
        _proc_fds = -1


os.register_at_fork(after_in_child=_forget_proc_fd_dir)


def type_name(mode: int) -> str:
    if stat.S_ISREG(mode):
        return "regular"
    if stat.S_ISDIR(mode):
        return "directory"
    if stat.S_ISLNK(mode):
        return "symlink"
    return "other"


def wire_name(name: str) -> str:
    """A file name as valid UTF-8 for the wire; undecodable bytes appear as \\xNN."""
    if name.isascii():  # its bytes are its characters (the fs encoding is ASCII's superset)
        return name
    return os.fsencode(name).decode("utf-8", "backslashreplace")


def hash_fd(fd: int) -> str:
    digest = hashlib.sha256()
    offset = 0
    while chunk := os.pread(fd, _HASH_CHUNK, offset):
        digest.update(chunk)
        offset += len(chunk)
    return digest.hexdigest()


class Beneath:
    """The roots whose fds it holds, the tenant's policy, and lookups beneath them."""

    def __init__(
        self,
        scope: FsScope,
        root_fds: Sequence[int],
        policy: PathPolicy,
        *,
        follow_symlinks: bool,
        file_mode: int,
        dir_mode: int,
        umask: int,
    ) -> None:
        self.scope = scope
        self.root_fds = tuple(root_fds)
        self.policy = policy
        self.follow_symlinks = follow_symlinks
        self.file_mode = file_mode & ~umask & 0o7777
        self.dir_mode = dir_mode & 0o7777
        self.resolve = linux.BENEATH | (0 if follow_symlinks else linux.RESOLVE_NO_SYMLINKS)

    # --- resolution -----------------------------------------------------

    def _refusal(self, error: OSError, what: str) -> Refusal:
        if error.errno in (errno.ELOOP, errno.EXDEV) and not self.follow_symlinks:
            return Refusal("SYMLINK_REFUSED", f"{what}: symlinks are not followed for this tenant")
        return refusal_from_errno(error, what)

    def _open(
        self, root: int, parts: Sequence[str], flags: int, what: str, resolve: int | None = None
    ) -> int:
        """openat2 beneath root `root`; a kernel error becomes a refusal."""
        path = "/".join(parts) or "."
        for _ in range(RESOLVE_RETRIES):
            try:
                return linux.openat2(
                    self.root_fds[root], path, flags, self.resolve if resolve is None else resolve
                )
            except OSError as error:
                if error.errno != errno.EAGAIN:
                    raise self._refusal(error, what) from None
        raise Refusal("CONFLICT", f"{what}: the path kept changing while it was resolved; retry")

    def _real_parts(self, root: int, fd: int) -> tuple[str, ...]:
        """Where `fd` really is, as components beneath root `root`."""
        fds = _proc_fd_dir()
        base = os.readlink(str(self.root_fds[root]), dir_fd=fds)
        here = os.readlink(str(fd), dir_fd=fds)
        if here == base:
            return ()
        prefix = base.rstrip("/") + "/"
        if not here.startswith(prefix) or (
            here.endswith(" (deleted)") and os.fstat(fd).st_nlink == 0
        ):
            # moved out from under us (or removed) between open and now
            raise Refusal("NOT_FOUND", "the file was moved or removed while it was being opened")
        return tuple(here[len(prefix) :].split("/"))

    def _check(
        self, anchor: int, parts: Sequence[str], *, write: bool
    ) -> tuple[int, tuple[str, ...]]:
        """Tier and pattern checks; returns the innermost root and the path below it."""
        root, rel = self.scope.innermost_root(anchor, parts)
        if self.policy.is_secret(rel):
            raise Refusal(
                "SECRET_PATH", "the path matches a secret pattern: its content is not served"
            )
        if write:
            if self.scope.roots[root].read_only:
                raise Refusal("READ_ONLY_TIER", "the path lies in a read-only root")
            if self.policy.is_protected(rel):
                raise Refusal(
                    "PROTECTED_PATH", "the path matches a protected pattern: writes are refused"
                )
        return root, rel

    def _locate(self, path: str) -> Located:
        return self.scope.locate(path)

    def _reopen(self, fd: int, flags: int, what: str) -> int:
        # The same inode as the O_PATH fd that was checked: no second lookup by name.
        try:
            return os.open(str(fd), flags | os.O_CLOEXEC, dir_fd=_proc_fd_dir())
        except OSError as error:
            raise self._refusal(error, what) from None
