"""The few Linux syscalls the fs worker needs that Python 3.11 does not wrap.

    fd = openat2(root_fd, "src/main.py", os.O_RDONLY, BENEATH)
    renameat2(dir_fd, ".tmp", dir_fd, "main.py", RENAME_NOREPLACE)
    link_tmpfile(tmp_fd, dir_fd, "main.py")        # name an O_TMPFILE inode
    landlock_restrict_self(ruleset_fd)
    set_no_new_privs(); set_parent_death_signal(signal.SIGKILL)

Every call raises OSError with the kernel's errno, like the os module does.
x86_64 syscall numbers; the daemon supports Linux on x86_64 only.
"""

from __future__ import annotations

import ctypes
import errno
import os

SYS_OPENAT2 = 437
SYS_LANDLOCK_RESTRICT_SELF = 446

#: openat2(2) resolve flags (linux/openat2.h).
RESOLVE_NO_XDEV = 0x01
RESOLVE_NO_MAGICLINKS = 0x02
RESOLVE_NO_SYMLINKS = 0x04
RESOLVE_BENEATH = 0x08

#: What every lookup beneath a root uses: no `..` above the anchor, no
#: absolute symlink, no /proc magic link, and the kernel retries or refuses
#: a lookup raced by a rename instead of letting it leave the anchor.
BENEATH = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS

RENAME_NOREPLACE = 1
AT_EMPTY_PATH = 0x1000
AT_SYMLINK_FOLLOW = 0x400
AT_FDCWD = -100

PR_SET_PDEATHSIG = 1
PR_SET_DUMPABLE = 4
PR_SET_NO_NEW_PRIVS = 38

_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long
_libc.renameat2.argtypes = [
    ctypes.c_int,
    ctypes.c_char_p,
    ctypes.c_int,
    ctypes.c_char_p,
    ctypes.c_uint,
]
_libc.renameat2.restype = ctypes.c_int
_libc.linkat.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_int]
_libc.linkat.restype = ctypes.c_int
_libc.prctl.argtypes = [
    ctypes.c_int,
    ctypes.c_ulong,
    ctypes.c_ulong,
    ctypes.c_ulong,
    ctypes.c_ulong,
]
_libc.prctl.restype = ctypes.c_int


class _OpenHow(ctypes.Structure):
    _fields_ = [
        ("flags", ctypes.c_uint64),
        ("mode", ctypes.c_uint64),
        ("resolve", ctypes.c_uint64),
    ]


def _fail() -> OSError:
    code = ctypes.get_errno()
    return OSError(code, os.strerror(code))


def openat2(dir_fd: int, path: str | bytes, flags: int, resolve: int, mode: int = 0) -> int:
    """openat2(2): open `path` relative to `dir_fd` under the `resolve` rules.

    O_CLOEXEC is always added. `mode` only with O_CREAT or O_TMPFILE (the
    kernel refuses a mode otherwise)."""
    how = _OpenHow(flags | os.O_CLOEXEC, mode, resolve)
    name = os.fsencode(path)
    result = _libc.syscall(
        ctypes.c_long(SYS_OPENAT2),
        ctypes.c_int(dir_fd),
        ctypes.c_char_p(name),
        ctypes.byref(how),
        ctypes.c_size_t(ctypes.sizeof(how)),
    )
    if result < 0:
        raise _fail()
    return int(result)


def renameat2(old_dir_fd: int, old: str, new_dir_fd: int, new: str, flags: int = 0) -> None:
    """renameat2(2) (glibc wrapper); RENAME_NOREPLACE fails with EEXIST."""
    if _libc.renameat2(old_dir_fd, os.fsencode(old), new_dir_fd, os.fsencode(new), flags) != 0:
        raise _fail()


def link_tmpfile(tmp_fd: int, dir_fd: int, name: str) -> None:
    """Give an O_TMPFILE inode a name in `dir_fd`; EEXIST if `name` exists.

    linkat(AT_EMPTY_PATH) needs no privilege on current kernels; older ones
    demand CAP_DAC_READ_SEARCH for it, where the documented /proc/self/fd
    route does the same job."""
    if _libc.linkat(tmp_fd, b"", dir_fd, os.fsencode(name), AT_EMPTY_PATH) == 0:
        return
    error = _fail()
    if error.errno not in (errno.EPERM, errno.ENOENT):  # the kernel wants the capability
        raise error
    proc = f"/proc/self/fd/{tmp_fd}".encode()
    if _libc.linkat(AT_FDCWD, proc, dir_fd, os.fsencode(name), AT_SYMLINK_FOLLOW) != 0:
        raise _fail()


def landlock_restrict_self(ruleset_fd: int) -> None:
    """landlock_restrict_self(2): confine this (single-threaded) process to
    the ruleset. Needs no_new_privs unless the caller is privileged."""
    if (
        _libc.syscall(
            ctypes.c_long(SYS_LANDLOCK_RESTRICT_SELF), ctypes.c_int(ruleset_fd), ctypes.c_uint(0)
        )
        != 0
    ):
        raise _fail()


def _prctl(option: int, value: int) -> None:
    if _libc.prctl(option, value, 0, 0, 0) != 0:
        raise _fail()


def set_no_new_privs() -> None:
    _prctl(PR_SET_NO_NEW_PRIVS, 1)


def set_parent_death_signal(signal_number: int) -> None:
    _prctl(PR_SET_PDEATHSIG, signal_number)


def set_not_dumpable() -> None:
    """No core dumps and no ptrace by other processes of the same uid: the
    tenant's own spawns run as the worker's uid and must not attach to it."""
    _prctl(PR_SET_DUMPABLE, 0)
