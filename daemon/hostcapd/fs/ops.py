"""The file operations, on directory fds of the tenant's roots.

    ops = FsOperations(scope, root_fds, policy, follow_symlinks=True, file_mode=0o644,
                       dir_mode=0o755, umask=0o022)
    header, fd = ops.open_for_read("src/main.py")      # checked, opened as the tenant
    prepared = ops.prepare_write("notes.md", b"...", create_parents=False,
                                 exclusive=False, expected_sha256=None)
    ops.commit_write()          # or ops.abort_write()
    listing = ops.list_directory("src", max_entries=100, depth=2, include_hidden=False)

Runs inside the fs worker, as the tenant's run-as identity. Every lookup is
openat2 beneath a root fd with RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS (and
RESOLVE_NO_SYMLINKS when the tenant does not follow symlinks), after the
path was located lexically (`FsScope.locate`). Policy (tiers, protected and
secret patterns) is checked on the lexical path first and then on the path
the kernel actually reached, read back from /proc/self/fd: a symlink inside
the root can lead to `.git/hooks`, and the real path is what counts.

A file once opened is reopened through its own /proc/self/fd entry, never by
name again, so what is read is the inode that was checked; for a read, that
fd is what the worker hands to the daemon.
"""

from __future__ import annotations

import os
import stat
from typing import Any

from hostcapd import linux
from hostcapd.errors import Refusal
from hostcapd.fs.beneath import READ_FLAGS, proc_path, type_name, wire_name
from hostcapd.fs.listing import Listing
from hostcapd.fs.writing import PendingWrite, Writing

__all__ = ["FsOperations", "PendingWrite"]


class FsOperations(Listing, Writing):
    """Read, write, list and stat beneath the roots whose fds it holds."""

    # --- read -----------------------------------------------------------

    def open_for_read(self, path: str) -> tuple[dict[str, Any], int]:
        """The checked file opened O_RDONLY, and its real path. The content
        is read by the holder of the fd (see `content.read_range`)."""
        header, fd, _ = self.open_checked(path)
        return header, fd

    def open_checked(self, path: str) -> tuple[dict[str, Any], int, os.stat_result]:
        """`open_for_read`, and the file's stat as it was checked (the
        reopened fd is the same inode: `content.read_range` takes it rather
        than asking again)."""
        located = self._locate(path)
        checked = self._check(located.root, located.parts, write=False)
        fd = self._open(located.root, located.parts, os.O_PATH, "read")
        try:
            real = self._real_parts(located.root, fd)
            # The checks are a function of the root and the components: where
            # the kernel's path is the one checked (no symlink on the way), the
            # answer is the one just given.
            if real != located.parts:
                checked = self._check(located.root, real, write=False)
            root, rel = checked
            st = os.fstat(fd)
            mode = st.st_mode
            if stat.S_ISDIR(mode):
                raise Refusal("INVALID_ARGUMENT", "read: the path is a directory")
            if not stat.S_ISREG(mode):
                raise Refusal("INVALID_ARGUMENT", "read: not a regular file")
            file_fd = self._reopen(fd, READ_FLAGS, "read")
        finally:
            os.close(fd)
        header = {
            "path": wire_name(self.scope.display(root, rel)),
            "name": wire_name(rel[-1]) if rel else "",
            "size": st.st_size,
        }
        return header, file_fd, st

    # --- stat -----------------------------------------------------------

    def stat(self, path: str) -> dict[str, Any]:
        located = self._locate(path)
        flags = os.O_PATH | (0 if self.follow_symlinks else os.O_NOFOLLOW)
        fd = self._open(located.root, located.parts, flags, "stat")
        try:
            real = self._real_parts(located.root, fd)
            root, rel = self.scope.innermost_root(located.root, real)
            st = os.fstat(fd)
            writable = self._writable(located.root, real, root, rel, fd, st)
        finally:
            os.close(fd)
        return {
            "path": wire_name(self.scope.display(root, rel)),
            "type": type_name(st.st_mode),
            "size": st.st_size,
            "mode": stat.S_IMODE(st.st_mode),
            "mtime": st.st_mtime,
            "writable": writable,
        }

    def _writable(
        self,
        anchor: int,
        real: tuple[str, ...],
        root: int,
        rel: tuple[str, ...],
        fd: int,
        st: os.stat_result,
    ) -> bool:
        """Whether a WriteFile here would pass the tier, the patterns and the
        kernel's permission checks as the run-as identity."""
        if (
            self.scope.roots[root].read_only
            or self.policy.is_secret(rel)
            or self.policy.is_protected(rel)
        ):
            return False
        if stat.S_ISDIR(st.st_mode):
            return os.access(proc_path(fd), os.W_OK | os.X_OK)
        if (
            not stat.S_ISREG(st.st_mode)
            or st.st_nlink > 1
            or not os.access(proc_path(fd), os.W_OK | os.R_OK)
        ):
            return False
        # the write replaces the file by a rename in its directory
        try:
            parent = self._open(
                anchor, real[:-1], os.O_PATH | os.O_DIRECTORY, "stat", linux.BENEATH
            )
        except Refusal:
            return False
        try:
            return os.access(proc_path(parent), os.W_OK | os.X_OK)
        finally:
            os.close(parent)
