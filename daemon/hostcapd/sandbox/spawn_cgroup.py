"""One spawn's cgroup: a directory in each hierarchy the daemon uses, owned by
that spawn (`hostcapd.sandbox.cgroups.CgroupHost.create` makes it, relative
to its tenant directories' fds: `ParentDirs`).

    fds = cg.procs_fds()       # the child writes "0" into each, then the caller closes them
    cg.kill(); stats = cg.stats(); cg.remove()

A tenant's own cgroup and its front-end's are the same kind of object (their
directories, their limits), never killed or removed but by a sweep.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path

from hostcapd.sandbox.cgroupfs import (
    CgroupError,
    frozen,
    procs,
    read,
    tree,
    write,
)

KILL_TIMEOUT = 2.0
REMOVE_TIMEOUT = 1.0


@dataclass(frozen=True)
class CgroupStats:
    peak_memory_bytes: int | None
    oom_kills: int
    #: Forks the pids controller refused.
    pids_refused: int


@dataclass(frozen=True)
class Hierarchy:
    """One mounted hierarchy the daemon uses and the roles it plays."""

    version: int
    #: What this hierarchy is used for: "memory", "pids", "cpu", "freezer", "kill".
    roles: tuple[str, ...]
    mount: Path
    #: The daemon's own cgroup in it.
    own: Path
    #: Where spawn cgroups go.
    subtree: Path


# ---- one spawn's cgroup ------------------------------------------------------


class ParentDirs:
    """O_PATH fds of the directories a host view makes its spawn cgroups in,
    one per hierarchy. A spawn's cgroup is made, its files opened and it is
    removed relative to them: a path of one or two components, where the
    absolute one under /sys/fs/cgroup is nine or ten, each looked up in
    kernfs (about a tenth of a cgroup's life in the root: bench/README.md,
    "the root's CPU per spawn, third pass"). Held by the view and by every
    cgroup made through it; closed once the last of them is gone, so an fd
    number is never used after its close."""

    __slots__ = ("fds",)

    def __init__(self, directories: tuple[str, ...]) -> None:
        fds: list[int] = []
        try:
            for directory in directories:
                fds.append(os.open(directory, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC))
        except OSError:
            for fd in fds:
                os.close(fd)
            raise
        self.fds = tuple(fds)

    def __del__(self) -> None:
        for fd in self.fds:
            with contextlib.suppress(OSError):
                os.close(fd)
        self.fds = ()


class SpawnCgroup:
    """The cgroup of one spawn, one directory per hierarchy; owned by that spawn.

    Its paths are kept as strings: a spawn's cgroup is made, joined, read
    and removed on the spawn's path, where building pathlib objects for
    each file cost more than the file operations' Python (bench/README.md,
    "The root's CPU per spawn")."""

    def __init__(
        self,
        name: str,
        members: tuple[tuple[Hierarchy, Path | str], ...],
        parents: ParentDirs | None = None,
    ) -> None:
        self.name = name
        self._hierarchies = tuple(h for h, _ in members)
        #: Every directory, in the order the child joins them.
        self.paths = tuple(os.fspath(directory) for _, directory in members)
        #: Each directory as (its parent's fd, its name) when made through a
        #: view's `ParentDirs` (kept alive with it), else (None, its path).
        self._parents = parents
        self.at: tuple[tuple[int | None, str], ...] = (
            tuple(
                (fd, os.path.basename(path))
                for fd, path in zip(parents.fds, self.paths, strict=True)
            )
            if parents is not None
            else tuple((None, path) for path in self.paths)
        )
        #: The files `stats` reads, opened ahead of need (`open_stats`), and
        #: those `recycle` reads, opened at its first.
        self._stat_fds: dict[str, int] = {}
        #: Each cgroup.procs, for writing: `procs_fds` gives dups of them.
        self._procs_fds: list[int] = []
        #: Its memory and pids limits as written (None: unlimited), so a
        #: limit is written only when it changes (`CgroupHost.set_limits`);
        #: `reusable` goes False when a write failed (its state is unknown).
        self.limits: tuple[int | None, int | None] = (None, None)
        self.reusable = True
        #: Spawns it served before the current one (`recycle`).
        self.uses = 0
        #: What its counters read when it was last recycled, subtracted by
        #: `stats` so each spawn's figures are its own: (OOM kills, refused forks).
        self._base = (0, 0)
        #: The counters as `stats` read them once the spawn's every process
        #: was gone (`stats(final=True)`): `recycle` takes them as the next
        #: base, not reading them again (nothing is left to change them).
        self._final: tuple[int, int] | None = None

    @functools.cached_property
    def directories(self) -> tuple[Path, ...]:
        """Every directory, in the order the child joins them."""
        return tuple(Path(directory) for directory in self.paths)

    @property
    def _members(self) -> tuple[tuple[Hierarchy, Path], ...]:
        return tuple(zip(self._hierarchies, self.directories, strict=True))

    def _role(self, role: str) -> tuple[int, str] | None:
        """(cgroup version, directory) of the hierarchy playing `role`."""
        for h, directory in zip(self._hierarchies, self.paths, strict=True):
            if role in h.roles:
                return h.version, directory
        return None

    def role_at(self, role: str) -> tuple[int, int | None, str, str] | None:
        """(cgroup version, dir fd, directory relative to it, absolute
        directory) of the hierarchy playing `role`: its files are opened
        with `dir_fd` (see `ParentDirs`)."""
        for h, (fd, relative), directory in zip(
            self._hierarchies, self.at, self.paths, strict=True
        ):
            if role in h.roles:
                return h.version, fd, relative, directory
        return None

    def procs_fds(self) -> list[int]:
        """O_WRONLY|O_CLOEXEC fds of each cgroup.procs, for the child to write "0"
        into; the caller closes them once the child is placed. Each a dup of
        one this cgroup keeps open from its first spawn (closed by `remove`):
        a recycled cgroup's next spawn opens none (the kernel checks a write
        against the credentials it was opened with: the root's, either way)."""
        dups: list[int] = []
        try:
            for fd in self.lent_procs_fds():
                dups.append(os.dup(fd))
        except OSError as error:
            for fd in dups:
                os.close(fd)
            raise CgroupError(f"cgroup {self.name}: {error.strerror}") from None
        return dups

    def lent_procs_fds(self) -> list[int]:
        """The fds `procs_fds` dups, lent: still this cgroup's (the caller
        never closes them), valid until `remove`, so only for a use that
        ends before anything else runs (an order sent at once: sendmsg
        takes its own references)."""
        if not self._procs_fds:
            fds: list[int] = []
            try:
                for dir_fd, directory in self.at:
                    fds.append(
                        os.open(
                            f"{directory}/cgroup.procs", os.O_WRONLY | os.O_CLOEXEC, dir_fd=dir_fd
                        )
                    )
            except OSError as error:
                for fd in fds:
                    os.close(fd)
                raise CgroupError(
                    f"cgroup {self.name}: cannot open cgroup.procs: {error.strerror}"
                ) from None
            self._procs_fds = fds
        return list(self._procs_fds)

    def place(self, pid: int) -> None:
        """Move process `pid` (its every thread) into this cgroup in every
        hierarchy; raises OSError if the kernel refuses."""
        for directory in self.paths:
            write(f"{directory}/cgroup.procs", str(pid))

    def pids(self) -> list[int]:
        """Every process in the spawn's cgroup, in any of its hierarchies."""
        members: set[int] = set()
        for directory in self.directories:
            for sub in tree(directory):
                members.update(procs(sub))
        return sorted(members)

    def kill(self, timeout: float = KILL_TIMEOUT, *, wait: bool = True) -> None:
        """SIGKILL every process in the cgroup; with `wait`, return once none is left.

        v2 / unified: cgroup.kill (the kernel kills atomically, racing forks
        included; without `wait` it is written at once, no walk first). v1:
        freeze (so nothing forks meanwhile) where the freezer is mounted,
        SIGKILL each member, thaw; repeated until empty. Raises
        CgroupError if processes are still there after `timeout` seconds. A
        cgroup already removed has nothing to kill.
        """
        if not wait:
            kill_at = self.role_at("kill")
            if kill_at is not None:
                # The kernel finds the members itself: no walk before the kill.
                with contextlib.suppress(FileNotFoundError):  # removed: nothing left
                    write(f"{kill_at[2]}/cgroup.kill", "1", dir_fd=kill_at[1])
                return
        deadline = time.monotonic() + timeout
        pause = 0.0002
        while True:
            members = self.pids()
            if not members:
                return
            if time.monotonic() > deadline:
                raise CgroupError(f"cgroup {self.name}: processes {members[:8]} survived SIGKILL")
            self._kill_round(members)
            if not wait:
                return
            # Killed members stay listed until they have exited; a round again
            # covers a fork that raced the previous one.
            time.sleep(pause)
            pause = min(pause * 2, 0.01)

    def _kill_round(self, members: list[int]) -> None:
        kill_role, freezer_role = self._role("kill"), self._role("freezer")
        try:
            if kill_role is not None:
                write(f"{kill_role[1]}/cgroup.kill", "1")
            elif freezer_role is not None:
                with frozen(Path(freezer_role[1])):
                    self._signal_members(members)
            else:
                self._signal_members(members)
        except FileNotFoundError:
            pass  # removed meanwhile: its members are gone

    def _signal_members(self, members: list[int]) -> None:
        # pidfds first, membership checked after: a pid that exited and was
        # reused by a process outside the cgroup is never signalled.
        pidfds: dict[int, int] = {}
        try:
            for pid in members:
                with contextlib.suppress(ProcessLookupError):
                    pidfds[pid] = os.pidfd_open(pid)
            still = set(self.pids())
            for pid, pidfd in pidfds.items():
                if pid in still:
                    with contextlib.suppress(ProcessLookupError):
                        signal.pidfd_send_signal(pidfd, signal.SIGKILL)
        finally:
            for pidfd in pidfds.values():
                os.close(pidfd)

    @functools.cached_property
    def _stat_files(self) -> dict[str, tuple[int | None, str]]:
        """Each file `stats` reads: (dir fd, path relative to it)."""
        files: dict[str, tuple[int | None, str]] = {}
        memory = self.role_at("memory")
        if memory is not None:
            version, fd, memory_dir, _ = memory
            peak = "memory.peak" if version == 2 else "memory.max_usage_in_bytes"
            files["peak"] = (fd, f"{memory_dir}/{peak}")
            oom = "memory.events" if version == 2 else "memory.oom_control"
            files["oom"] = (fd, f"{memory_dir}/{oom}")
        pids = self.role_at("pids")
        if pids is not None:
            files["pids"] = (pids[1], f"{pids[2]}/pids.events")
        return files

    def open_stats(self) -> None:
        """Open the files `stats` reads now, ahead of need (a cgroup made
        before its spawn): at the spawn's end each is then one pread, not an
        open, a read and a close on its answer's path. Closed by `remove`.
        The peak's is opened for writing too: `recycle` resets it through it
        (on cgroup v2 a reset holds for reads through that fd alone)."""
        for name, (dir_fd, path) in self._stat_files.items():
            if name not in self._stat_fds:
                with contextlib.suppress(OSError):  # stats opens it then
                    self._stat_fds[name] = _open_stat(name, path, dir_fd)

    def _close_stats(self) -> None:
        fds, self._stat_fds = self._stat_fds, {}
        procs, self._procs_fds = self._procs_fds, []
        for fd in [*fds.values(), *procs]:
            os.close(fd)

    @functools.cached_property
    def _recycle_files(self) -> dict[str, tuple[int | None, str]]:
        """The files `recycle` reads: per hierarchy what says it is empty
        (v2: cgroup.events, whose `populated` counts nested cgroups too; v1
        pids: pids.current, which counts every task of it, exited but not yet
        reaped ones too; a v1 memory or freezer hierarchy has no such count:
        a process is in each of a spawn's hierarchies or none, placed by the
        daemon, and nothing of the sandbox can write to a cgroup file), and
        the memory still charged."""
        files: dict[str, tuple[int | None, str]] = {}
        for index, (h, (dir_fd, directory)) in enumerate(
            zip(self._hierarchies, self.at, strict=True)
        ):
            if h.version == 2:
                files[f"populated {index}"] = (dir_fd, f"{directory}/cgroup.events")
            elif "pids" in h.roles:
                files[f"tasks {index}"] = (dir_fd, f"{directory}/pids.current")
        memory = self.role_at("memory")
        if memory is not None:
            version, dir_fd, directory, _ = memory
            usage = "memory.current" if version == 2 else "memory.usage_in_bytes"
            files["usage"] = (dir_fd, f"{directory}/{usage}")
        return files

    def _read_kept(self, name: str, where: tuple[int | None, str]) -> str:
        """A file of `_recycle_files`, read through an fd kept open (cgroup
        files show their state anew at each read from offset 0)."""
        fd = self._stat_fds.get(name)
        if fd is None:
            fd = self._stat_fds[name] = os.open(
                where[1], os.O_RDONLY | os.O_CLOEXEC, dir_fd=where[0]
            )
        return os.pread(fd, 4096, 0).decode()

    def _stat(self, name: str, where: tuple[int | None, str]) -> str | None:
        """A stat file's text (None if it does not exist)."""
        fd = self._stat_fds.get(name)
        try:
            return (
                os.pread(fd, 65536, 0).decode()
                if fd is not None
                else read(where[1], dir_fd=where[0])
            )
        except FileNotFoundError:
            return None

    def stats(self, *, final: bool = False) -> CgroupStats:
        """Peak memory, OOM kills and refused forks of its current spawn
        (read them after the spawn ends). In a recycled cgroup the counters
        are less what they read when it was recycled, and the peak is the
        kernel's since its reset then (`recycle`). `final`: the caller knows
        no process of the spawn is left (its pid namespace's init reaped, or
        a kill that waited until the cgroup was empty), so these counters
        can no longer change: `recycle` takes them as the next base."""
        files = self._stat_files
        peak: int | None = None
        oom = refused = 0
        base_oom, base_refused = self._base
        self._final = None
        if "peak" in files:
            try:
                peak = int(self._stat("peak", files["peak"]) or "")
            except ValueError:
                peak = None
            oom = _keyed(self._stat("oom", files["oom"]), "oom_kill")
        if "pids" in files:
            refused = _keyed(self._stat("pids", files["pids"]), "max")
        if final:
            self._final = (oom, refused)
        return CgroupStats(
            peak,
            oom - base_oom if "peak" in files else 0,
            refused - base_refused if "pids" in files else 0,
        )

    def recycle(self, leftover_max: int) -> bool:
        """Make this cgroup, its spawn ended, ready for another spawn of the
        same runtime (process/cgroup_pool.py), or say it cannot be (False:
        remove it). Fails closed: only when no process is left in any of its
        hierarchies, its memory still charged (page cache and kernel objects
        its spawn left, the charge batches the kernel keeps per CPU) is at
        most `leftover_max` bytes, and every figure `stats` gives can be made
        the next spawn's own: the memory peak reset (v1: a write to
        max_usage_in_bytes; v2: a write to memory.peak, per open fd, Linux
        >= 6.12) to the current usage, that leftover (which the kernel also
        counts against the next spawn's limit), the OOM kills and the
        refused forks read now as the next spawn's base. Its limits stay as
        they are until the next spawn sets its own."""
        final, self._final = self._final, None
        if not self.reusable or self._parents is None:
            return False
        files = self._stat_files
        try:
            for name, where in self._recycle_files.items():
                text = self._read_kept(name, where)
                if name.startswith("populated"):
                    if _keyed(text, "populated") != 0:
                        return False
                elif int(text) > (leftover_max if name == "usage" else 0):
                    return False
            if "peak" in files:
                self.open_stats()  # (one made on its spawn's path has none open yet)
                fd = self._stat_fds.get("peak")
                if fd is None:
                    return False  # no fd to reset it through (and to read it by)
                os.pwrite(fd, b"0", 0)
            if final is not None:  # read by `stats` once nothing was left to change them
                base_oom, base_refused = final
            else:
                base_oom = (
                    _keyed(self._stat("oom", files["oom"]), "oom_kill") if "oom" in files else 0
                )
                base_refused = (
                    _keyed(self._stat("pids", files["pids"]), "max") if "pids" in files else 0
                )
        except (OSError, ValueError):
            return False
        self._base = (base_oom, base_refused)
        self.uses += 1
        return True

    def remove(self, timeout: float = REMOVE_TIMEOUT) -> None:
        """Remove every directory of the cgroup (nested ones first), retrying
        briefly while the kernel finishes with exited members. Raises CgroupError
        naming what is left if it cannot; idempotent."""
        self._close_stats()
        # The common case: no nested cgroups, nothing left inside.
        try:
            for dir_fd, path in self.at:
                with contextlib.suppress(FileNotFoundError):
                    os.rmdir(path, dir_fd=dir_fd)
            return
        except OSError:
            pass
        deadline = time.monotonic() + timeout
        pause = 0.0002
        left: list[Path] = []
        while True:
            left = []
            for directory in self.directories:
                for sub in reversed(list(tree(directory))):
                    try:
                        os.rmdir(sub)
                    except FileNotFoundError:
                        pass
                    except OSError as error:
                        if error.errno != errno.EBUSY:
                            raise CgroupError(
                                f"cgroup {self.name}: cannot remove {sub}: {error.strerror}"
                            ) from None
                        left.append(sub)
            if not left:
                return
            if time.monotonic() > deadline:
                raise CgroupError(f"cgroup {self.name}: still busy after {timeout} s: {left}")
            time.sleep(pause)
            pause = min(pause * 2, 0.01)


def _open_stat(name: str, path: str, dir_fd: int | None) -> int:
    """A stat file's fd: the peak's read-write where it can be reset (v1;
    v2 on Linux >= 6.12), else read-only, as every other."""
    if name == "peak":
        with contextlib.suppress(OSError):
            return os.open(path, os.O_RDWR | os.O_CLOEXEC, dir_fd=dir_fd)
    return os.open(path, os.O_RDONLY | os.O_CLOEXEC, dir_fd=dir_fd)


def _keyed(text: str | None, key: str) -> int:
    """The value of `key` in a flat-keyed cgroup file's text ("oom_kill 3"), 0 when absent."""
    for line in (text or "").splitlines():
        name, _, value = line.partition(" ")
        if name == key:
            return int(value)
    return 0
