"""Namespaces: clone flags and the mounts the child makes in its own mount
namespace (a new root of only what the tenant may see, a fresh /proc, a
private /tmp and /dev/shm, everything read-only but the writable roots)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from hostcapd.childsetup import Mount

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

(
    MOUNT_CALL,
    MOUNT_KEEP,
    MOUNT_RESTORE,
    MOUNT_SETATTR,
    MOUNT_SETATTR_TREE,
    MOUNT_SYMLINK,
    MOUNT_MKDIR,
    MOUNT_PIVOT,
) = range(8)
MOUNT_ATTR_RDONLY = 0x1
MOUNT_ATTR_NOSUID = 0x2
MOUNT_ATTR_NODEV = 0x4
#: Trees the C set-up can keep aside at once.
MAX_KEPT = 32
TMP = Path("/tmp")
#: Where the new root is assembled before pivot_root (hidden afterwards).
STAGE = TMP


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
    #: Every mount step of a spawn in its own new mount namespace.
    mounts: tuple[Mount, ...]
    hostname: bytes | None
    #: Bring up lo in the new network namespace (127.0.0.1 works inside).
    loopback_up: bool
    #: The trailing steps of `mounts` a spawn makes itself when it joins a
    #: mount namespace made ahead of need by the others (its fresh /proc).
    join_mounts: tuple[Mount, ...] = ()

    @property
    def pooled_mounts(self) -> tuple[Mount, ...]:
        """The steps that can run before the spawn, in a namespace of their own."""
        return self.mounts[: len(self.mounts) - len(self.join_mounts)]


def beneath_tmp(path: Path) -> bool:
    return path != TMP and TMP in path.parents


def _staged(path: Path) -> bytes:
    return bytes(STAGE) + bytes(path)


def _mounts(
    fresh_proc: bool,
    tmp_size_bytes: int,
    system_dirs: tuple[Path, ...],
    roots: tuple[Path, ...],
    writable: tuple[Path, ...],
) -> list[Mount]:
    """The child's mounts: a new root holding only what the tenant may see.

    1. private propagation: nothing the child mounts reaches the host;
    2. the trees to show (system dirs, /dev, the tenant roots; the host's
       /proc without a pid namespace) are cloned aside;
    3. a tmpfs is assembled into the new root from them (a system dir that is
       a symlink on the host, /bin on merged-/usr, is a symlink again), and
       pivot_root makes it `/`: no other host path (sockets in /run or /var,
       homes, other tenants' roots) is reachable, or even statable;
    4. a fresh /proc (with a pid namespace), a private tmpfs /tmp holding the
       roots that live beneath /tmp, a private /dev/shm;
    5. every mount read-only, nosuid and nodev (landlock does not cover chmod,
       utime or xattrs; a read-only mount does), then devices again on /dev,
       and write access for the read-write roots, /tmp, /dev/shm and /proc.
    """
    shown: list[Path] = []
    links: list[tuple[Path, bytes]] = []
    for d in system_dirs:
        if d.is_symlink():
            links.append((d, os.fsencode(os.readlink(d))))
        elif d.is_dir():
            shown.append(d)
    shown.append(Path("/dev"))
    if not fresh_proc:
        shown.append(Path("/proc"))
    late = [r for r in roots if beneath_tmp(r)]
    shown += [r for r in roots if r not in late]
    if len(shown) + len(late) > MAX_KEPT:
        raise ValueError(f"at most {MAX_KEPT} system dirs and roots can be shown to a spawn")

    m: list[Mount] = [(MOUNT_CALL, None, b"/", None, MS_REC | MS_PRIVATE, None, 0)]
    slots = {path: slot for slot, path in enumerate([*shown, *late])}
    for path, slot in slots.items():
        m.append((MOUNT_KEEP, bytes(path), None, None, slot, None, 0))
    m.append(
        (
            MOUNT_CALL,
            b"tmpfs",
            bytes(STAGE),
            b"tmpfs",
            MS_NOSUID | MS_NODEV,
            b"mode=0755,size=1m",
            0,
        )
    )
    for path in shown:
        m.append((MOUNT_RESTORE, None, _staged(path), None, slots[path], None, 0))
    for path, target in links:
        m.append((MOUNT_SYMLINK, target, _staged(path), None, 0, None, 0))
    for path in (Path("/proc"), TMP):
        m.append((MOUNT_MKDIR, None, _staged(path), None, 0, None, 0))
    m.append((MOUNT_PIVOT, None, bytes(STAGE), None, 0, None, 0))

    tmpfs_flags = MS_NOSUID | MS_NODEV
    m.append(
        (
            MOUNT_CALL,
            b"tmpfs",
            bytes(TMP),
            b"tmpfs",
            tmpfs_flags,
            f"size={tmp_size_bytes},mode=1777".encode(),
            0,
        )
    )
    for path in late:
        m.append((MOUNT_RESTORE, None, bytes(path), None, slots[path], None, 0))
    shm = Path("/dev/shm")
    m.append(
        (
            MOUNT_CALL,
            b"tmpfs",
            bytes(shm),
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
    # The host's /proc stays writable: the set-up writes oom_score_adj and
    # loginuid there (a fresh /proc, below, is mounted writable).
    for path in (*writable, TMP, shm, *(() if fresh_proc else (Path("/proc"),))):
        m.append((MOUNT_SETATTR, None, bytes(path), None, 0, None, MOUNT_ATTR_RDONLY))
    if fresh_proc:
        # Last: a /proc that shows only the sandbox's own processes must be
        # mounted from inside its pid namespace, by the spawn itself (all the
        # steps above can be made ahead of need: see `NamespacePlan.join_mounts`).
        m.append(
            (MOUNT_CALL, b"proc", b"/proc", b"proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, None, 0)
        )
    return m


def _at_or_beneath(path: bytes | None, top: bytes | None) -> bool:
    if path is None or top is None:
        return False
    return path == top or top == b"/" or path.startswith(top.rstrip(b"/") + b"/")


def template_split(pooled: Sequence[Mount]) -> tuple[list[Mount], list[Mount]] | None:
    """The pooled steps of a spawn's own namespace (`NamespacePlan.pooled_mounts`,
    from `_mounts`) as (template, copy): the template's steps build, once
    per profile, the new root of host trees (everything up to `pivot_root`,
    and the read-only locks on it); a copy of that namespace (setns into it,
    unshare: `childsetup.mount_namespace(copy, base_fd=template)`) then takes
    the copy's steps, everything mounted after the pivot, fresh for each
    spawn (its /tmp with the roots beneath it, its /dev/shm) and the locks
    on those. Copy and built namespace have the same mounts with the same
    flags, all private (the test compares their mount tables). The trees of
    roots beneath /tmp are cloned in the host's view before the copy is
    entered (the copy's keep steps run first), so the copy makes them
    private again (a clone of a host mount that is shared would be its
    peer). None if `pooled` is not of that shape (it is then built whole
    for each spawn, as before)."""
    kinds = [step[0] for step in pooled]
    if kinds.count(MOUNT_PIVOT) != 1:
        return None
    pivot = kinds.index(MOUNT_PIVOT)
    late = {step[4] for step in pooled[pivot + 1 :] if step[0] == MOUNT_RESTORE}
    template: list[Mount] = []
    copy: list[Mount] = []
    for step in pooled[: pivot + 1]:
        (copy if step[0] == MOUNT_KEEP and step[4] in late else template).append(step)
    fresh: list[bytes] = []  # where the copy mounts
    for step in pooled[pivot + 1 :]:
        kind, source, target = step[0], step[1], step[2]
        if target is None:
            return None
        if kind == MOUNT_RESTORE or (kind == MOUNT_CALL and source is not None):
            copy.append(step)
            fresh.append(target)
            if kind == MOUNT_RESTORE:  # a tree cloned in the host's view
                copy.append((MOUNT_CALL, None, target, None, MS_REC | MS_PRIVATE, None, 0))
        elif kind in (MOUNT_SETATTR, MOUNT_SETATTR_TREE):
            if any(_at_or_beneath(target, f) for f in fresh):
                copy.append(step)
                continue
            template.append(step)
            if kind == MOUNT_SETATTR_TREE:  # what it did to the copy's own mounts
                tops = [f for f in fresh if not any(f != g and _at_or_beneath(f, g) for g in fresh)]
                copy += [
                    (kind, None, f, None, step[4], None, step[6])
                    for f in tops
                    if _at_or_beneath(f, target)
                ]
        else:
            return None  # a step on the new root after its pivot: not of this shape
    return template, copy


def plan(
    applied: set[str],
    tmp_size_bytes: int,
    hostname: str,
    roots: tuple[tuple[Path, bool], ...] = (),
    system_dirs: tuple[Path, ...] = (),
) -> NamespacePlan:
    """The clone flags and, with a mount namespace, the child's mounts (see
    `_mounts`). `roots` are (path, writable) pairs."""
    flags = 0
    for name, (flag, _) in NAMESPACES.items():
        if name in applied:
            flags |= flag
    mounts: list[Mount] = []
    if "mount_namespace" in applied:
        mounts = _mounts(
            "pid_namespace" in applied,
            tmp_size_bytes,
            system_dirs,
            tuple(r for r, _ in roots),
            tuple(r for r, w in roots if w),
        )
    fresh_proc = bool(mounts) and "pid_namespace" in applied
    return NamespacePlan(
        clone_flags=flags,
        mounts=tuple(mounts),
        hostname=hostname.encode() if "uts_namespace" in applied else None,
        loopback_up="net_namespace" in applied,
        join_mounts=tuple(mounts[-1:]) if fresh_proc else (),
    )
