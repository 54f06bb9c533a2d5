"""Namespaces: clone flags and the mounts the child makes in its own mount
namespace (private propagation, a fresh /proc, a private tmpfs /tmp)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

CLONE_NEWNS = 0x00020000
CLONE_NEWUTS = 0x04000000
CLONE_NEWIPC = 0x08000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000

MS_NOSUID = 2
MS_NODEV = 4
MS_NOEXEC = 8
MS_REC = 1 << 14
MS_PRIVATE = 1 << 18

#: protection name -> (clone flag, /proc/self/ns entry)
NAMESPACES: dict[str, tuple[int, str]] = {
    "pid_namespace": (CLONE_NEWPID, "pid"),
    "net_namespace": (CLONE_NEWNET, "net"),
    "ipc_namespace": (CLONE_NEWIPC, "ipc"),
    "uts_namespace": (CLONE_NEWUTS, "uts"),
    "mount_namespace": (CLONE_NEWNS, "mnt"),
}

#: (kind, source, target, fstype, flags, data, clear), as the C set-up takes them.
Mount = tuple[int, bytes | None, bytes | None, bytes | None, int, bytes | None, int]
MOUNT_CALL, MOUNT_KEEP, MOUNT_RESTORE, MOUNT_SETATTR, MOUNT_SETATTR_TREE = 0, 1, 2, 3, 4
MS_BIND = 4096
MOUNT_ATTR_RDONLY = 0x1
MOUNT_ATTR_NOSUID = 0x2
MOUNT_ATTR_NODEV = 0x4
#: Directories each spawn gets as an empty private tmpfs, hiding the host's:
#: /run holds the host's named sockets (D-Bus, journald, ...), which landlock
#: does not cover; /dev/shm is shared memory.
PRIVATE_DIRS = (Path("/run"), Path("/dev/shm"))
#: Trees the C can keep aside while /tmp is replaced.
MAX_KEPT = 8


def probe(name: str, is_root: bool) -> tuple[bool, str]:
    """Whether this host can give a child the namespace `name`."""
    _, entry = NAMESPACES[name]
    if not os.path.exists(f"/proc/self/ns/{entry}"):
        return False, f"kernel has no {entry} namespaces"
    if not is_root:
        return False, "daemon is not root (CAP_SYS_ADMIN needed)"
    return True, ""


@dataclass(frozen=True)
class NamespacePlan:
    clone_flags: int
    mounts: tuple[Mount, ...]
    hostname: bytes | None
    #: Bring up lo in the new network namespace (127.0.0.1 works inside).
    loopback_up: bool


def beneath_tmp(path: Path) -> bool:
    return path != TMP and TMP in path.parents


TMP = Path("/tmp")


def _mounts(
    fresh_proc: bool, tmp_size_bytes: int, roots: tuple[Path, ...], writable: tuple[Path, ...]
) -> list[Mount]:
    """The child's mounts, in order:

    1. private propagation: nothing the child mounts reaches the host;
    2. each tenant root bound onto itself, so it is a mount of its own (roots
       beneath /tmp are cloned aside, to be attached again inside the new /tmp);
    3. a fresh /proc showing only the sandbox's processes (with a pid namespace);
    4. a private tmpfs /tmp, and empty private /run and /dev/shm;
    5. the whole tree read-only, nosuid and nodev (landlock does not cover
       chmod, utime or xattrs; a read-only mount does), then devices again
       on /dev, and write access for the read-write roots, /tmp, /dev/shm
       and /proc.
    """
    m: list[Mount] = [(MOUNT_CALL, None, b"/", None, MS_REC | MS_PRIVATE, None, 0)]
    kept = [r for r in roots if beneath_tmp(r)]
    if len(kept) > MAX_KEPT:
        raise ValueError(f"at most {MAX_KEPT} tenant roots may lie beneath /tmp")
    for root in roots:
        if root not in kept:
            m.append((MOUNT_CALL, bytes(root), bytes(root), None, MS_BIND | MS_REC, None, 0))
    for slot, root in enumerate(kept):
        m.append((MOUNT_KEEP, bytes(root), None, None, slot, None, 0))
    if fresh_proc:
        m.append(
            (MOUNT_CALL, b"proc", b"/proc", b"proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, None, 0)
        )
    tmpfs_flags = MS_NOSUID | MS_NODEV
    m.append(
        (
            MOUNT_CALL,
            b"tmpfs",
            b"/tmp",
            b"tmpfs",
            tmpfs_flags,
            f"size={tmp_size_bytes},mode=1777".encode(),
            0,
        )
    )
    for slot, root in enumerate(kept):
        m.append((MOUNT_RESTORE, None, bytes(root), None, slot, None, 0))
    private = [d for d in PRIVATE_DIRS if d.is_dir()]
    for d in private:
        m.append(
            (
                MOUNT_CALL,
                b"tmpfs",
                bytes(d),
                b"tmpfs",
                tmpfs_flags | MS_NOEXEC,
                b"size=16m,mode=1777",
                0,
            )
        )
    locked = MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV
    m.append((MOUNT_SETATTR_TREE, None, b"/", None, locked, None, 0))
    # Device nodes stay usable where they live (landlock decides which).
    m.append((MOUNT_SETATTR, None, b"/dev", None, 0, None, MOUNT_ATTR_NODEV))
    # /proc stays writable (the set-up writes oom_score_adj and loginuid there),
    # whether it is the child's own or, without a pid namespace, the host's.
    rw = [*writable, Path("/tmp"), *private, Path("/proc")]
    for path in rw:
        m.append((MOUNT_SETATTR, None, bytes(path), None, 0, None, MOUNT_ATTR_RDONLY))
    return m


def plan(
    applied: set[str],
    tmp_size_bytes: int,
    hostname: str,
    roots: tuple[tuple[Path, bool], ...] = (),
) -> NamespacePlan:
    """The clone flags and, with a mount namespace, the child's mounts (see
    `_mounts`). `roots` are (path, writable) pairs."""
    writable = tuple(r for r, w in roots if w)
    flags = 0
    for name, (flag, _) in NAMESPACES.items():
        if name in applied:
            flags |= flag
    mounts: list[Mount] = []
    if "mount_namespace" in applied:
        mounts = _mounts(
            "pid_namespace" in applied, tmp_size_bytes, tuple(r for r, _ in roots), writable
        )
    return NamespacePlan(
        clone_flags=flags,
        mounts=tuple(mounts),
        hostname=hostname.encode() if "uts_namespace" in applied else None,
        loopback_up="net_namespace" in applied,
    )
