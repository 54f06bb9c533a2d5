"""fanotify, as the file-change watcher uses it (decision 0030): a
notification group with a FAN_MARK_FILESYSTEM mark on the tenant image's
mount, reporting the parent directory's file handle and the entry's name
(FAN_REPORT_DFID_NAME_TARGET); the parsing of an event's info records; a
directory named again from its handle (open_by_handle_at)."""

from __future__ import annotations

import ctypes
import os
import struct
from pathlib import Path

# <linux/fanotify.h>
FAN_MODIFY = 0x2
FAN_MOVED_FROM = 0x40
FAN_MOVED_TO = 0x80
FAN_CREATE = 0x100
FAN_DELETE = 0x200
FAN_Q_OVERFLOW = 0x4000
FAN_ONDIR = 0x40000000
FAN_CLOEXEC = 0x1
FAN_NONBLOCK = 0x2
FAN_CLASS_NOTIF = 0x0
FAN_REPORT_FID = 0x200
FAN_REPORT_DIR_FID = 0x400
FAN_REPORT_NAME = 0x800
FAN_REPORT_TARGET_FID = 0x1000
FAN_MARK_ADD = 0x1
FAN_MARK_FILESYSTEM = 0x100
INFO_FID, INFO_DFID_NAME, INFO_DFID = 1, 2, 3
INIT_FLAGS = (
    FAN_CLASS_NOTIF
    | FAN_CLOEXEC
    | FAN_NONBLOCK
    | FAN_REPORT_FID
    | FAN_REPORT_DIR_FID
    | FAN_REPORT_NAME
    | FAN_REPORT_TARGET_FID
)
MASK = FAN_CREATE | FAN_DELETE | FAN_MOVED_FROM | FAN_MOVED_TO | FAN_MODIFY | FAN_ONDIR
_AT_FDCWD = -100

#: struct fanotify_event_metadata, fanotify_event_info_header, file_handle.
META = struct.Struct("=IBBHQii")
INFO_HDR = struct.Struct("=BBH")
HANDLE_HDR = struct.Struct("=Ii")
READ_SIZE = 256 * 1024
_INFO_HDR_FROM = INFO_HDR.unpack_from
_HANDLE_HDR_FROM = HANDLE_HDR.unpack_from

_libc = ctypes.CDLL(None, use_errno=True)
_libc.fanotify_init.argtypes = [ctypes.c_uint, ctypes.c_uint]
_libc.fanotify_mark.argtypes = [
    ctypes.c_int,
    ctypes.c_uint,
    ctypes.c_uint64,
    ctypes.c_int,
    ctypes.c_char_p,
]
_libc.open_by_handle_at.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int]
_libc.name_to_handle_at.argtypes = [
    ctypes.c_int,
    ctypes.c_char_p,
    ctypes.c_char_p,
    ctypes.POINTER(ctypes.c_int),
    ctypes.c_int,
]


class FsChangesUnavailable(Exception):
    """File changes cannot be recorded on this host or for this tenant."""


def probe() -> tuple[bool, str]:
    """Whether this kernel offers what the watcher needs (and we may use it)."""
    if os.geteuid() != 0:
        return False, "daemon is not root (fanotify needs CAP_SYS_ADMIN)"
    fd = _libc.fanotify_init(INIT_FLAGS, os.O_RDONLY)
    if fd < 0:
        err = ctypes.get_errno()
        return False, f"fanotify_init with fid reporting: {os.strerror(err)} (kernel 5.17+ needed)"
    os.close(fd)
    # Naming a directory from its handle needs CAP_DAC_READ_SEARCH (a unit's
    # bounding set may lack it): try it on the root directory.
    handle = ctypes.create_string_buffer(HANDLE_HDR.pack(128, 0) + bytes(128))
    mount_id = ctypes.c_int()
    if _libc.name_to_handle_at(_AT_FDCWD, b"/", handle, ctypes.byref(mount_id), 0) < 0:
        return False, f"name_to_handle_at: {os.strerror(ctypes.get_errno())}"
    root = os.open("/", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        opened = _libc.open_by_handle_at(root, handle.raw, os.O_PATH | os.O_CLOEXEC)
        if opened < 0:
            err = ctypes.get_errno()
            return False, f"open_by_handle_at: {os.strerror(err)} (needs CAP_DAC_READ_SEARCH)"
        os.close(opened)
    finally:
        os.close(root)
    return True, "fanotify (filesystem mark, fid and name) and the proc connector"


def open_group(mount: Path) -> int:
    """A notification group marking the file system of `mount` (its fd, the
    caller's to close); FsChangesUnavailable if the kernel refuses."""
    fd: int = _libc.fanotify_init(INIT_FLAGS, os.O_RDONLY | os.O_CLOEXEC)
    if fd < 0:
        raise FsChangesUnavailable(f"fanotify_init: {os.strerror(ctypes.get_errno())}")
    if (
        _libc.fanotify_mark(fd, FAN_MARK_ADD | FAN_MARK_FILESYSTEM, MASK, _AT_FDCWD, bytes(mount))
        < 0
    ):
        err = ctypes.get_errno()
        os.close(fd)
        raise FsChangesUnavailable(f"fanotify_mark on {mount}: {os.strerror(err)}")
    return fd


def event_info(data: bytes, at: int, end: int, target: bool = True) -> tuple[bytes, bytes, str]:
    """An event's info records (data[at:end]): the parent directory's handle,
    the target's handle and the entry's name, each empty when not reported.
    With `target` False the target's handle is not read: the kernel puts the
    directory's record first (then a rename's second one, then the
    target's), so the parse stops after it."""
    dir_handle = child = b""
    name = ""
    unpack_info, unpack_handle = _INFO_HDR_FROM, _HANDLE_HDR_FROM
    while at < end:
        info_type, _pad, length = unpack_info(data, at)
        if length < 4:  # INFO_HDR.size
            break
        handle_at = at + 12  # past the header and the fsid
        handle_end = handle_at + 8 + unpack_handle(data, handle_at)[0]
        if info_type == INFO_FID:
            child = data[handle_at:handle_end]
        else:
            dir_handle = data[handle_at:handle_end]
            if info_type == INFO_DFID_NAME:
                zero = data.find(b"\0", handle_end, at + length)
                raw = data[handle_end : zero if zero >= 0 else at + length]
                name = raw.decode("utf-8", "surrogateescape")
            if not target:
                break
        at += length
    return dir_handle, child, name


def open_by_handle(mount_fd: int, handle: bytes) -> int:
    """An O_PATH fd of the directory `handle` names on `mount_fd`'s file
    system, or -1 when it is gone."""
    fd: int = _libc.open_by_handle_at(mount_fd, handle, os.O_PATH | os.O_CLOEXEC)
    return fd
