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

import contextlib
import errno
import hashlib
import os
import stat
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from hostcapd import linux
from hostcapd.errors import Refusal
from hostcapd.fs.errors import refusal_from_errno
from hostcapd.fs.policy import PathPolicy
from hostcapd.fs.scope import FsScope, Located, _normalise

#: openat2 returns EAGAIN when a rename raced a lookup; retried this often.
RESOLVE_RETRIES = 16
#: A listing reads at most this many names per entry it may return (plus a
#: floor), so a huge tree cannot keep the worker busy for minutes.
LIST_SCAN_FACTOR = 10
LIST_SCAN_FLOOR = 10_000
_HASH_CHUNK = 1 << 20
_READ_FLAGS = os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY


def _proc(fd: int) -> str:
    return f"/proc/self/fd/{fd}"


def _type_name(mode: int) -> str:
    if stat.S_ISREG(mode):
        return "regular"
    if stat.S_ISDIR(mode):
        return "directory"
    if stat.S_ISLNK(mode):
        return "symlink"
    return "other"


def _wire_name(name: str) -> str:
    """A file name as valid UTF-8 for the wire; undecodable bytes appear as \\xNN."""
    return os.fsencode(name).decode("utf-8", "backslashreplace")


def _hash_fd(fd: int) -> str:
    digest = hashlib.sha256()
    offset = 0
    while chunk := os.pread(fd, _HASH_CHUNK, offset):
        digest.update(chunk)
        offset += len(chunk)
    return digest.hexdigest()


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


@dataclass
class _ListBudget:
    max_entries: int
    scan_limit: int
    scanned: int = 0
    exhausted: bool = False


