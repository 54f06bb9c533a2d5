"""Landlock: a ruleset fd built in the spawner, applied by the child.

    support = probe()                      # LandlockSupport(abi=7, reason="ABI 7: fs, tcp, scope")
    template = RulesetTemplate(rules, support.abi)   # once per tenant: paths resolved
    fd = template.build()                  # per spawn; O_CLOEXEC, the caller closes it
    late = mount_rules(support.abi, proc=True, tmp=True)
    # the C set-up adds `late` to fd after its mounts (spawn's landlock_rules),
    # then landlock_restrict_self(fd, 0) after no_new_privs.

The ruleset handles every access right the ABI knows, so anything a rule does
not grant is denied: files and directories (`fs`), TCP bind and connect when
`rules.restrict_tcp` (`tcp`, ABI >= 4), and abstract unix sockets and signals
leaving the sandbox when `rules.scope` (`scope`, ABI >= 6).

Kernel facts that shape the caller (each checked by
tests/unit/sandbox/test_sandbox_landlock.py): a rule attaches to an inode,
and the kernel, walking up from a file to look for rules, steps from the root
of a mount straight to the *parent* of the directory it is mounted on,
skipping that directory. So:

- a rule on the host's `/tmp` or `/proc` does NOT cover the tmpfs or procfs
  the child mounts there after the ruleset is built (a rule on `/` would, and
  so would a tenant root's rule for mounts inside the root);
- a rule added after the mount, on the new mount's root, does: `mount_rules()`
  lists those, which the C set-up adds between its mounts and
  landlock_restrict_self, to a ruleset of that spawn's own
  (`RulesetTemplate.build()`: rules added to a ruleset stay in it);
- a bind mount's root is its source directory, so a rule on that very
  directory covers it wherever the child binds it (one on its parent does not).
"""

from __future__ import annotations

import ctypes
import errno
import os
import stat
import struct
from dataclasses import dataclass
from pathlib import Path

from hostcapd import linux

_RULE_PATH_BENEATH = 1
_RULE_NET_PORT = 2
_RULE_NET_PORT = 2

# Filesystem rights (include/uapi/linux/landlock.h), with the ABI that added them.
FS_EXECUTE = 1 << 0
FS_WRITE_FILE = 1 << 1
FS_READ_FILE = 1 << 2
FS_READ_DIR = 1 << 3
FS_REMOVE_DIR = 1 << 4
FS_REMOVE_FILE = 1 << 5
FS_MAKE_CHAR = 1 << 6
FS_MAKE_DIR = 1 << 7
FS_MAKE_REG = 1 << 8
FS_MAKE_SOCK = 1 << 9
FS_MAKE_FIFO = 1 << 10
FS_MAKE_BLOCK = 1 << 11
FS_MAKE_SYM = 1 << 12
FS_REFER = 1 << 13  # ABI 2
FS_TRUNCATE = 1 << 14  # ABI 3
FS_IOCTL_DEV = 1 << 15  # ABI 5

NET_BIND_TCP = 1 << 0  # ABI 4
NET_CONNECT_TCP = 1 << 1  # ABI 4

SCOPE_ABSTRACT_UNIX_SOCKET = 1 << 0  # ABI 6
SCOPE_SIGNAL = 1 << 1  # ABI 6

#: The only rights a rule on a non-directory may carry (the kernel refuses others).
FILE_RIGHTS = FS_EXECUTE | FS_WRITE_FILE | FS_READ_FILE | FS_TRUNCATE | FS_IOCTL_DEV

READ_ONLY = FS_READ_FILE | FS_READ_DIR
READ_EXEC = READ_ONLY | FS_EXECUTE


class LandlockError(Exception):
    """The ruleset could not be built; names the path or step and the errno."""

    def __init__(self, message: str, errno_: int = 0) -> None:
        super().__init__(message)
        self.errno = errno_


@dataclass(frozen=True)
class LandlockSupport:
    #: ABI version the kernel offers; 0 when landlock cannot be used.
    abi: int
    reason: str


@dataclass(frozen=True)
class LandlockRules:
    read_write: tuple[Path, ...]
    read_only: tuple[Path, ...]
    read_exec: tuple[Path, ...]
    #: Device nodes children may read and write (/dev/null, /dev/zero, ...).
    dev_files: tuple[Path, ...]
    #: Deny TCP bind/connect (ABI >= 4).
    restrict_tcp: bool
    #: Scope abstract unix sockets and signals to the sandbox (ABI >= 6).
    scope: bool
    #: With restrict_tcp: the TCP ports connect may still reach (the egress
    #: proxy's listener in the spawn's own network namespace).
    connect_ports: tuple[int, ...] = ()


