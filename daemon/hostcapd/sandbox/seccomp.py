"""seccomp: a BPF deny-list program compiled once, loaded by the child.

    support = probe()          # SeccompSupport(available=True, reason="...")
    program = build_filter()   # bytes of struct sock_filter[], for the C set-up

The C set-up loads the program with seccomp(SECCOMP_SET_MODE_FILTER) after
no_new_privs, the mounts and the uid change, right before close_range, poll
and execveat, which stay allowed. The program is assembled here (classic BPF,
no libseccomp) from `DENIED_SYSCALLS` (sandbox/seccomp_tables.py, with the
numbers of sandbox/x86_64.py), in this order:

1. the syscall's arch must be x86_64, else the process is killed: a 32-bit
   syscall (`int 0x80`) arrives as AUDIT_ARCH_I386 with other numbers;
2. an x32 syscall (number with bit 30 set) fails with EPERM;
3. each denied syscall fails with its group's errno; clone is denied only
   with a CLONE_NEW* flag, personality only when it changes the persona, and
   ioctl only for TIOCSTI / TIOCLINUX (which type into a terminal) and
   TIOCSETD (a line discipline: kernel code, a module loaded on demand);
4. socket and socketpair only for the address families of the tenant's
   `sockets.SocketPolicy` (an allowlist): another family fails EAFNOSUPPORT,
   an AF_NETLINK protocol not on it EPROTONOSUPPORT;
5. everything else is allowed.

Only the arch and the syscall number are read for syscalls that are not
argument-checked, so the kernel's seccomp cache allows those without running
the program at all.

`build_frontend_filter()` is the tenant front-end's (`hostcapd.frontend.confine`
loads it on itself): the same deny list, plus `FRONTEND_DENIED` (no connect
but with its inner socket's address length, no chdir, no exec, no identity change, no changing another process's limits or
scheduling), and sockets only AF_UNIX, SOCK_STREAM or SOCK_SEQPACKET.
"""

from __future__ import annotations

import errno
import platform
import struct
from dataclasses import dataclass

from hostcapd import linux
from hostcapd.sandbox import sockets as socket_families
from hostcapd.sandbox.seccomp_tables import (
    _ARG_CHECKED,
    _SOCKET_CALLS,
    DENIED_SYSCALLS,
    FRONTEND_CONNECT_ADDRLEN,
    FRONTEND_DENIED,
    Call,
    DeniedGroup,
)
from hostcapd.sandbox.x86_64 import (
    AUDIT_ARCH_X86_64,
    CLONE_NAMESPACE_FLAGS,
    CLONE_NEWUSER,
    IOPRIO_WHO_PROCESS,
    PER_LINUX,
    PER_LINUX32,
    PERSONALITY_QUERY,
    PRIO_PROCESS,
    SOCK_SEQPACKET,
    SOCK_STREAM,
    SOCK_TYPE_MASK,
    TIOCLINUX,
    TIOCSETD,
    TIOCSTI,
    X32_SYSCALL_BIT,
    X86_64_SYSCALLS,
    syscall_name,
)

# The tables and numbers, for the callers that read them here.
__all__ = [
    "CLONE_NEWUSER",
    "DENIED_SYSCALLS",
    "FRONTEND_DENIED",
    "PERSONALITY_QUERY",
    "PER_LINUX32",
    "X32_SYSCALL_BIT",
    "X86_64_SYSCALLS",
    "Call",
    "DeniedGroup",
    "SeccompError",
    "SeccompSupport",
    "build_filter",
    "build_frontend_filter",
    "probe",
    "syscall_name",
]

# include/uapi/linux/seccomp.h
SECCOMP_RET_KILL_PROCESS = 0x80000000
SECCOMP_RET_ERRNO = 0x00050000
SECCOMP_RET_ALLOW = 0x7FFF0000

# struct seccomp_data: int nr; u32 arch; u64 instruction_pointer; u64 args[6].
_OFF_NR = 0
_OFF_ARCH = 4
_OFF_ARGS = 16

# Classic BPF opcodes (include/uapi/linux/bpf_common.h).
_LD_W_ABS = 0x00 | 0x00 | 0x20
_JMP_JEQ_K = 0x05 | 0x10 | 0x00
_JMP_JSET_K = 0x05 | 0x40 | 0x00
_ALU_AND_K = 0x04 | 0x50 | 0x00
_RET_K = 0x06 | 0x00
_BPF_MAXINSNS = 4096
_INSN = struct.Struct("=HBBI")


@dataclass(frozen=True)
class SeccompSupport:
    available: bool
    reason: str


class SeccompError(Exception):
    """The filter could not be assembled (a table or jump-range bug)."""


