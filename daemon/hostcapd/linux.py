"""The kernel calls Python 3.11 does not wrap, in one place.

    fd = openat2(root_fd, "src/main.py", os.O_RDONLY, BENEATH)
    renameat2(dir_fd, ".tmp", dir_fd, "main.py", RENAME_NOREPLACE)
    link_tmpfile(tmp_fd, dir_fd, "main.py")        # name an O_TMPFILE inode
    abi = landlock_create_ruleset(None, 0, LANDLOCK_CREATE_RULESET_VERSION)
    seccomp_set_filter(program)                    # a packed struct sock_filter[]
    unshare(CLONE_NEWNET); setns(home_fd, CLONE_NEWNET)
    mount(None, b"/sys/fs/cgroup", None, MS_REMOUNT, b"favordynmods")

Thin wrappers over this process's libc (loaded once, here): each raises
OSError with the kernel's errno, as the os module does, and decides
nothing. prctl(2) is python-prctl's (`import prctl`), not here. The C set-up
(`childsetup_c/`) makes its own calls, in the child, without Python.
x86_64 syscall numbers (arch/x86/entry/syscalls/syscall_64.tbl); the daemon
supports Linux on x86_64 only.
"""

from __future__ import annotations

import ctypes
import errno
import os

SYS_SECCOMP = 317
SYS_OPENAT2 = 437
SYS_LANDLOCK_CREATE_RULESET = 444
SYS_LANDLOCK_ADD_RULE = 445
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

#: landlock_create_ruleset(2) flag: return the ABI version instead of a ruleset.
LANDLOCK_CREATE_RULESET_VERSION = 1 << 0
#: seccomp(2) operations: load a filter; is this filter return action available?
SECCOMP_SET_MODE_FILTER = 1
SECCOMP_GET_ACTION_AVAIL = 2

_c = ctypes
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
libc.renameat2.argtypes = [_c.c_int, _c.c_char_p, _c.c_int, _c.c_char_p, _c.c_uint]
libc.renameat2.restype = ctypes.c_int
libc.linkat.argtypes = [_c.c_int, _c.c_char_p, _c.c_int, _c.c_char_p, _c.c_int]
libc.linkat.restype = ctypes.c_int
libc.mount.argtypes = [_c.c_char_p, _c.c_char_p, _c.c_char_p, _c.c_ulong, _c.c_char_p]
libc.mount.restype = ctypes.c_int
libc.unshare.argtypes = [ctypes.c_int]
libc.unshare.restype = ctypes.c_int
libc.setns.argtypes = [ctypes.c_int, ctypes.c_int]
libc.setns.restype = ctypes.c_int


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


class _OpenHow(ctypes.Structure):
    _fields_ = [
        ("flags", ctypes.c_uint64),
        ("mode", ctypes.c_uint64),
        ("resolve", ctypes.c_uint64),
    ]


def _fail() -> OSError:
    code = ctypes.get_errno()
    return OSError(code, os.strerror(code))


#: openat2 through a prototype made once: ctypes converts the arguments by
#: it (no c_long, c_int, c_char_p, c_size_t objects made a call, no byref):
#: the fs worker's lookups, one or more a file operation, and the spawn path's.
_OPENAT2 = ctypes.CFUNCTYPE(
    ctypes.c_long,
    ctypes.c_long,
    ctypes.c_int,
    ctypes.c_char_p,
    ctypes.POINTER(_OpenHow),
    ctypes.c_size_t,
    use_errno=True,
)(("syscall", libc))
_OPEN_HOW_SIZE = ctypes.sizeof(_OpenHow)


def openat2(dir_fd: int, path: str | bytes, flags: int, resolve: int, mode: int = 0) -> int:
    """openat2(2): open `path` relative to `dir_fd` under the `resolve` rules.

    O_CLOEXEC is always added. `mode` only with O_CREAT or O_TMPFILE (the
    kernel refuses a mode otherwise)."""
    result: int = _OPENAT2(
        SYS_OPENAT2,
        dir_fd,
        os.fsencode(path),
        _OpenHow(flags | os.O_CLOEXEC, mode, resolve),
        _OPEN_HOW_SIZE,
    )
    if result < 0:
        raise _fail()
    return result


def renameat2(old_dir_fd: int, old: str, new_dir_fd: int, new: str, flags: int = 0) -> None:
    """renameat2(2) (glibc wrapper); RENAME_NOREPLACE fails with EEXIST."""
    if libc.renameat2(old_dir_fd, os.fsencode(old), new_dir_fd, os.fsencode(new), flags) != 0:
        raise _fail()


