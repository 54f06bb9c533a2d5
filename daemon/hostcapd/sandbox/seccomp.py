"""seccomp: a BPF deny-list program compiled once, loaded by the child.

    support = probe()          # SeccompSupport(available=True, reason="...")
    program = build_filter()   # bytes of struct sock_filter[], for the C set-up

The C set-up loads the program with seccomp(SECCOMP_SET_MODE_FILTER) after
no_new_privs, the mounts and the uid change, right before close_range, poll
and execveat, which stay allowed. The program is assembled here (classic BPF,
no libseccomp) from `DENIED_SYSCALLS`, in this order:

1. the syscall's arch must be x86_64, else the process is killed: a 32-bit
   syscall (`int 0x80`) arrives as AUDIT_ARCH_I386 with other numbers;
2. an x32 syscall (number with bit 30 set) fails with EPERM;
3. each denied syscall fails with its group's errno; clone is denied only
   with a CLONE_NEW* flag, personality only when it changes the persona, and
   ioctl only for TIOCSTI / TIOCLINUX (which type into a terminal);
4. socket and socketpair only for the address families of the tenant's
   `sockets.SocketPolicy` (an allowlist): another family fails EAFNOSUPPORT,
   an AF_NETLINK protocol not on it EPROTONOSUPPORT;
5. everything else is allowed.

Only the arch and the syscall number are read for syscalls that are not
argument-checked, so the kernel's seccomp cache allows those without running
the program at all.
"""

from __future__ import annotations

import errno
import platform
import struct
from dataclasses import dataclass

from hostcapd import linux
from hostcapd.sandbox import sockets as socket_families

#: x86_64 syscall numbers, from the kernel's arch/x86/entry/syscalls/syscall_64.tbl.
#: Only the syscalls the filter and its examples name; no runtime lookup.
X86_64_SYSCALLS: dict[str, int] = {
    "ioctl": 16,
    "getpid": 39,
    "socket": 41,
    "socketpair": 53,
    "clone": 56,
    "kill": 62,
    "uname": 63,
    "chdir": 80,
    "sysinfo": 99,
    "ptrace": 101,
    "syslog": 103,
    "getppid": 110,
    "uselib": 134,
    "personality": 135,
    "statfs": 137,
    "vhangup": 153,
    "modify_ldt": 154,
    "pivot_root": 155,
    "acct": 163,
    "mount": 165,
    "umount2": 166,
    "swapon": 167,
    "swapoff": 168,
    "reboot": 169,
    "sethostname": 170,
    "iopl": 172,
    "ioperm": 173,
    "init_module": 175,
    "delete_module": 176,
    "quotactl": 179,
    "lookup_dcookie": 212,
    "kexec_load": 246,
    "add_key": 248,
    "request_key": 249,
    "keyctl": 250,
    "openat": 257,
    "unshare": 272,
    "epoll_create1": 291,
    "perf_event_open": 298,
    "name_to_handle_at": 303,
    "open_by_handle_at": 304,
    "setns": 308,
    "process_vm_readv": 310,
    "process_vm_writev": 311,
    "kcmp": 312,
    "finit_module": 313,
    "seccomp": 317,
    "getrandom": 318,
    "kexec_file_load": 320,
    "bpf": 321,
    "userfaultfd": 323,
    "io_uring_setup": 425,
    "io_uring_enter": 426,
    "io_uring_register": 427,
    "open_tree": 428,
    "move_mount": 429,
    "fsopen": 430,
    "fsconfig": 431,
    "fsmount": 432,
    "fspick": 433,
    "pidfd_open": 434,
    "clone3": 435,
    "close_range": 436,
    "pidfd_getfd": 438,
    "process_madvise": 440,
    "mount_setattr": 442,
    "quotactl_fd": 443,
    "open_tree_attr": 467,
}

#: include/uapi/linux/audit.h: EM_X86_64 | __AUDIT_ARCH_64BIT | __AUDIT_ARCH_LE.
AUDIT_ARCH_X86_64 = 0xC000003E
AUDIT_ARCH_I386 = 0x40000003
X32_SYSCALL_BIT = 0x40000000

