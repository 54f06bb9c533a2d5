"""Protected and secret path patterns, matched on paths relative to a root.

    policy = PathPolicy(protected=(".git/hooks/**",), secret=("**/.env",))
    policy.is_secret(("app", ".ENV"))        # True
    policy.is_protected((".git", "hooks", "pre-commit"))   # True

Pattern language (anchored at the root, "/"-separated):

- `**` as a whole component matches zero or more components;
- otherwise a component is an fnmatch pattern (`*`, `?`, `[...]`) that never
  crosses a "/";
- a pattern that matches a directory covers everything beneath it, so
  `**/.env` also refuses `.env/anything` (fail closed).

Matching is always case-insensitive (both sides casefolded): whether a file
system folds case can differ per mount and even per directory (ext4 and
f2fs casefold, vfat, SMB), and treating it as case-sensitive where it is not
would let `.ENV` reach `.env`. Folding everywhere refuses a few more names
than strictly needed; that is the fail-closed side.

Secret paths refuse reads and writes; protected paths refuse writes. Names
and metadata (listings, stat) stay visible: contents are what is guarded.
`EXAMPLES` are the default tables' accepted and rejected paths, checked by
the tests so a change of the matcher cannot silently change the policy.
"""

from __future__ import annotations

import fnmatch
import functools
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

#: pattern -> (paths it must match, paths it must not match), for the
#: default tables of `hostcapd.config.FsSettings`.
EXAMPLES: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    # secret paths
    "**/.env": (
        (".env", "app/.env", "APP/.ENV", ".env/nested"),
        ("env", ".envrc", "app/.environment"),
    ),
    "**/.env.*": (
        (".env.local", "deploy/.env.production", ".ENV.Test"),
        (".env", ".envrc", "env.local"),
    ),
    "**/*.pem": (("cert.pem", "tls/server.PEM"), ("pem", "cert.pem.txt", "pem/readme")),
    "**/*.key": (("server.key", "a/b/c.KEY"), ("key", "keyboard.txt", "monkey")),
    "**/.ssh/**": (
        (".ssh", ".ssh/id_rsa", "home/u/.ssh/config", ".SSH/known_hosts"),
        ("ssh/config", ".sshx", "a.ssh"),
    ),
    "**/id_*": (("id_rsa", "keys/id_ed25519.pub", "ID_ECDSA"), ("myid_rsa", "ids", "grid_x")),
    # protected paths (the defaults, and their root-anchored forms)
    "**/.git/hooks/**": (
        (".git/hooks", ".git/hooks/pre-commit", "sub/.git/hooks/pre-commit", ".GIT/Hooks/x"),
        (".git/hooksx", ".github/hooks/x", ".git/HEAD", "git/hooks/x"),
    ),
    "**/.git/config": (
        (".git/config", "vendor/lib/.git/config", ".Git/CONFIG"),
        (".git/config.bak", "git/config", ".git/configs/x"),
    ),
    "**/.gitconfig": ((".gitconfig", "home/u/.GitConfig"), (".gitconfig.bak", "gitconfig")),
    "**/.gitattributes": (
        (".gitattributes", "sub/.gitattributes"),
        ("gitattributes", ".gitattributes~"),
    ),
    "**/.gitmodules": ((".gitmodules", "vendor/.gitmodules"), ("gitmodules", ".gitmodules.txt")),
    "**/.config/git/**": (
        (".config/git/config", "u/.config/git/attributes"),
        (".config/gitx/config",),
    ),
    "**/.git/info/attributes": (
        (".git/info/attributes",),
        (".git/info/exclude", "info/attributes"),
    ),
    "**/.git/config.worktree": ((".git/config.worktree",), (".git/config.worktreex",)),
    "**/.git/modules/**": ((".git/modules/lib/config", "a/.git/modules/x"), (".git/modulesx",)),
    ".git/hooks/**": (
        (".git/hooks", ".git/hooks/pre-commit", ".GIT/Hooks/post-merge"),
        (".git/hooksx", ".github/hooks/x", "sub/.git/hooks/pre-commit", ".git/HEAD"),
    ),
    ".git/config": (
        (".git/config", ".Git/CONFIG"),
        (".git/config.bak", "git/config", ".git/configs/x"),
    ),
}


class PatternError(ValueError):
    """A pattern that cannot be used (empty, `..`, empty component)."""


_MAGIC = frozenset("*?[")


def _component_test(part: str) -> Callable[[str], bool]:
    """Whether one (casefolded) path component matches the pattern's
    component `part`: plain equality for a literal, else fnmatch's own
    translation, compiled once."""
    if not _MAGIC & set(part):
        return part.__eq__
    match = re.compile(fnmatch.translate(part)).match
    return lambda name: match(name) is not None


