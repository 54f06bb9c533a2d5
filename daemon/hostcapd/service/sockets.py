"""The served socket files: a front-end binds each under a private temporary
name, the daemon applies its owner, group and mode and renames it into place
(which replaces a stale or replaced socket atomically), and removes it only
while still ours."""

from __future__ import annotations

import contextlib
import grp
from pathlib import Path

from hostcapd.config import AdminSettings


class StartupError(Exception):
    """The daemon cannot start; the message says why."""


def file_id_of(path: Path) -> tuple[int, int]:
    st = path.lstat()
    return st.st_dev, st.st_ino


def unlink_if_ours(path: Path, file_id: tuple[int, int] | None) -> None:
    """Remove the socket at `path` only if it is still the file we put there
    (a reload may have given the path to another tenant's socket)."""
    if file_id is None:
        return
    with contextlib.suppress(FileNotFoundError):
        if file_id_of(path) == file_id:
            path.unlink()


def admin_socket_access(admin: AdminSettings) -> tuple[int, int]:
    """The admin socket's (gid, mode): owner root always; group `admin.group`
    with mode 0660, or without a group 0600 (group bits of the configured
    mode are dropped then, as the group would be root's). Raises StartupError
    for a mode that grants others, or an unknown group."""
    if admin.mode & ~0o660:
        raise StartupError(
            f"admin.mode {admin.mode:#o} would let users other than root and the admin "
            "group reach the admin socket (use 0o660 with admin.group, or 0o600)"
        )
    if admin.group is None:
        return 0, (admin.mode & 0o600) | 0o600
    if isinstance(admin.group, int):
        gid = admin.group
    else:
        try:
            gid = grp.getgrnam(admin.group).gr_gid
        except KeyError:
            raise StartupError(f"admin.group {admin.group!r} does not exist") from None
    return gid, admin.mode | 0o600
