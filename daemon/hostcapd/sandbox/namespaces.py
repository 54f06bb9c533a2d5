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

#: (kind, source, target, fstype, flags, data), as the C set-up takes them.
Mount = tuple[int, bytes | None, bytes | None, bytes | None, int, bytes | None]
MOUNT_CALL, MOUNT_KEEP, MOUNT_RESTORE = 0, 1, 2
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


def plan(
    applied: set[str], tmp_size_bytes: int, hostname: str, roots: tuple[Path, ...] = ()
) -> NamespacePlan:
    """The clone flags and, with a mount namespace, the child's mounts: private
    propagation, a fresh /proc (with a pid namespace), and a private tmpfs
    /tmp with any tenant root beneath /tmp kept visible inside it."""
    flags = 0
    for name, (flag, _) in NAMESPACES.items():
        if name in applied:
            flags |= flag
    mounts: list[Mount] = []
    if "mount_namespace" in applied:
        kept = [r for r in roots if beneath_tmp(r)]
        if len(kept) > MAX_KEPT:
            raise ValueError(f"at most {MAX_KEPT} tenant roots may lie beneath /tmp")
        # Nothing the child mounts may propagate back to the host.
        mounts.append((MOUNT_CALL, None, b"/", None, MS_REC | MS_PRIVATE, None))
        for slot, root in enumerate(kept):
            mounts.append((MOUNT_KEEP, bytes(root), None, None, slot, None))
        if "pid_namespace" in applied:
            # A /proc that shows only the sandbox's own processes.
            mounts.append(
                (MOUNT_CALL, b"proc", b"/proc", b"proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, None)
            )
        # A private /tmp per spawn; it disappears with the namespace.
        mounts.append(
            (
                MOUNT_CALL,
                b"tmpfs",
                b"/tmp",
                b"tmpfs",
                MS_NOSUID | MS_NODEV,
                f"size={tmp_size_bytes},mode=1777".encode(),
            )
        )
        for slot, root in enumerate(kept):
            mounts.append((MOUNT_RESTORE, None, bytes(root), None, slot, None))
    return NamespacePlan(
        clone_flags=flags,
        mounts=tuple(mounts),
        hostname=hostname.encode() if "uts_namespace" in applied else None,
        loopback_up="net_namespace" in applied,
    )