# Namespace flags of clone(2); CLONE_NEWTIME (0x80) is not one: in clone's
# flags word that bit belongs to the exit signal (it exists only for clone3).
CLONE_NEWNS = 0x00020000
CLONE_NEWCGROUP = 0x02000000
CLONE_NEWUTS = 0x04000000
CLONE_NEWIPC = 0x08000000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000
CLONE_NAMESPACE_FLAGS = (
    CLONE_NEWNS
    | CLONE_NEWCGROUP
    | CLONE_NEWUTS
    | CLONE_NEWIPC
    | CLONE_NEWUSER
    | CLONE_NEWPID
    | CLONE_NEWNET
)
CLONE_SIGHAND = 0x00000800

PER_LINUX = 0x0000
PER_LINUX32 = 0x0008
ADDR_NO_RANDOMIZE = 0x0040000
PERSONALITY_QUERY = 0xFFFFFFFF

TIOCSTI = 0x5412
TIOCLINUX = 0x541C
TIOCGWINSZ = 0x5413

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
_RET_K = 0x06 | 0x00
_BPF_MAXINSNS = 4096
_INSN = struct.Struct("=HBBI")

#: A syscall argument that is a NUL-terminated path (for the examples).
Arg = int | bytes


@dataclass(frozen=True)
class Call:
    """One concrete syscall, for a table's examples: name and arguments."""

    name: str
    args: tuple[Arg, ...] = ()

    def __str__(self) -> str:
        shown = ", ".join(repr(a) if isinstance(a, bytes) else hex(a) for a in self.args)
        return f"{self.name}({shown})"


@dataclass(frozen=True)
class DeniedGroup:
    """Syscalls denied for one reason, with a call the filter denies and one
    it lets through. The examples are harmless when run unfiltered (bad
    arguments or absent paths; vhangup needs a process without a controlling
    terminal), so a test can show that the filter, not the kernel, is what
    refuses them."""

    name: str
    why: str
    syscalls: tuple[str, ...]
    denied: tuple[Call, ...]
    allowed: tuple[Call, ...]
    #: errno the denied calls get.
    errno: int = errno.EPERM


_NO_PID = 0x3FFFFFFF  # above pid_max: ESRCH when unfiltered
_NOWHERE = b"/nonexistent-hostcap-seccomp-example"

