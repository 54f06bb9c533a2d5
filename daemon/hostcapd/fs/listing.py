"""Listing a directory beneath the roots (`FsOperations.list_directory`):
bounded in entries and in names read, each entry checked as a read is."""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from hostcapd import linux
from hostcapd.errors import Refusal
from hostcapd.fs.beneath import Beneath, type_name, wire_name
from hostcapd.fs.scope import _normalise

#: A listing reads at most this many names per entry it may return (plus a
#: floor), so a huge tree cannot keep the worker busy for minutes.
LIST_SCAN_FACTOR = 10
LIST_SCAN_FLOOR = 10_000


@dataclass
class _ListBudget:
    max_entries: int
    scan_limit: int
    scanned: int = 0
    exhausted: bool = False


class Listing(Beneath):
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
            "path": wire_name(self.scope.display(root, rel)),
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
            "name": wire_name("/".join((*prefix, name))),
            "type": type_name(st.st_mode),
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
            return wire_name(text)
        os.close(fd)
        return wire_name(text)
