"""cgroupfs: reading this host's cgroup mounts and the daemon's place in
them, and the small file operations every cgroup module shares.

    mounts = cgroup_mounts(read(Path("/proc/self/mountinfo")))
    own = own_paths(read(Path("/proc/self/cgroup")))
    directory = within(mount, own[frozenset({"memory"})])

Plain os-level reads and writes (a text-mode open() costs several times the
read itself, and a spawn reads a handful of these files on its way out).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from hostcapd import linux

#: The daemon's subtree when no parent is named (a probe outside a daemon).
SUBTREE = "hostcapd"
_PARENT_PART = re.compile(r"[A-Za-z0-9_.@:-]+")
V2_MOUNT = Path("/sys/fs/cgroup")


class CgroupError(Exception):
    """A cgroup could not be made, limited, killed or removed; says which and why."""


# ---- reading the host --------------------------------------------------------


def _unescape(field_: str) -> str:
    # mountinfo escapes space, tab, newline and backslash as octal.
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field_)


@dataclass(frozen=True)
class Mount:
    root: str
    point: Path
    fstype: str
    options: frozenset[str]


def cgroup_mounts(mountinfo: str) -> list[Mount]:
    mounts = []
    for line in mountinfo.splitlines():
        left, sep, right = line.partition(" - ")
        if not sep:
            continue
        fields, tail = left.split(), right.split()
        if len(fields) < 6 or len(tail) < 3 or tail[0] not in ("cgroup", "cgroup2"):
            continue
        options = frozenset(tail[2].split(",")) | frozenset(fields[5].split(","))
        mounts.append(Mount(_unescape(fields[3]), Path(_unescape(fields[4])), tail[0], options))
    return mounts


def own_paths(proc_cgroup: str) -> dict[frozenset[str], str]:
    """controllers of each hierarchy (frozenset(), for v2) -> this process's path in it."""
    paths = {}
    for line in proc_cgroup.splitlines():
        parts = line.split(":", 2)
        if len(parts) == 3:
            paths[frozenset(c for c in parts[1].split(",") if c)] = parts[2]
    return paths


def within(mount: Mount, path: str) -> Path | None:
    """The directory of cgroup `path` under `mount`, None if the mount does not show it."""
    root = mount.root.rstrip("/")
    if path != root and not path.startswith(root + "/"):
        return None
    rel = path[len(root) :].lstrip("/")
    return mount.point / rel if rel else mount.point


def instance_name(identity: Path) -> str:
    """The subtree name of the daemon whose config is `identity` (its config
    file, or the state dir of a --dev daemon), relative to its own cgroup:
    `hostcapd-<12 hex digits>`. Two daemons on one host never share it, so
    one's start-up sweep never sees the other's spawns; a restart of the
    same daemon finds what its previous instance left (issue 29, item 6)."""
    digest = hashlib.sha256(os.fsencode(identity.resolve())).hexdigest()[:12]
    return f"{SUBTREE}-{digest}"


def subtree_path(own: Path, mount: Path, parent: str) -> Path:
    if not parent:
        return own / SUBTREE
    parts = [p for p in parent.split("/") if p]
    if not parts or any(p in (".", "..") or not _PARENT_PART.fullmatch(p) for p in parts):
        raise CgroupError(f"cgroup parent {parent!r} is not a plain cgroup path")
    base = mount if parent.startswith("/") else own
    return base.joinpath(*parts)


def read(path: str | os.PathLike[str], *, dir_fd: int | None = None) -> str:
    # os-level reads: a text-mode open() costs several times the read itself,
    # and a spawn reads a handful of these files on its way out.
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC, dir_fd=dir_fd)
    try:
        chunks = []
        while chunk := os.read(fd, 65536):
            chunks.append(chunk)
    finally:
        os.close(fd)
    return b"".join(chunks).decode()


def write(path: str | os.PathLike[str], value: str, *, dir_fd: int | None = None) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC, dir_fd=dir_fd)
    try:
        os.write(fd, value.encode())
    finally:
        os.close(fd)


#: (parent, file name) -> whether a new cgroup under that parent has the file
#: (swap accounting is fixed at boot): one stat per daemon, not per spawn.
_HAS_FILE: dict[tuple[str, str], bool] = {}