#: The deny list. Argument-checked groups (clone, personality, ioctl) are
#: compiled specially; see build_filter().
DENIED_SYSCALLS: tuple[DeniedGroup, ...] = (
    DeniedGroup(
        "tracing",
        "reading or controlling another process's memory and fds",
        (
            "ptrace",
            "process_vm_readv",
            "process_vm_writev",
            "process_madvise",
            "pidfd_getfd",
            "kcmp",
        ),
        denied=(
            Call("ptrace", (16, _NO_PID, 0, 0)),  # PTRACE_ATTACH
            Call("process_vm_readv", (_NO_PID, 0, 0, 0, 0, 1)),
            Call("process_vm_writev", (_NO_PID, 0, 0, 0, 0, 1)),
            Call("process_madvise", (-1, 0, 0, 0, 0)),
            Call("pidfd_getfd", (-1, 0, 0)),
            Call("kcmp", (_NO_PID, _NO_PID, 0, 0, 0)),
        ),
        allowed=(Call("kill", (0, 0)), Call("pidfd_open", (1, 0))),
    ),
    DeniedGroup(
        "kernel_code",
        "loading programs, modules or kernels into the kernel, and kernel attack surface",
        (
            "bpf",
            "perf_event_open",
            "userfaultfd",
            "init_module",
            "finit_module",
            "delete_module",
            "kexec_load",
            "kexec_file_load",
        ),
        denied=(
            Call("bpf", (0xFFFF, 0, 0)),
            Call("perf_event_open", (0, 0, -1, -1, 0)),
            Call("userfaultfd", (0xFFFF,)),
            Call("init_module", (0, 0, 0)),
            Call("finit_module", (-1, b"", 0)),
            Call("delete_module", (_NOWHERE, 0)),
            Call("kexec_load", (0, 0, 0, 0xDEAD0000)),
            Call("kexec_file_load", (-1, -1, 0, 0, 0xFFFF)),
        ),
        allowed=(Call("uname", (0,)),),
    ),
    DeniedGroup(
        "keyring",
        "the kernel keyring is shared beyond the sandbox",
        ("keyctl", "add_key", "request_key"),
        denied=(
            Call("keyctl", (0xFFFF, 0, 0, 0, 0)),
            Call("add_key", (0, 0, 0, 0, 0)),
            Call("request_key", (0, 0, 0, 0)),
        ),
        allowed=(Call("getrandom", (0, 0, 0)),),
    ),
    DeniedGroup(
        "io_uring",
        "io_uring bypasses syscall filtering and is a large kernel attack surface",
        ("io_uring_setup", "io_uring_enter", "io_uring_register"),
        denied=(
            Call("io_uring_setup", (1, 0)),
            Call("io_uring_enter", (-1, 0, 0, 0, 0, 0)),
            Call("io_uring_register", (-1, 0, 0, 0)),
        ),
        allowed=(Call("epoll_create1", (0,)),),
    ),
    DeniedGroup(
        "mounts",
        "changing the mount tree after set-up",
        (
            "mount",
            "umount2",
            "pivot_root",
            "open_tree",
            "open_tree_attr",
            "move_mount",
            "fsopen",
            "fsconfig",
            "fsmount",
            "fspick",
            "mount_setattr",
        ),
        denied=(
            Call("mount", (b"none", _NOWHERE, b"tmpfs", 0, 0)),
            Call("umount2", (_NOWHERE, 0)),
            Call("pivot_root", (_NOWHERE, _NOWHERE)),
            Call("open_tree", (-100, _NOWHERE, 0)),
            Call("open_tree_attr", (-100, _NOWHERE, 0, 0, 0)),
            Call("move_mount", (-1, b"", -1, b"", 0)),
            Call("fsopen", (b"hostcap-no-such-fs", 0)),
            Call("fsconfig", (-1, 0, 0, 0, 0)),
            Call("fsmount", (-1, 0, 0)),
            Call("fspick", (-100, _NOWHERE, 0)),
            Call("mount_setattr", (-100, _NOWHERE, 0, 0, 0)),
        ),
        allowed=(Call("statfs", (b"/", 0)), Call("chdir", (b"/",))),
    ),
    DeniedGroup(
        "namespaces",
        "entering or creating namespaces after set-up (user namespaces above all); "
        "clone without a CLONE_NEW* flag (fork, threads) stays allowed",
        ("unshare", "setns", "clone"),
        # CLONE_SIGHAND without CLONE_VM is EINVAL: the kernel refuses these
        # clones without creating a process, unless the filter refuses first.
        denied=(
            Call("unshare", (CLONE_NEWUSER,)),
            Call("setns", (-1, 0)),
            Call("clone", (CLONE_NEWUSER | CLONE_SIGHAND, 0, 0, 0, 0)),
            Call("clone", (CLONE_NEWNET | CLONE_SIGHAND, 0, 0, 0, 0)),
        ),
        allowed=(Call("clone", (CLONE_SIGHAND, 0, 0, 0, 0)),),
    ),
    DeniedGroup(
        "clone3",
        "clone3 passes its flags in memory the filter cannot read; ENOSYS makes "
        "libc fall back to clone, which the filter checks",
        ("clone3",),
        denied=(Call("clone3", (0, 0)),),
        allowed=(Call("clone", (CLONE_SIGHAND, 0, 0, 0, 0)),),
        errno=errno.ENOSYS,
    ),
    DeniedGroup(
        "personality",
        "changing the execution domain (PER_LINUX32, READ_IMPLIES_EXEC, no ASLR); "
        "querying it and setting PER_LINUX are allowed",
        ("personality",),
        denied=(Call("personality", (PER_LINUX32,)), Call("personality", (ADDR_NO_RANDOMIZE,))),
        allowed=(Call("personality", (PERSONALITY_QUERY,)), Call("personality", (PER_LINUX,))),
    ),
    DeniedGroup(
        "terminal_injection",
        "TIOCSTI / TIOCLINUX push input into a terminal outside the sandbox",
        ("ioctl",),
        denied=(Call("ioctl", (-1, TIOCSTI, 0)), Call("ioctl", (-1, TIOCLINUX, 0))),
        allowed=(Call("ioctl", (-1, TIOCGWINSZ, 0)),),
    ),
    DeniedGroup(
        "host_admin",
        "administering the host: swap, reboot, accounting, quotas, kernel log, "
        "port I/O, terminals, obsolete interfaces",
        (
            "swapon",
            "swapoff",
            "reboot",
            "acct",
            "quotactl",
            "quotactl_fd",
            "lookup_dcookie",
            "syslog",
            "uselib",
            "iopl",
            "ioperm",
            "modify_ldt",
            "vhangup",
        ),
        denied=(
            Call("swapon", (_NOWHERE, 0)),
            Call("swapoff", (_NOWHERE,)),
            Call("reboot", (0, 0, 0, 0)),
            Call("acct", (_NOWHERE,)),
            Call("quotactl", (0, _NOWHERE, 0, 0)),
            Call("quotactl_fd", (-1, 0, 0, 0)),
            Call("lookup_dcookie", (0, 0, 0)),
            Call("syslog", (0xFFFF, 0, 0)),
            Call("uselib", (_NOWHERE,)),
            Call("iopl", (4,)),
            Call("ioperm", (0x10000, 1, 1)),
            Call("modify_ldt", (0xFFFF, 0, 0)),
            Call("vhangup", ()),
        ),
        allowed=(Call("sysinfo", (0,)),),
    ),
    DeniedGroup(
        "file_handles",
        "opening files by handle skips path checks (the shocker escape)",
        ("name_to_handle_at", "open_by_handle_at"),
        denied=(
            Call("name_to_handle_at", (-100, _NOWHERE, 0, 0, 0)),
            Call("open_by_handle_at", (-1, 0, 0)),
        ),
        allowed=(Call("openat", (-100, _NOWHERE, 0)),),
    ),
)

