"""Writing a file beneath the roots, in two steps (`prepare_write`, then
`commit_write` once the daemon's audit record is durable, or `abort_write`):
the content is made durable in an unnamed file first, then renamed into
place if what it replaces is still what was checked."""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import stat
from dataclasses import dataclass, field
from typing import Any

from hostcapd import linux
from hostcapd.errors import Refusal
from hostcapd.fs.beneath import READ_FLAGS, Beneath, hash_fd, wire_name
from hostcapd.fs.scope import Located


@dataclass
class PendingWrite:
    """A prepared write: content durable in an unnamed (or temp-named) file,
    waiting for the daemon's audit record before it is renamed into place."""

    anchor: int
    dir_fd: int
    dir_real: tuple[str, ...]
    name: str
    tmp_fd: int
    #: Set when O_TMPFILE was unavailable and a named temp file was made.
    tmp_name: str | None
    #: (st_dev, st_ino, st_size, st_mtime_ns) of the file being replaced.
    replaces: tuple[int, int, int, int] | None
    #: Parent directories made for this write, (fd of their parent, name).
    created_dirs: list[tuple[int, str]] = field(default_factory=list)


class Writing(Beneath):
    #: The write prepared and not yet committed or aborted.
    pending: PendingWrite | None = None

    def prepare_write(
        self,
        path: str,
        data: bytes | bytearray,
        *,
        create_parents: bool,
        exclusive: bool,
        expected_sha256: str | None,
    ) -> dict[str, Any]:
        """Everything of a write except making it visible: checks, the
        content written and fsynced in an unnamed file beside the target.
        `commit_write` or `abort_write` must follow."""
        if self.pending is not None:
            raise Refusal("INVALID_ARGUMENT", "a prepared write is still pending")
        located = self._locate(path)
        if not located.parts:
            raise Refusal("INVALID_ARGUMENT", "write: the path names a root directory")
        if located.trailing_slash:
            raise Refusal("INVALID_ARGUMENT", "write: the path names a directory")
        self._check(located.root, located.parts, write=True)
        anchor = located.root
        created: list[tuple[int, str]] = []
        fds: list[int] = []
        try:
            dir_real, name, replaces, dir_fd = self._find_target(
                located, create_parents, expected_sha256, created, fds
            )
            root, rel = self._check(anchor, (*dir_real, name), write=True)
            if replaces is not None and exclusive:
                raise Refusal("CONFLICT", "write: the file already exists (exclusive)")
            if replaces is not None and expected_sha256 == "":
                raise Refusal("CONFLICT", "write: the file exists but was expected not to")
            previous = ""
            mode = self.file_mode
            if replaces is not None:
                previous, mode = self._inspect_replaced(dir_fd, name, replaces)
            if expected_sha256 and previous != expected_sha256:
                # (a missing file with an expected hash was refused when found missing)
                raise Refusal(
                    "CONFLICT", "write: the current content does not match expected_sha256"
                )
            tmp_fd, tmp_name = self._write_temp(dir_fd, data, mode)
            fds.remove(dir_fd)
            self.pending = PendingWrite(
                anchor, dir_fd, dir_real, name, tmp_fd, tmp_name, replaces, created
            )
        except BaseException:
            for fd in fds:
                os.close(fd)
            _remove_dirs(created)
            raise
        return {
            "path": wire_name(self.scope.display(root, rel)),
            "size": len(data),
            "sha256": hashlib.sha256(data).hexdigest(),
            "previous_sha256": previous,
            "created": replaces is None,
        }

    def _find_target(
        self,
        located: Located,
        create_parents: bool,
        expected_sha256: str | None,
        created: list[tuple[int, str]],
        fds: list[int],
    ) -> tuple[tuple[str, ...], str, tuple[int, int, int, int] | None, int]:
        """The real directory and name the write lands on, the identity of
        the file it replaces (None: creates), and an open fd of the directory.
        A symlink as the last component is followed (to a target beneath the
        root) unless the tenant does not follow symlinks."""
        anchor = located.root
        flags = os.O_PATH | (0 if self.follow_symlinks else os.O_NOFOLLOW)
        try:
            fd = self._open(anchor, located.parts, flags, "write")
        except Refusal as refusal:
            if refusal.reason != "NOT_FOUND":
                raise
            return self._find_new_target(located, create_parents, expected_sha256, created, fds)
        try:
            st = os.fstat(fd)
            if stat.S_ISLNK(st.st_mode):
                raise Refusal("SYMLINK_REFUSED", "write: symlinks are not followed for this tenant")
            if stat.S_ISDIR(st.st_mode):
                raise Refusal("INVALID_ARGUMENT", "write: the path is a directory")
            if not stat.S_ISREG(st.st_mode):
                raise Refusal("INVALID_ARGUMENT", "write: not a regular file")
            real = self._real_parts(anchor, fd)
        finally:
            os.close(fd)
        dir_real, name = real[:-1], real[-1]
        dir_fd = self._open_real_dir(anchor, dir_real, fds)
        replaces = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
        if _identity(dir_fd, name) != replaces:
            raise Refusal("CONFLICT", "write: the file changed while it was being opened; retry")
        return dir_real, name, replaces, dir_fd

    def _find_new_target(
        self,
        located: Located,
        create_parents: bool,
        expected_sha256: str | None,
        created: list[tuple[int, str]],
        fds: list[int],
    ) -> tuple[tuple[str, ...], str, None, int]:
        anchor = located.root
        parent, name = located.parts[:-1], located.parts[-1]
        if expected_sha256:
            raise Refusal("CONFLICT", "write: the file does not exist")
        try:
            fd = self._open(anchor, parent, os.O_PATH | os.O_DIRECTORY, "write")
        except Refusal as refusal:
            if refusal.reason != "NOT_FOUND":
                raise
            if not create_parents:
                raise Refusal("NOT_FOUND", "write: the parent directory does not exist") from None
            fd = self._make_parents(anchor, parent, name, created)
        try:
            dir_real = self._real_parts(anchor, fd)
        finally:
            os.close(fd)
        dir_fd = self._open_real_dir(anchor, dir_real, fds)
        try:
            st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        except FileNotFoundError:
            return dir_real, name, None, dir_fd
        if stat.S_ISLNK(st.st_mode):
            raise Refusal(
                "SYMLINK_REFUSED", "write: the path is a symlink whose target does not exist"
            )
        raise Refusal("CONFLICT", "write: the file appeared while it was being opened; retry")

    def _open_real_dir(self, anchor: int, dir_real: tuple[str, ...], fds: list[int]) -> int:
        # A real path holds no symlink; one there now means a swap raced us.
        fd = self._open(
            anchor,
            dir_real,
            os.O_RDONLY | os.O_DIRECTORY,
            "write",
            linux.BENEATH | linux.RESOLVE_NO_SYMLINKS,
        )
        fds.append(fd)
        return fd

    def _make_parents(
        self, anchor: int, parts: tuple[str, ...], name: str, created: list[tuple[int, str]]
    ) -> int:
        """Create the missing directories of `parts`; returns an O_PATH fd of
        the last. The policy is checked on the real path they will have
        before the first is made, so a refused write makes no directory."""
        cur = self._open(anchor, (), os.O_PATH | os.O_DIRECTORY, "write")
        try:
            for index, part in enumerate(parts):
                try:
                    nxt = self._open(
                        anchor, parts[: index + 1], os.O_PATH | os.O_DIRECTORY, "write"
                    )
                except Refusal as refusal:
                    if refusal.reason != "NOT_FOUND":
                        raise
                    if not created:
                        self._check(
                            anchor,
                            (*self._real_parts(anchor, cur), *parts[index:], name),
                            write=True,
                        )
                    parent = linux.openat2(cur, ".", os.O_RDONLY | os.O_DIRECTORY, linux.BENEATH)
                    try:
                        os.mkdir(part, self.dir_mode, dir_fd=parent)
                    except FileExistsError:
                        os.close(parent)  # raced by another creator: use what is there
                    except OSError as error:
                        os.close(parent)
                        raise self._refusal(error, "create parent directory") from None
                    else:
                        created.append((parent, part))
                    try:
                        nxt = linux.openat2(
                            cur,
                            part,
                            os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW,
                            linux.BENEATH | linux.RESOLVE_NO_SYMLINKS,
                        )
                    except OSError as error:
                        raise self._refusal(error, "create parent directory") from None
                os.close(cur)
                cur = nxt
            return cur
        except BaseException:
            os.close(cur)
            raise

    def _inspect_replaced(
        self, dir_fd: int, name: str, replaces: tuple[int, int, int, int]
    ) -> tuple[str, int]:
        """sha256 and permission bits of the file a write replaces, after the
        checks a replacement must pass (the hashed fd must still be it)."""
        st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        if st.st_nlink > 1:
            # the other name may live anywhere, outside the roots included
            raise Refusal(
                "PATH_ESCAPES_ROOT", "write: the file has other hard links; writing it is refused"
            )
        if not os.access(name, os.W_OK, dir_fd=dir_fd):
            raise Refusal(
                "ACCESS_DENIED", "write: the file is not writable by the tenant's run-as identity"
            )
        try:
            fd = linux.openat2(
                dir_fd,
                name,
                READ_FLAGS | os.O_NOFOLLOW,
                linux.BENEATH | linux.RESOLVE_NO_SYMLINKS,
            )
        except OSError as error:
            # the audit record needs the sha256 of what is replaced
            raise self._refusal(error, "write: read the current content") from None
        try:
            if _identity_fd(fd) != replaces:
                raise Refusal(
                    "CONFLICT", "write: the file changed while it was being opened; retry"
                )
            previous = hash_fd(fd)
        finally:
            os.close(fd)
        # keep the permission bits a replaced file had (an edited script stays
        # executable); setuid / setgid never survive a rewrite
        return previous, stat.S_IMODE(st.st_mode) & 0o777

    def _write_temp(
        self, dir_fd: int, data: bytes | bytearray, mode: int
    ) -> tuple[int, str | None]:
        tmp_name: str | None = None
        try:
            tmp_fd = os.open(".", os.O_TMPFILE | os.O_WRONLY | os.O_CLOEXEC, mode, dir_fd=dir_fd)
        except OSError as error:
            if error.errno not in (errno.EOPNOTSUPP, errno.EISDIR, errno.EINVAL):
                raise self._refusal(error, "write") from None
            # no O_TMPFILE on this file system: a temp name in the same directory
            tmp_name = f".hostcap-{os.urandom(8).hex()}.tmp"
            try:
                tmp_fd = os.open(
                    tmp_name,
                    os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                    mode,
                    dir_fd=dir_fd,
                )
            except OSError as error2:
                raise self._refusal(error2, "write") from None
        try:
            view = memoryview(data)
            written = 0
            while written < len(view):
                written += os.write(tmp_fd, view[written:])
            os.fchmod(tmp_fd, mode)
            os.fsync(tmp_fd)
        except OSError as error:
            os.close(tmp_fd)
            if tmp_name is not None:
                _unlink_quietly(dir_fd, tmp_name)
            raise self._refusal(error, "write") from None
        return tmp_fd, tmp_name

    def commit_write(self) -> None:
        """Rename the prepared content into place and make it durable."""
        pending = self.pending
        if pending is None:
            raise Refusal("INVALID_ARGUMENT", "no write is prepared")
        self.pending = None
        committed = False
        try:
            if self._real_parts(pending.anchor, pending.dir_fd) != pending.dir_real:
                raise Refusal("CONFLICT", "write: the directory was moved during the write; retry")
            if (
                pending.replaces is not None
                and _identity(pending.dir_fd, pending.name) != pending.replaces
            ):
                raise Refusal("CONFLICT", "write: the file changed during the write; retry")
            self._rename_into_place(pending)
            committed = True
            os.fsync(pending.dir_fd)
            for parent, _ in pending.created_dirs:
                os.fsync(parent)
        except OSError as error:
            if not committed:
                raise self._refusal(error, "write") from None
            # visible but its durability is unconfirmed: nothing to undo
        finally:
            self._release(pending, keep_dirs=committed)

    def _rename_into_place(self, pending: PendingWrite) -> None:
        dir_fd, name = pending.dir_fd, pending.name
        try:
            if pending.tmp_name is None:
                if pending.replaces is None:
                    # linking the unnamed inode is itself the no-replace create
                    linux.link_tmpfile(pending.tmp_fd, dir_fd, name)
                    return
                pending.tmp_name = f".hostcap-{os.urandom(8).hex()}.tmp"
                linux.link_tmpfile(pending.tmp_fd, dir_fd, pending.tmp_name)
            if pending.replaces is None:
                linux.renameat2(dir_fd, pending.tmp_name, dir_fd, name, linux.RENAME_NOREPLACE)
            else:
                os.rename(pending.tmp_name, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
            pending.tmp_name = None
        except FileExistsError:
            raise Refusal("CONFLICT", "write: the file appeared during the write") from None

    def abort_write(self) -> None:
        """Drop the prepared write: nothing of it stays behind."""
        pending = self.pending
        self.pending = None
        if pending is not None:
            self._release(pending, keep_dirs=False)

    def _release(self, pending: PendingWrite, keep_dirs: bool) -> None:
        os.close(pending.tmp_fd)
        if pending.tmp_name is not None:
            _unlink_quietly(pending.dir_fd, pending.tmp_name)
        os.close(pending.dir_fd)
        if keep_dirs:
            for parent, _ in pending.created_dirs:
                os.close(parent)
        else:
            _remove_dirs(pending.created_dirs)


def _identity(dir_fd: int, name: str) -> tuple[int, int, int, int] | None:
    try:
        st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return None
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


def _identity_fd(fd: int) -> tuple[int, int, int, int]:
    st = os.fstat(fd)
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


def _unlink_quietly(dir_fd: int, name: str) -> None:
    with contextlib.suppress(OSError):
        os.unlink(name, dir_fd=dir_fd)


def _remove_dirs(created: list[tuple[int, str]]) -> None:
    """Undo the parent directories a failed write made, innermost first."""
    for parent, name in reversed(created):
        with contextlib.suppress(OSError):  # something was put there meanwhile: leave it
            os.rmdir(name, dir_fd=parent)
        os.close(parent)
    created.clear()
