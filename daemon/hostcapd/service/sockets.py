"""The front-end's socket files: bound under a private temporary name with
their owner, group and mode applied, then renamed into place (which replaces
a stale or replaced socket atomically), and removed only while still ours."""

from __future__ import annotations

import contextlib
import grp
import itertools
import os
import stat
from pathlib import Path

import grpc

from hostcapd.config import AdminSettings


class StartupError(Exception):
    """The daemon cannot start; the message says why."""


_temp_names = itertools.count(1)


def _sweep_temp_sockets(path: Path) -> None:
    # Temporary names of a crashed daemon (another pid) are garbage; ours are
    # never swept, so a bind in flight is never disturbed.
    prefix, own = f".{path.name}.", f".{path.name}.{os.getpid()}."
    with contextlib.suppress(OSError):
        for entry in os.scandir(path.parent):
            if (
                entry.name.startswith(prefix)
                and entry.name.endswith(".tmp")
                and not entry.name.startswith(own)
                and stat.S_ISSOCK(entry.stat(follow_symlinks=False).st_mode)
            ):
                with contextlib.suppress(OSError):
                    os.unlink(entry.path)


async def bind_socket(server: grpc.aio.Server, path: Path, uid: int, gid: int, mode: int) -> Path:
    """Bind under a private temporary name and apply owner/group/mode; the
    caller renames it into place after the server starts, so no client can
    ever connect through a socket whose permissions are not yet applied (and
    the rename replaces a stale or replaced socket atomically)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with contextlib.suppress(FileNotFoundError):
        if not stat.S_ISSOCK(path.lstat().st_mode):
            raise StartupError(f"{path} exists and is not a socket")
    _sweep_temp_sockets(path)
    # Unique per bind: a replaced server, when it stops, unlinks the name it
    # bound, which must never be a name a newer server is using.
    temp = path.with_name(f".{path.name}.{os.getpid()}.{next(_temp_names)}.tmp")
    with contextlib.suppress(FileNotFoundError):
        temp.unlink()
    old = os.umask(0o077)
    try:
        if server.add_insecure_port(f"unix:{temp}") == 0:
            raise StartupError(f"cannot bind {path}")
    finally:
        os.umask(old)
    # chmod first: once the file is someone else's, only CAP_FOWNER could.
    os.chmod(temp, mode)
    if os.geteuid() == 0:
        os.chown(temp, uid, gid)
    return temp


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