@dataclass(frozen=True)
class PathPattern:
    """One compiled pattern."""

    text: str
    parts: tuple[str, ...]

    @classmethod
    def compile(cls, text: str) -> PathPattern:
        stripped = text.strip().lstrip("/")
        parts = tuple(stripped.split("/")) if stripped else ()
        if not parts or any(part in ("", ".", "..") for part in parts):
            raise PatternError(f"invalid path pattern {text!r}")
        return cls(text, tuple(part.casefold() for part in parts))

    @functools.cached_property
    def _steps(
        self,
    ) -> tuple[tuple[Callable[[str], bool] | None, ...], tuple[frozenset[int], ...]]:
        """Each position's component test (None for `**`), and the positions
        each one reaches by `**` matching no component (itself included)."""
        tests = tuple(None if part == "**" else _component_test(part) for part in self.parts)
        closures: list[frozenset[int]] = [frozenset({len(tests)})]
        for test in reversed(tests):
            here = len(tests) - len(closures)
            closures.append(closures[-1] | {here} if test is None else frozenset({here}))
        return tests, tuple(reversed(closures))

    def matches(self, path: Sequence[str]) -> bool:
        """Whether the path (components relative to the root) or one of its
        ancestors matches."""
        return self.matches_folded([part.casefold() for part in path])

    def matches_folded(self, folded: Sequence[str]) -> bool:
        """`matches`, for components already casefolded. One pass over the
        path, keeping the set of pattern positions reached (a `**` both
        stays and steps on): the pattern matches an ancestor, or the path,
        as soon as its end is reached after a component."""
        tests, closures = self._steps
        end = len(tests)
        states: frozenset[int] | set[int] = closures[0]
        for name in folded:
            reached: set[int] = set()
            for state in states:
                if state == end:
                    continue
                test = tests[state]
                if test is None:
                    reached |= closures[state]
                elif test(name):
                    reached |= closures[state + 1]
            if end in reached:
                return True
            if not reached:
                return False
            states = reached
        return False


def _anywhere(parts: tuple[str, ...]) -> str | None:
    """X of a pattern `**/X` or `**/X/**` (X one component, not `**`)."""
    if (
        parts[0] == "**"
        and len(parts) in (2, 3)
        and parts[1] != "**"
        and parts[2:] in ((), ("**",))
    ):
        return parts[1]
    return None


class _Table:
    """One table of patterns, matched together. A pattern `**/X` or
    `**/X/**` (X one component, not `**`) matches a path exactly when one
    of its components matches X (an ancestor ending in it, or the path): the
    table's such components are one set of literals and one regular
    expression (fnmatch's translations as alternatives), tried on each
    component once; every other pattern runs its own matcher. Most of the
    default tables are of that form (`**/.env`, `**/*.pem`, `**/.ssh/**`)."""

    def __init__(self, patterns: tuple[PathPattern, ...]) -> None:
        self.patterns = patterns
        literals: set[str] = set()
        globs: list[str] = []
        rest: list[PathPattern] = []
        for pattern in patterns:
            name = _anywhere(pattern.parts)
            if name is None:
                rest.append(pattern)
            elif _MAGIC & set(name):
                globs.append(fnmatch.translate(name))
            else:
                literals.add(name)
        self.literals = frozenset(literals)
        self.glob = re.compile("|".join(f"(?:{g})" for g in globs)).match if globs else None
        self.rest = tuple(rest)

    def matches(self, path: Sequence[str]) -> bool:
        folded = [part.casefold() for part in path]
        if not self.literals.isdisjoint(folded):
            return True
        glob = self.glob
        if glob is not None:
            for name in folded:
                if glob(name) is not None:
                    return True
        return any(pattern.matches_folded(folded) for pattern in self.rest)


class PathPolicy:
    """The tenant's protected and secret tables."""

    def __init__(self, protected: Iterable[str], secret: Iterable[str]) -> None:
        self.protected = tuple(PathPattern.compile(p) for p in protected)
        self.secret = tuple(PathPattern.compile(p) for p in secret)
        self._protected = _Table(self.protected)
        self._secret = _Table(self.secret)

    def is_secret(self, path: Sequence[str]) -> bool:
        return self._secret.matches(path)

    def is_protected(self, path: Sequence[str]) -> bool:
        return self._protected.matches(path)


def split(path: str) -> tuple[str, ...]:
    """ "a/b/c" -> ("a", "b", "c"); for the examples and tests."""
    return tuple(part for part in path.split("/") if part)
