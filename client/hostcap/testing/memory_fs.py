"""The in-memory fs arm: a jailed file tree with the daemon's floor in miniature."""

from __future__ import annotations

import hashlib
import mimetypes
import posixpath
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from hostcap_proto.floor import (
    MAX_READ_BYTES,
    MAX_WRITE_BYTES,
    PROTECTED_PATHS,
    SECRET_PATHS,
)

from hostcap.approval import path_matches
from hostcap.errors import HostError
from hostcap.host import (
    DirEntry,
    DirListing,
    FileRead,
    FileStat,
    FileType,
    FileWritten,
)

#: Labels every spawn and write must carry.
REQUIRED_LABELS = ("session", "node_id", "tool_call_id")
#: The daemon's default floor patterns (its `FsSettings` defaults).
DEFAULT_PROTECTED = (
    *PROTECTED_PATHS,
    # The daemon's default adds the files git runs programs from (its config.py).
    "**/.gitconfig",
    "**/.gitattributes",
    "**/.gitmodules",
    "**/.config/git/**",
    "**/.git/info/attributes",
    "**/.git/config.worktree",
    "**/.git/modules/**",
)
DEFAULT_SECRET = SECRET_PATHS


def require_labels(labels: Mapping[str, str]) -> None:
    missing = [name for name in REQUIRED_LABELS if name not in labels]
    if missing:
        raise HostError("INVALID_ARGUMENT", f"labels missing: {', '.join(missing)}")


# --------------------------------------------------------------------------- fs


@dataclass(frozen=True)
class MemoryRoot:
    path: str
    tier: str = "read-write"  # or "read-only"


@dataclass(frozen=True)
class WriteRecord:
    path: str
    size: int
    sha256: str
    labels: Mapping[str, str]