def probe() -> SeccompSupport:
    """Whether this kernel can run the filter: x86_64, seccomp filters, and the
    kill-process and errno actions."""
    machine = platform.machine()
    if machine != "x86_64":
        return SeccompSupport(False, f"the filter is built for x86_64; this host is {machine}")
    for action, label in ((SECCOMP_RET_KILL_PROCESS, "kill-process"), (SECCOMP_RET_ERRNO, "errno")):
        try:
            linux.seccomp_action_available(action)
        except OSError as error:
            err = error.errno or 0
            if err in (errno.ENOSYS, errno.EINVAL):
                return SeccompSupport(False, "kernel built without seccomp filters")
            return SeccompSupport(
                False, f"seccomp {label} action unavailable: {errno.errorcode.get(err, err)}"
            )
    count = sum(len(g.syscalls) for g in DENIED_SYSCALLS)
    return SeccompSupport(True, f"BPF deny list: {count} syscalls, 32-bit and x32 ABIs blocked")


class _Program:
    """A tiny classic-BPF assembler: forward jumps to labels, resolved at the end."""

    def __init__(self) -> None:
        self._insns: list[tuple[int, int | str, int | str, int]] = []
        self._labels: dict[str, int] = {}

    def label(self, name: str) -> None:
        self._labels[name] = len(self._insns)

    def load(self, offset: int) -> None:
        self._insns.append((_LD_W_ABS, 0, 0, offset))

    def jeq(self, k: int, jt: int | str = 0, jf: int | str = 0) -> None:
        self._insns.append((_JMP_JEQ_K, jt, jf, k))

    def jset(self, k: int, jt: int | str = 0, jf: int | str = 0) -> None:
        self._insns.append((_JMP_JSET_K, jt, jf, k))

    def and_(self, k: int) -> None:
        self._insns.append((_ALU_AND_K, 0, 0, k))

    def ret(self, k: int) -> None:
        self._insns.append((_RET_K, 0, 0, k))

    def _offset(self, at: int, target: int | str) -> int:
        if isinstance(target, int):
            return target
        off = self._labels[target] - (at + 1)
        if not 0 <= off <= 255:
            raise SeccompError(f"BPF jump from {at} to {target!r} out of range ({off})")
        return off

    def assemble(self) -> bytes:
        if len(self._insns) > _BPF_MAXINSNS:
            raise SeccompError(f"BPF program too long ({len(self._insns)} instructions)")
        return b"".join(
            _INSN.pack(code, self._offset(i, jt), self._offset(i, jf), k & 0xFFFFFFFF)
            for i, (code, jt, jf, k) in enumerate(self._insns)
        )


def _errno(value: int) -> int:
    return SECCOMP_RET_ERRNO | (value & 0xFFFF)


def _arg_low(index: int) -> int:
    # x86_64 is little-endian: the low 32 bits of args[i] come first. Only the
    # low word matters for the checked arguments: the kernel truncates
    # personality's and ioctl's to unsigned int, and clone takes its flags
    # from the low 32 bits.
    return _OFF_ARGS + 8 * index


def build_filter(sockets: socket_families.SocketPolicy | None = None) -> bytes:
    """The packed `struct sock_filter[]` of the deny list and the socket
    family allowlist (default `sockets.DEFAULT_POLICY`; see the module doc)."""
    policy = socket_families.DEFAULT_POLICY if sockets is None else sockets
    return _assemble(DENIED_SYSCALLS, policy, socket_types=())


def build_frontend_filter() -> bytes:
    """The packed `struct sock_filter[]` of a tenant front-end: DENIED_SYSCALLS
    and FRONTEND_DENIED, socket and socketpair for AF_UNIX only (another
    family fails EAFNOSUPPORT) and only of SOCK_STREAM or SOCK_SEQPACKET
    (ESOCKTNOSUPPORT: a datagram socket could send to any socket path
    without connect)."""
    policy = socket_families.SocketPolicy(families=(socket_families.AF_UNIX,), netlink_protocols=())
    return _assemble(
        DENIED_SYSCALLS + FRONTEND_DENIED, policy, socket_types=(SOCK_STREAM, SOCK_SEQPACKET)
    )


def build_egress_filter() -> bytes:
    """The packed program of a tenant's egress proxy: a front-end's filter
    but connect, which is its job; sockets AF_UNIX, AF_INET and AF_INET6, of
    SOCK_STREAM, SOCK_SEQPACKET, or SOCK_DGRAM (its resolver's DNS queries)."""
    policy = socket_families.SocketPolicy(
        families=(socket_families.AF_UNIX, socket_families.AF_INET, socket_families.AF_INET6),
        netlink_protocols=(),
    )
    groups = tuple(g for g in FRONTEND_DENIED if "connect" not in g.syscalls)
    return _assemble(
        DENIED_SYSCALLS + groups, policy, socket_types=(SOCK_STREAM, SOCK_SEQPACKET, _SOCK_DGRAM)
    )


_SOCK_DGRAM = 2