def link_tmpfile(tmp_fd: int, dir_fd: int, name: str) -> None:
    """Give an O_TMPFILE inode a name in `dir_fd`; EEXIST if `name` exists.

    linkat(AT_EMPTY_PATH) needs no privilege on current kernels; older ones
    demand CAP_DAC_READ_SEARCH for it, where the documented /proc/self/fd
    route does the same job."""
    if libc.linkat(tmp_fd, b"", dir_fd, os.fsencode(name), AT_EMPTY_PATH) == 0:
        return
    error = _fail()
    if error.errno not in (errno.EPERM, errno.ENOENT):  # the kernel wants the capability
        raise error
    proc = f"/proc/self/fd/{tmp_fd}".encode()
    if libc.linkat(AT_FDCWD, proc, dir_fd, os.fsencode(name), AT_SYMLINK_FOLLOW) != 0:
        raise _fail()


def landlock_create_ruleset(
    attr: ctypes.Array[ctypes.c_char] | None, size: int, flags: int = 0
) -> int:
    """landlock_create_ruleset(2): a ruleset fd (O_CLOEXEC), or with
    LANDLOCK_CREATE_RULESET_VERSION (attr None, size 0) the ABI version."""
    result = libc.syscall(
        SYS_LANDLOCK_CREATE_RULESET, attr, ctypes.c_size_t(size), ctypes.c_uint32(flags)
    )
    if result < 0:
        raise _fail()
    return int(result)


def landlock_add_rule(ruleset_fd: int, rule_type: int, attr: ctypes.Array[ctypes.c_char]) -> None:
    """landlock_add_rule(2): add the rule `attr` (of `rule_type`) to the ruleset."""
    if libc.syscall(SYS_LANDLOCK_ADD_RULE, ruleset_fd, rule_type, attr, 0) < 0:
        raise _fail()


def landlock_restrict_self(ruleset_fd: int) -> None:
    """landlock_restrict_self(2): confine this (single-threaded) process to
    the ruleset. Needs no_new_privs unless the caller is privileged."""
    if (
        libc.syscall(
            ctypes.c_long(SYS_LANDLOCK_RESTRICT_SELF), ctypes.c_int(ruleset_fd), ctypes.c_uint(0)
        )
        != 0
    ):
        raise _fail()


def seccomp_action_available(action: int) -> None:
    """seccomp(SECCOMP_GET_ACTION_AVAIL): raises OSError unless this kernel
    offers the filter return action `action` (ENOSYS/EINVAL: no filters)."""
    value = ctypes.c_uint32(action)
    if libc.syscall(SYS_SECCOMP, SECCOMP_GET_ACTION_AVAIL, 0, ctypes.byref(value)) != 0:
        raise _fail()


def seccomp_set_filter(program: bytes, flags: int = 0) -> None:
    """seccomp(SECCOMP_SET_MODE_FILTER): add the classic-BPF `program` (a
    packed struct sock_filter[]) to this thread's filters, for good. Needs
    no_new_privs unless the caller has CAP_SYS_ADMIN."""
    if not program or len(program) % 8:
        raise ValueError(
            f"a seccomp program is whole 8-byte instructions, not {len(program)} bytes"
        )
    code = ctypes.create_string_buffer(program, len(program))
    fprog = _SockFprog(len(program) // 8, ctypes.addressof(code))
    if (
        libc.syscall(
            ctypes.c_long(SYS_SECCOMP),
            ctypes.c_uint(SECCOMP_SET_MODE_FILTER),
            ctypes.c_uint(flags),
            ctypes.byref(fprog),
        )
        != 0
    ):
        raise _fail()


def mount(
    source: bytes | None, target: bytes, fstype: bytes | None, flags: int, data: bytes | None
) -> None:
    """mount(2) (glibc wrapper)."""
    if libc.mount(source, target, fstype, flags, data) != 0:
        raise _fail()


def unshare(flags: int) -> None:
    """unshare(2): this thread into new namespaces of `flags` (CLONE_NEW*)."""
    if libc.unshare(flags) != 0:
        raise _fail()


def setns(fd: int, nstype: int) -> None:
    """setns(2): this thread into the namespace `fd` refers to."""
    if libc.setns(fd, nstype) != 0:
        raise _fail()