def fs_rights(abi: int) -> int:
    """Every filesystem right ABI `abi` knows (0 for no landlock)."""
    if abi < 1:
        return 0
    rights = (FS_MAKE_SYM << 1) - 1  # ABI 1: EXECUTE .. MAKE_SYM
    if abi >= 2:
        rights |= FS_REFER
    if abi >= 3:
        rights |= FS_TRUNCATE
    if abi >= 5:
        rights |= FS_IOCTL_DEV
    return rights


def net_rights(abi: int) -> int:
    """The TCP rights ABI `abi` knows (ABI >= 4)."""
    return NET_BIND_TCP | NET_CONNECT_TCP if abi >= 4 else 0


def scope_rights(abi: int) -> int:
    """The scopes ABI `abi` knows (ABI >= 6)."""
    return SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL if abi >= 6 else 0


def dev_file_rights(abi: int) -> int:
    """What a rule on a device node grants: read, write, truncate (a shell's
    `> /dev/null` opens with O_TRUNC, ABI >= 3) and its ioctls (ABI >= 5)."""
    return (FS_READ_FILE | FS_WRITE_FILE | FS_TRUNCATE | FS_IOCTL_DEV) & fs_rights(abi)


def rights_summary(abi: int) -> str:
    """What a ruleset can restrict on this ABI, for Capabilities: "ABI 7: fs, tcp, scope"."""
    if abi < 1:
        return "no landlock"
    parts = ["fs"]
    if net_rights(abi):
        parts.append("tcp")
    if scope_rights(abi):
        parts.append("scope")
    return f"ABI {abi}: {', '.join(parts)}"


def probe() -> LandlockSupport:
    """Ask the kernel which landlock ABI it offers."""
    try:
        abi = linux.landlock_create_ruleset(None, 0, linux.LANDLOCK_CREATE_RULESET_VERSION)
    except OSError as error:
        err = error.errno or 0
        if err == errno.ENOSYS:
            return LandlockSupport(0, "kernel built without landlock (ENOSYS)")
        if err == errno.EOPNOTSUPP:
            return LandlockSupport(0, "landlock is disabled at boot (not in the lsm= list)")
        return LandlockSupport(0, f"landlock unavailable: {os.strerror(err)}")
    return LandlockSupport(abi, rights_summary(abi))


def _ruleset_attr(abi: int, restrict_tcp: bool, scope: bool) -> bytes:
    """struct landlock_ruleset_attr, as long as the ABI knows it."""
    handled_fs = fs_rights(abi)
    if abi < 4:
        return struct.pack("=Q", handled_fs)
    handled_net = net_rights(abi) if restrict_tcp else 0
    if abi < 6:
        return struct.pack("=QQ", handled_fs, handled_net)
    return struct.pack("=QQQ", handled_fs, handled_net, scope_rights(abi) if scope else 0)


def _path_beneath(parent_fd: int, access: int) -> ctypes.Array[ctypes.c_char]:
    # struct landlock_path_beneath_attr is packed: u64 allowed_access, s32 parent_fd.
    return ctypes.create_string_buffer(struct.pack("=Qi", access, parent_fd), 12)


def _add_rule(ruleset_fd: int, attr: ctypes.Array[ctypes.c_char], what: object) -> None:
    try:
        linux.landlock_add_rule(ruleset_fd, _RULE_PATH_BENEATH, attr)
    except OSError as error:
        raise LandlockError(
            f"landlock: cannot add a rule for {what}: {error.strerror}", error.errno or 0
        ) from None


def _open_beneath(path: Path | str, access: int) -> tuple[int, int] | None:
    """An O_PATH fd for `path` and the rights a rule on it may carry; None if absent."""
    try:
        fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    except OSError as error:
        raise LandlockError(
            f"landlock: cannot open {path}: {error.strerror}", error.errno or 0
        ) from None
    if not stat.S_ISDIR(os.fstat(fd).st_mode):
        access &= FILE_RIGHTS
    return fd, access


def _create_ruleset(attr: ctypes.Array[ctypes.c_char]) -> int:
    try:
        return linux.landlock_create_ruleset(attr, len(attr))
    except OSError as error:
        raise LandlockError(
            f"landlock: cannot create a ruleset: {error.strerror}", error.errno or 0
        ) from None