def has_file(directory: str | os.PathLike[str], name: str) -> bool:
    directory = os.fspath(directory)
    key = (os.path.dirname(directory), name)
    if key not in _HAS_FILE:
        _HAS_FILE[key] = os.path.exists(f"{directory}/{name}")
    return _HAS_FILE[key]


def keyed(path: Path, key: str) -> int:
    """The value of `key` in a flat-keyed cgroup file ("oom_kill 3"), 0 when absent."""
    try:
        text = read(path)
    except FileNotFoundError:
        return 0
    for line in text.splitlines():
        name, _, value = line.partition(" ")
        if name == key:
            return int(value)
    return 0


def procs(directory: Path) -> list[int]:
    try:
        return [int(p) for p in read(directory / "cgroup.procs").split()]
    except FileNotFoundError:
        return []


def has_cgroup_kill(own_dir: Path, root: Path) -> bool:
    """Whether v2 cgroups below `own_dir` offer cgroup.kill (Linux >= 5.14).
    The root cgroup has no cgroup.kill file, so there the kernel release decides."""
    if (own_dir / "cgroup.kill").exists():
        return True
    if own_dir != root:
        return False
    release = re.match(r"(\d+)\.(\d+)", os.uname().release)
    return release is not None and (int(release[1]), int(release[2])) >= (5, 14)


def parent_pid(pid: int) -> int | None:
    """`pid`'s parent, None once it is gone."""
    try:
        return int(read(Path("/proc", str(pid), "stat")).rpartition(")")[2].split()[1])
    except (OSError, ValueError, IndexError):
        return None


def cmdline(pid: int) -> bytes:
    """`pid`'s command line (b"" once it is gone)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read()
    except OSError:
        return b""


def descendants(pid: int) -> set[int]:
    """`pid` and every process below it (by /proc's parent links)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = read(Path("/proc", entry, "stat"))
        except OSError:
            continue
        ppid = int(stat.rpartition(")")[2].split()[1])
        children.setdefault(ppid, []).append(int(entry))
    found, todo = set(), [pid]
    while todo:
        current = todo.pop()
        found.add(current)
        todo.extend(children.get(current, ()))
    return found


def read_int(path: Path) -> int | None:
    try:
        return int(read(path))
    except (FileNotFoundError, ValueError):
        return None


def tree(directory: Path) -> Iterator[Path]:
    """`directory` and the cgroups nested in it, parents first."""
    if not directory.is_dir():
        return
    yield directory
    try:
        entries = list(os.scandir(directory))
    except FileNotFoundError:
        return
    for entry in entries:
        if entry.is_dir(follow_symlinks=False):
            yield from tree(Path(entry.path))


@contextlib.contextmanager
def frozen(freezer: Path) -> Iterator[None]:
    write(freezer / "freezer.state", "FROZEN")
    try:
        yield
    finally:
        write(freezer / "freezer.state", "THAWED")


_MS_REMOUNT = 32


def favor_dynamic_modifications() -> str | None:
    """Remount the cgroup2 hierarchy with `favordynmods`, unless it has it.

    Moving a process into a cgroup takes the global threadgroup rwsem for
    writing; unless a hierarchy favours dynamic modifications, that waits for
    an RCU grace period whenever no migration happened recently: about 10-15
    ms for a spawn after an idle moment, against 0.3 ms back to back (measured
    here). `favordynmods` keeps the fast path at the cost of slightly dearer
    fork and exit. Returns what was done, or None when nothing was needed.
    Raises CgroupError if the remount is refused."""
    try:
        mounts = cgroup_mounts(read(Path("/proc/self/mountinfo")))
    except OSError as error:
        raise CgroupError(f"cannot read mountinfo: {error.strerror}") from None
    v2 = [m for m in mounts if m.fstype == "cgroup2"]
    if not v2 or any("favordynmods" in m.options for m in v2):
        return None
    target = v2[0].point
    try:
        linux.mount(None, bytes(target), None, _MS_REMOUNT, b"favordynmods")
    except OSError as error:
        raise CgroupError(f"cannot remount {target} with favordynmods: {error.strerror}") from None
    return f"remounted {target} with favordynmods (cheap cgroup migration for every spawn)"