class MemoryFs:
    """A jailed file tree in memory. The first root is the primary one:
    relative paths resolve against it."""

    def __init__(
        self,
        roots: Sequence[MemoryRoot] = (
            MemoryRoot("/workspace"),
            MemoryRoot("/reference", "read-only"),
        ),
        *,
        protected_paths: Iterable[str] = DEFAULT_PROTECTED,
        secret_paths: Iterable[str] = DEFAULT_SECRET,
        max_read_bytes: int = MAX_READ_BYTES,
        max_write_bytes: int = MAX_WRITE_BYTES,
        max_list_entries: int = 10_000,
    ) -> None:
        if not roots or not all(posixpath.isabs(root.path) for root in roots):
            raise ValueError("MemoryFs needs at least one absolute root")
        self.roots = tuple(MemoryRoot(posixpath.normpath(r.path), r.tier) for r in roots)
        self.protected_paths = tuple(protected_paths)
        self.secret_paths = tuple(secret_paths)
        self.max_read_bytes = max_read_bytes
        self.max_write_bytes = max_write_bytes
        self.max_list_entries = max_list_entries
        self.files: dict[str, bytes] = {}
        self.dirs: set[str] = {root.path for root in self.roots}
        self.symlinks: dict[str, str] = {}
        #: Every write this host performed, with its labels (its audit log).
        self.writes: list[WriteRecord] = []
        #: When False, writes are refused AUDIT_UNAVAILABLE (the audit log cannot be written).
        self.audit_available = True

    # --------------------------------------------------------------- set-up

    def put(self, path: str, data: bytes | str) -> None:
        """Create a file (and its parents) directly, bypassing the floor: test set-up."""
        absolute = self._absolute(path)
        self._mkdirs(posixpath.dirname(absolute))
        self.files[absolute] = data.encode() if isinstance(data, str) else bytes(data)

    def symlink(self, path: str, target: str) -> None:
        """Create a symlink at `path` pointing to `target` (absolute or relative to its directory)."""
        absolute = self._absolute(path)
        self._mkdirs(posixpath.dirname(absolute))
        self.symlinks[absolute] = target

    def content(self, path: str) -> bytes | None:
        return self.files.get(self._absolute(path))

    # ------------------------------------------------------------ resolution

    def _absolute(self, path: str) -> str:
        return posixpath.normpath(posixpath.join(self.roots[0].path, path))

    def _root_of(self, absolute: str) -> MemoryRoot | None:
        for root in self.roots:
            if absolute == root.path or absolute.startswith(root.path.rstrip("/") + "/"):
                return root
        return None

    def resolve(self, path: str) -> tuple[str, MemoryRoot]:
        """The absolute path `path` names, following symlinks that stay inside the roots."""
        if not path or "\x00" in path:
            raise HostError("INVALID_ARGUMENT", "empty path or NUL byte")
        absolute = self._absolute(path)
        if self._root_of(absolute) is None:
            raise HostError("PATH_ESCAPES_ROOT", "the path is outside every root")
        for _ in range(40):
            link = self._first_link(absolute)
            if link is None:
                break
            link_path, rest = link
            target = posixpath.normpath(
                posixpath.join(posixpath.dirname(link_path), self.symlinks[link_path], rest)
            )
            if self._root_of(target) is None:
                raise HostError("SYMLINK_REFUSED", "a symlink on the path leaves the roots")
            absolute = target
        else:
            raise HostError("SYMLINK_REFUSED", "too many symlinks")
        root = self._root_of(absolute)
        assert root is not None
        return absolute, root

    def _first_link(self, absolute: str) -> tuple[str, str] | None:
        parts = absolute.strip("/").split("/")
        for i in range(1, len(parts) + 1):
            prefix = "/" + "/".join(parts[:i])
            if prefix in self.symlinks:
                return prefix, "/".join(parts[i:])
        return None

    def _relative(self, absolute: str, root: MemoryRoot) -> str:
        return posixpath.relpath(absolute, root.path)

    def _check_secret(self, absolute: str, root: MemoryRoot) -> None:
        if path_matches(self._relative(absolute, root), self.secret_paths):
            raise HostError("SECRET_PATH", "secret path")

    def _mkdirs(self, directory: str) -> None:
        while directory not in self.dirs and directory != "/":
            self.dirs.add(directory)
            directory = posixpath.dirname(directory)

    # ---------------------------------------------------------- the arm

    async def read_file(self, path: str, *, max_bytes: int | None = None) -> FileRead:
        absolute, root = self.resolve(path)
        self._check_secret(absolute, root)
        if max_bytes is not None and (max_bytes <= 0 or max_bytes > self.max_read_bytes):
            raise HostError("LIMIT_INVALID", "max_bytes above the read ceiling")
        if absolute in self.dirs:
            raise HostError("INVALID_ARGUMENT", "is a directory")
        data = self.files.get(absolute)
        if data is None:
            raise HostError("NOT_FOUND", "no such file")
        limit = max_bytes or self.max_read_bytes
        kept = data[:limit]
        binary = is_binary(kept)
        media_type = mimetypes.guess_type(absolute)[0] or (
            "application/octet-stream" if binary else "text/plain"
        )
        return FileRead(
            path=absolute, data=kept, size=len(data), truncated=len(kept) < len(data), is_binary=binary,
            media_type=media_type, sha256=hashlib.sha256(kept).hexdigest(),
        )  # fmt: skip

    async def write_file(
        self,
        path: str,
        data: bytes,
        *,
        labels: Mapping[str, str],
        create_parents: bool = True,
        expected_sha256: str | None = None,
    ) -> FileWritten:
        require_labels(labels)
        absolute, root = self.resolve(path)
        self._check_secret(absolute, root)
        if root.tier != "read-write":
            raise HostError("READ_ONLY_TIER", "read-only root")
        if path_matches(self._relative(absolute, root), self.protected_paths):
            raise HostError("PROTECTED_PATH", "protected path")
        if len(data) > self.max_write_bytes:
            raise HostError("TOO_LARGE", "content above the write ceiling")
        if absolute in self.dirs:
            raise HostError("INVALID_ARGUMENT", "is a directory")
        parent = posixpath.dirname(absolute)
        if parent not in self.dirs and not create_parents:
            raise HostError("NOT_FOUND", "parent directory missing")
        previous = self.files.get(absolute)
        previous_sha = hashlib.sha256(previous).hexdigest() if previous is not None else None
        if expected_sha256 is not None and expected_sha256 != (previous_sha or ""):
            raise HostError("CONFLICT", "expected sha256 did not match")
        if not self.audit_available:
            raise HostError("AUDIT_UNAVAILABLE", "audit log unavailable")
        self._mkdirs(parent)
        self.files[absolute] = bytes(data)
        sha = hashlib.sha256(data).hexdigest()
        self.writes.append(WriteRecord(absolute, len(data), sha, dict(labels)))
        return FileWritten(
            path=absolute,
            size=len(data),
            sha256=sha,
            created=previous is None,
            previous_sha256=previous_sha,
        )

    async def list_directory(
        self,
        path: str,
        *,
        max_entries: int | None = None,
        depth: int | None = None,
        include_hidden: bool = False,
    ) -> DirListing:
        absolute, _ = self.resolve(path)
        if absolute not in self.dirs:
            raise HostError("NOT_FOUND", "no such directory")
        limit = min(max_entries or self.max_list_entries, self.max_list_entries)
        levels = depth or 1
        names: list[DirEntry] = []
        prefix = absolute.rstrip("/") + "/"
        candidates = sorted({*self.files, *self.dirs, *self.symlinks})
        for candidate in candidates:
            if not candidate.startswith(prefix):
                continue
            relative = candidate[len(prefix) :]
            parts = relative.split("/")
            if len(parts) > levels or (
                not include_hidden and any(p.startswith(".") for p in parts)
            ):
                continue
            if path_matches(relative, self.secret_paths):
                continue
            if candidate in self.symlinks:
                kind, size = FileType.SYMLINK, 0
            elif candidate in self.dirs:
                kind, size = FileType.DIRECTORY, 0
            else:
                kind, size = FileType.REGULAR, len(self.files[candidate])
            names.append(DirEntry(name=relative, type=kind, size=size))
        return DirListing(path=absolute, entries=tuple(names[:limit]), truncated=len(names) > limit)

    async def stat(self, path: str) -> FileStat:
        absolute, root = self.resolve(path)
        self._check_secret(absolute, root)
        writable = root.tier == "read-write" and not path_matches(
            self._relative(absolute, root), self.protected_paths
        )
        if absolute in self.dirs:
            return FileStat(
                path=absolute,
                type=FileType.DIRECTORY,
                size=0,
                mode=0o755,
                mtime=0.0,
                writable=writable,
            )
        if absolute in self.files:
            size = len(self.files[absolute])
            return FileStat(
                path=absolute,
                type=FileType.REGULAR,
                size=size,
                mode=0o644,
                mtime=0.0,
                writable=writable,
            )
        raise HostError("NOT_FOUND", "no such file")


def is_binary(data: bytes) -> bool:
    if b"\x00" in data[:8192]:
        return True
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as error:
        # A multi-byte character cut at the end of a truncated read is still text.
        return error.start < len(data) - 3
    return False
