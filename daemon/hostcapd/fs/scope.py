"""Where a request path points, decided lexically, before any file is touched.

    scope = FsScope([RootSpec("/srv/ws", read_only=False), RootSpec("/srv/ref", read_only=True)])
    scope.locate("src/../main.py")      # Located(root=0, parts=("main.py",))
    scope.locate("/srv/ref/doc.md")      # Located(root=1, parts=("doc.md",))
    scope.locate("../../etc/passwd")     # Refusal "PATH_ESCAPES_ROOT"

A relative path is taken beneath the primary (first) root, an absolute one
beneath the root that contains it (the deepest, when roots nest). `..` is
resolved lexically, the way a shell's `cd` does, so the kernel lookup never
sees one: a path whose `..` climbs above its root is refused here as
"PATH_ESCAPES_ROOT" without asking the file system anything (which is also
why a refusal never tells whether something outside exists). Everything
after this — symlinks, races — is the kernel's job under openat2's rules.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

from hostcapd.errors import Refusal

PATH_MAX = 4096
NAME_MAX = 255


@dataclass(frozen=True)
class RootSpec:
    """A root as configured: absolute, normalised path and its tier."""

    path: str
    read_only: bool

    @property
    def parts(self) -> tuple[str, ...]:
        return _components(self.path)


class Located(NamedTuple):
    """A path beneath a root: the root's index and the components below it
    (a named tuple: one a file operation, made without a frozen
    dataclass's field-by-field `object.__setattr__`)."""

    root: int
    parts: tuple[str, ...]
    #: The request ended in "/": it names a directory.
    trailing_slash: bool = False


def _components(path: str) -> tuple[str, ...]:
    return tuple(filter(None, path.split("/")))  # the non-empty parts


class FsScope:
    """The tenant's roots, for lexical location of request paths."""

    def __init__(self, roots: Sequence[RootSpec]) -> None:
        if not roots:
            raise ValueError("a scope needs at least one root")
        self.roots = tuple(roots)
        self._root_parts = tuple(root.parts for root in self.roots)

    def locate(self, path: str) -> Located:
        if not path:
            raise Refusal("INVALID_ARGUMENT", "path is empty")
        if "\0" in path:
            raise Refusal("INVALID_ARGUMENT", "path contains a NUL byte")
        if len(path.encode("utf-8", "surrogatepass")) >= PATH_MAX:
            raise Refusal("INVALID_ARGUMENT", "path is too long")
        trailing = path.endswith("/")
        if path.startswith("/"):
            # POSIX: ".." at "/" stays at "/".
            absolute = _normalise(_components(path), clamp=True)
            assert absolute is not None
            index = self._containing_root(absolute)
            if index is None:
                raise Refusal("PATH_ESCAPES_ROOT", "path is outside the tenant's roots")
            located = Located(index, absolute[len(self._root_parts[index]) :], trailing)
        else:
            parts = _normalise(_components(path), clamp=False)
            if parts is None:
                raise Refusal("PATH_ESCAPES_ROOT", "path climbs above the tenant's root")
            located = Located(0, parts, trailing)
        for part in located.parts:
            if len(part.encode("utf-8", "surrogatepass")) > NAME_MAX:
                raise Refusal("INVALID_ARGUMENT", "a path component is too long")
        return located

    def _containing_root(self, parts: tuple[str, ...]) -> int | None:
        best: int | None = None
        for index, root in enumerate(self._root_parts):
            if parts[: len(root)] == root and (
                best is None or len(root) > len(self._root_parts[best])
            ):
                best = index
        return best

    def innermost_root(self, anchor: int, parts: Sequence[str]) -> tuple[int, tuple[str, ...]]:
        """The deepest root holding `parts` (relative to root `anchor`), and
        the path relative to it: a read-only root nested in a read-write one
        keeps its tier however it is reached."""
        absolute = self._root_parts[anchor] + tuple(parts)
        index = self._containing_root(absolute)
        assert index is not None  # the anchor itself contains it
        return index, absolute[len(self._root_parts[index]) :]

    def display(self, root: int, parts: Sequence[str]) -> str:
        """The absolute path as the tenant's children see it."""
        base = self.roots[root].path.rstrip("/")
        return "/".join((base, *parts)) if parts else (base or "/")


def _normalise(parts: Sequence[str], clamp: bool) -> tuple[str, ...] | None:
    """Drop "." and resolve ".." lexically; None when ".." climbs above the
    start (unless `clamp`, for absolute paths)."""
    out: list[str] = []
    for part in parts:
        if part == ".":
            continue
        if part == "..":
            if out:
                out.pop()
            elif not clamp:
                return None
            continue
        out.append(part)
    return tuple(out)