def _assemble(
    groups: tuple[DeniedGroup, ...],
    policy: socket_families.SocketPolicy,
    socket_types: tuple[int, ...],
) -> bytes:
    """The program of the module doc for `groups`; `socket_types`, if any, are
    the only socket types an allowed family may have."""
    prog = _Program()
    prog.load(_OFF_ARCH)
    prog.jeq(AUDIT_ARCH_X86_64, jt=0, jf="kill")
    prog.load(_OFF_NR)
    prog.jset(X32_SYSCALL_BIT, jt="eperm")

    seen: set[str] = set()
    checks: set[str] = set()
    for group in groups:
        for name in group.syscalls:
            if name in seen:
                raise SeccompError(f"{name} is in two groups of the deny list")
            seen.add(name)
            if name in _ARG_CHECKED:
                target = _ARG_CHECKED[name]
                checks.add(target)
            elif group.errno == errno.EPERM:
                target = "eperm"
            elif group.errno == errno.ENOSYS:
                target = "enosys"
            else:
                raise SeccompError(f"no return label for errno {group.errno}")
            prog.jeq(X86_64_SYSCALLS[name], jt=target)
    for name in _SOCKET_CALLS:
        prog.jeq(X86_64_SYSCALLS[name], jt="socket")
    prog.ret(SECCOMP_RET_ALLOW)

    # socket(domain, type, protocol) and socketpair(domain, type, protocol, sv):
    # the kernel takes domain and protocol as int, so the low words decide.
    prog.label("socket")
    prog.load(_arg_low(0))
    family_ok = "socket_type" if socket_types else "allow"
    for family in policy.families:
        prog.jeq(family, jt=family_ok)
    if policy.netlink_protocols:
        prog.jeq(socket_families.AF_NETLINK, jt="netlink", jf="eafnosupport")
        prog.label("netlink")
        prog.load(_arg_low(2))
        for protocol in policy.netlink_protocols:
            prog.jeq(protocol, jt="allow")
        prog.ret(_errno(errno.EPROTONOSUPPORT))
    prog.label("eafnosupport")
    prog.ret(_errno(errno.EAFNOSUPPORT))
    if socket_types:
        # type is an int too; its flags (SOCK_NONBLOCK, SOCK_CLOEXEC) sit
        # above SOCK_TYPE_MASK.
        prog.label("socket_type")
        prog.load(_arg_low(1))
        prog.and_(SOCK_TYPE_MASK)
        for kind in socket_types:
            prog.jeq(kind, jt="allow")
        prog.ret(_errno(errno.ESOCKTNOSUPPORT))

    if "clone" in checks:
        prog.label("clone")
        prog.load(_arg_low(0))
        prog.jset(CLONE_NAMESPACE_FLAGS, jt="eperm", jf="allow")

    if "personality" in checks:
        prog.label("personality")
        prog.load(_arg_low(0))
        prog.jeq(PERSONALITY_QUERY, jt="allow")
        prog.jeq(PER_LINUX, jt="allow", jf="eperm")

    if "ioctl" in checks:
        prog.label("ioctl")
        prog.load(_arg_low(1))
        prog.jeq(TIOCSTI, jt="eperm")
        prog.jeq(TIOCSETD, jt="eperm")
        prog.jeq(TIOCLINUX, jt="eperm", jf="allow")

    # pid_t, int `which` and `who`: the kernel truncates them to 32 bits.
    # connect(fd, addr, addrlen): addrlen is an int; the filter cannot read
    # the address, only its length.
    if "connect_len" in checks:
        prog.label("connect_len")
        prog.load(_arg_low(2))
        prog.jeq(FRONTEND_CONNECT_ADDRLEN, jt="allow", jf="eperm")

    if "self_arg0" in checks:
        prog.label("self_arg0")
        prog.load(_arg_low(0))
        prog.jeq(0, jt="allow", jf="eperm")

    if "setpriority" in checks:
        prog.label("setpriority")
        prog.load(_arg_low(0))
        prog.jeq(PRIO_PROCESS, jt="who_is_self", jf="eperm")

    if "ioprio_set" in checks:
        prog.label("ioprio_set")
        prog.load(_arg_low(0))
        prog.jeq(IOPRIO_WHO_PROCESS, jt="who_is_self", jf="eperm")

    if checks & {"setpriority", "ioprio_set"}:
        prog.label("who_is_self")
        prog.load(_arg_low(1))
        prog.jeq(0, jt="allow", jf="eperm")

    prog.label("eperm")
    prog.ret(_errno(errno.EPERM))
    prog.label("enosys")
    prog.ret(_errno(errno.ENOSYS))
    prog.label("allow")
    prog.ret(SECCOMP_RET_ALLOW)
    prog.label("kill")
    prog.ret(SECCOMP_RET_KILL_PROCESS)
    return prog.assemble()