class FsOperations:
    """Read, write, list and stat beneath the roots whose fds it holds."""

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
        self.pending: PendingWrite | None = None

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
        base = os.readlink(_proc(self.root_fds[root]))
        here = os.readlink(_proc(fd))
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

    # --- read -----------------------------------------------------------

    def open_for_read(self, path: str) -> tuple[dict[str, Any], int]:
        """The checked file opened O_RDONLY, and its real path. The content
        is read by the holder of the fd (see `content.read_range`)."""
        located = self._locate(path)
        self._check(located.root, located.parts, write=False)
        fd = self._open(located.root, located.parts, os.O_PATH, "read")
        try:
            real = self._real_parts(located.root, fd)
            root, rel = self._check(located.root, real, write=False)
            mode = os.fstat(fd).st_mode
            if stat.S_ISDIR(mode):
                raise Refusal("INVALID_ARGUMENT", "read: the path is a directory")
            if not stat.S_ISREG(mode):
                raise Refusal("INVALID_ARGUMENT", "read: not a regular file")
            file_fd = self._reopen(fd, _READ_FLAGS, "read")
        finally:
            os.close(fd)
        header = {
            "path": _wire_name(self.scope.display(root, rel)),
            "name": _wire_name(rel[-1]) if rel else "",
            "size": os.fstat(file_fd).st_size,
        }
        return header, file_fd

    def _reopen(self, fd: int, flags: int, what: str) -> int:
        # The same inode as the O_PATH fd that was checked: no second lookup by name.
        try:
            return os.open(_proc(fd), flags | os.O_CLOEXEC)
        except OSError as error:
            raise self._refusal(error, what) from None

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
            "path": _wire_name(self.scope.display(root, rel)),
            "type": _type_name(st.st_mode),
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
            return os.access(_proc(fd), os.W_OK | os.X_OK)
        if (
            not stat.S_ISREG(st.st_mode)
            or st.st_nlink > 1
            or not os.access(_proc(fd), os.W_OK | os.R_OK)
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
            return os.access(_proc(parent), os.W_OK | os.X_OK)
        finally:
            os.close(parent)

    # --- list -----------------------------------------------------------

    def list_directory(
        self, path: str, max_entries: int, depth: int, include_hidden: bool
    ) -> dict[str, Any]:
        located = self._locate(path)
        self._check(located.root, located.parts, write=False)
        fd = self._open(located.root, located.parts, os.O_PATH, "list")
        try:
            real = self._real_parts(located.root, fd)
            root, rel = self._check(located.root, real, write=False)
            if not stat.S_ISDIR(os.fstat(fd).st_mode):
                raise Refusal("INVALID_ARGUMENT", "list: not a directory")
            dir_fd = self._reopen(fd, os.O_RDONLY | os.O_DIRECTORY, "list")
        finally:
            os.close(fd)
        budget = _ListBudget(max_entries, max(max_entries * LIST_SCAN_FACTOR, LIST_SCAN_FLOOR))
        entries: list[dict[str, Any]] = []
        truncated = False
        try:
            for entry in self._walk(
                located.root, dir_fd, real, (), depth - 1, include_hidden, budget
            ):
                if len(entries) == max_entries:
                    truncated = True
                    break
                entries.append(entry)
        finally:
            os.close(dir_fd)
        return {
            "path": _wire_name(self.scope.display(root, rel)),
            "entries": entries,
            "truncated": truncated or budget.exhausted,
        }

    def _walk(
        self,
        anchor: int,
        dir_fd: int,
        dir_real: tuple[str, ...],
        prefix: tuple[str, ...],
        levels: int,
        include_hidden: bool,
        budget: _ListBudget,
    ) -> Iterator[dict[str, Any]]:
        """Entries beneath `dir_fd` in byte order of their relative names.

        A directory's subtree sorts as its name plus "/", which is exactly
        where byte order puts "name/child" among its siblings ("a.txt" <
        "a/b" < "a0"): so each directory is read and sorted once and the walk
        can stop at max_entries without sorting the whole tree."""
        items: list[tuple[bytes, bool, str, os.stat_result]] = []
        with os.scandir(dir_fd) as scan:
            for dirent in scan:
                budget.scanned += 1
                if budget.scanned > budget.scan_limit:
                    budget.exhausted = True
                    break
                name = dirent.name
                if not include_hidden and name.startswith("."):
                    continue
                try:
                    st = dirent.stat(follow_symlinks=False)
                except OSError:
                    continue  # removed while listing
                key = os.fsencode(name)
                items.append((key, False, name, st))
                if levels > 0 and stat.S_ISDIR(st.st_mode):
                    _, child_rel = self.scope.innermost_root(anchor, (*dir_real, name))
                    if not self.policy.is_secret(child_rel):
                        items.append((key + b"/", True, name, st))
        items.sort(key=lambda item: item[0])
        for _, descend, name, st in items:
            if not descend:
                yield self._entry(anchor, dir_fd, dir_real, prefix, name, st)
                continue
            try:
                child = linux.openat2(
                    dir_fd,
                    name,
                    os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW,
                    linux.BENEATH | linux.RESOLVE_NO_SYMLINKS,
                )
            except OSError:
                continue  # replaced or removed meanwhile, or not readable by the tenant
            try:
                yield from self._walk(
                    anchor,
                    child,
                    (*dir_real, name),
                    (*prefix, name),
                    levels - 1,
                    include_hidden,
                    budget,
                )
            finally:
                os.close(child)
            if budget.exhausted:
                return

    def _entry(
        self,
        anchor: int,
        dir_fd: int,
        dir_real: tuple[str, ...],
        prefix: tuple[str, ...],
        name: str,
        st: os.stat_result,
    ) -> dict[str, Any]:
        target = ""
        if stat.S_ISLNK(st.st_mode):
            target = self._inside_target(anchor, dir_fd, dir_real, name)
        return {
            "name": _wire_name("/".join((*prefix, name))),
            "type": _type_name(st.st_mode),
            "size": st.st_size,
            "mtime": st.st_mtime,
            "target": target,
        }

    def _inside_target(self, anchor: int, dir_fd: int, dir_real: tuple[str, ...], name: str) -> str:
        """A symlink's text when following it stays beneath the root, else ""
        (a target outside is never revealed, not even its text)."""
        try:
            text = os.readlink(name, dir_fd=dir_fd)
        except OSError:
            return ""
        try:
            fd = linux.openat2(
                self.root_fds[anchor], "/".join((*dir_real, name)), os.O_PATH, linux.BENEATH
            )
        except OSError as error:
            if error.errno != errno.ENOENT or text.startswith("/"):
                return ""
            # dangling: shown when its text, taken lexically, stays inside
            if _normalise((*dir_real, *text.split("/")), clamp=False) is None:
                return ""
            return _wire_name(text)
        os.close(fd)
        return _wire_name(text)

    # --- write ----------------------------------------------------------

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
            "path": _wire_name(self.scope.display(root, rel)),
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
                _READ_FLAGS | os.O_NOFOLLOW,
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
            previous = _hash_fd(fd)
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