def add_path_rule(ruleset_fd: int, path: Path | str, access: int) -> bool:
    """Grant `access` beneath `path` in the ruleset; False when `path` does not exist.

    A path that is not a directory gets only the file rights in `access`.
    Symlinks are followed (`/bin` is one on merged-/usr hosts), so callers pass
    paths the daemon's config controls, never a tenant-writable one.
    """
    opened = _open_beneath(path, access)
    if opened is None:
        return False
    fd, access = opened
    try:
        if access:
            _add_rule(ruleset_fd, _path_beneath(fd, access), path)
        return True
    finally:
        os.close(fd)


def mount_rules(abi: int, proc: bool, tmp: bool) -> tuple[tuple[bytes, int], ...]:
    """The (path, access) rules for mounts the child makes after the ruleset is
    built: a set-up must add them to the ruleset after mounting and before
    landlock_restrict_self (a rule on the host directory does not reach them)."""
    rules: list[tuple[bytes, int]] = []
    if proc:
        rules.append((b"/proc", READ_ONLY & fs_rights(abi)))
    if tmp:
        rules.append((b"/tmp", fs_rights(abi)))
    return tuple(rules)


class RulesetTemplate:
    """A tenant's rules resolved once (paths opened O_PATH), from which a fresh
    ruleset fd is made per spawn with one syscall per rule.

    Needed because a ruleset cannot be shared between spawns once the set-up
    adds `mount_rules()` to it: rules added to a ruleset stay in it. The
    template pins the inodes it opened, which is what the rules do anyway.
    """

    def __init__(self, rules: LandlockRules, abi: int) -> None:
        if abi < 1:
            raise LandlockError("landlock is not available on this host")
        attr = _ruleset_attr(abi, rules.restrict_tcp, rules.scope)
        self._attr: ctypes.Array[ctypes.c_char] | None = ctypes.create_string_buffer(
            attr, len(attr)
        )
        self._grants: list[tuple[int, ctypes.Array[ctypes.c_char], Path]] = []
        self._ports = [
            ctypes.create_string_buffer(struct.pack("=QQ", NET_CONNECT_TCP, port), 16)
            for port in (rules.connect_ports if rules.restrict_tcp and abi >= 4 else ())
        ]
        try:
            everything = fs_rights(abi)
            wanted = [(p, everything) for p in rules.read_write]
            wanted += [(p, READ_ONLY) for p in rules.read_only]
            wanted += [(p, READ_EXEC) for p in rules.read_exec]
            for path in rules.dev_files:
                _check_char_device(path)
                wanted.append((path, dev_file_rights(abi)))
            for path, access in wanted:
                opened = _open_beneath(path, access)
                if opened is None:
                    continue
                fd, access = opened
                if access:
                    self._grants.append((fd, _path_beneath(fd, access), path))
                else:
                    os.close(fd)
        except BaseException:
            self.close()
            raise

    def build(self) -> int:
        """A new ruleset fd (O_CLOEXEC, owned by the caller) holding every rule."""
        if self._attr is None:
            raise LandlockError("landlock: the ruleset template is closed")
        ruleset_fd = _create_ruleset(self._attr)
        try:
            # With TCP handled and no port rule, every bind and connect is denied.
            for _, attr, path in self._grants:
                _add_rule(ruleset_fd, attr, path)
            for port in self._ports:
                try:
                    linux.landlock_add_rule(ruleset_fd, _RULE_NET_PORT, port)
                except OSError as error:
                    raise LandlockError(
                        f"landlock: cannot add a TCP port rule: {error.strerror}", error.errno or 0
                    ) from None
        except BaseException:
            os.close(ruleset_fd)
            raise
        return ruleset_fd

    def close(self) -> None:
        """Release the opened paths; idempotent."""
        grants, self._grants = self._grants, []
        for fd, _, _ in grants:
            os.close(fd)
        self._attr = None


def build_ruleset(rules: LandlockRules, abi: int) -> int:
    """A ruleset fd (O_CLOEXEC, owned by the caller) that denies everything
    ABI `abi` can restrict except what `rules` grant.

    Paths that do not exist are skipped (`/lib32` on most hosts). A device
    file that is not a character device is refused. On any error nothing is
    left open and LandlockError says which path failed.
    """
    template = RulesetTemplate(rules, abi)
    try:
        return template.build()
    finally:
        template.close()


def _check_char_device(path: Path) -> None:
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return
    except OSError as error:
        raise LandlockError(
            f"landlock: cannot stat {path}: {error.strerror}", error.errno or 0
        ) from None
    if not stat.S_ISCHR(mode):
        raise LandlockError(f"landlock: dev_files entry {path} is not a character device")