#: Syscalls the filter inspects arguments of, instead of denying outright.
_ARG_CHECKED = frozenset({"clone", "personality", "ioctl"})
#: Checked by the tenant's socket policy (not in DENIED_SYSCALLS).
_SOCKET_CALLS = ("socket", "socketpair")


@dataclass(frozen=True)
class SeccompSupport:
    available: bool
    reason: str


class SeccompError(Exception):
    """The filter could not be assembled (a table or jump-range bug)."""


def syscall_name(number: int) -> str:
    """The name of an x86_64 syscall the filter names, else "syscall <n>"."""
    for name, nr in X86_64_SYSCALLS.items():
        if nr == number:
            return name
    return f"syscall {number}"


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
    prog = _Program()
    prog.load(_OFF_ARCH)
    prog.jeq(AUDIT_ARCH_X86_64, jt=0, jf="kill")
    prog.load(_OFF_NR)
    prog.jset(X32_SYSCALL_BIT, jt="eperm")

    seen: set[str] = set()
    for group in DENIED_SYSCALLS:
        for name in group.syscalls:
            if name in seen:
                raise SeccompError(f"{name} is in two groups of DENIED_SYSCALLS")
            seen.add(name)
            if name in _ARG_CHECKED:
                target = name
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
    for family in policy.families:
        prog.jeq(family, jt="allow")
    if policy.netlink_protocols:
        prog.jeq(socket_families.AF_NETLINK, jt="netlink", jf="eafnosupport")
        prog.label("netlink")
        prog.load(_arg_low(2))
        for protocol in policy.netlink_protocols:
            prog.jeq(protocol, jt="allow")
        prog.ret(_errno(errno.EPROTONOSUPPORT))
    prog.label("eafnosupport")
    prog.ret(_errno(errno.EAFNOSUPPORT))

    prog.label("clone")
    prog.load(_arg_low(0))
    prog.jset(CLONE_NAMESPACE_FLAGS, jt="eperm", jf="allow")

    prog.label("personality")
    prog.load(_arg_low(0))
    prog.jeq(PERSONALITY_QUERY, jt="allow")
    prog.jeq(PER_LINUX, jt="allow", jf="eperm")

    prog.label("ioctl")
    prog.load(_arg_low(1))
    prog.jeq(TIOCSTI, jt="eperm")
    prog.jeq(TIOCLINUX, jt="eperm", jf="allow")

    prog.label("eperm")
    prog.ret(_errno(errno.EPERM))
    prog.label("enosys")
    prog.ret(_errno(errno.ENOSYS))
    prog.label("allow")
    prog.ret(SECCOMP_RET_ALLOW)
    prog.label("kill")
    prog.ret(SECCOMP_RET_KILL_PROCESS)
    return prog.assemble()
