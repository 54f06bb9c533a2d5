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

`build_frontend_filter()` is the tenant front-end's (`hostcapd.frontend.confine`
loads it on itself): the same deny list, plus `FRONTEND_DENIED` (no connect,
no exec, no identity change, no changing another process's limits or
scheduling), and sockets only AF_UNIX, SOCK_STREAM or SOCK_SEQPACKET.
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
    "connect": 42,
    "socketpair": 53,
    "clone": 56,
    "execve": 59,
    "kill": 62,
    "uname": 63,
    "chdir": 80,
    "chmod": 90,
    "fchmod": 91,
    "chown": 92,
    "fchown": 93,
    "lchown": 94,
    "sysinfo": 99,
    "ptrace": 101,
    "syslog": 103,
    "setuid": 105,
    "setgid": 106,
    "getppid": 110,
    "setreuid": 113,
    "setregid": 114,
    "setgroups": 116,
    "setresuid": 117,
    "setresgid": 119,
    "setfsuid": 122,
    "setfsgid": 123,
    "capset": 126,
    "utime": 132,
    "uselib": 134,
    "personality": 135,
    "statfs": 137,
    "setpriority": 141,
    "sched_setparam": 142,
    "sched_setscheduler": 144,
    "vhangup": 153,
    "modify_ldt": 154,
    "pivot_root": 155,
    "chroot": 161,
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
    "setxattr": 188,
    "lsetxattr": 189,
    "fsetxattr": 190,
    "removexattr": 197,
    "lremovexattr": 198,
    "fremovexattr": 199,
    "sched_setaffinity": 203,
    "lookup_dcookie": 212,
    "utimes": 235,
    "kexec_load": 246,
    "add_key": 248,
    "request_key": 249,
    "keyctl": 250,
    "ioprio_set": 251,
    "openat": 257,
    "fchownat": 260,
    "futimesat": 261,
    "fchmodat": 268,
    "unshare": 272,
    "utimensat": 280,
    "accept4": 288,
    "epoll_create1": 291,
    "perf_event_open": 298,
    "prlimit64": 302,
    "name_to_handle_at": 303,
    "open_by_handle_at": 304,
    "setns": 308,
    "process_vm_readv": 310,
    "process_vm_writev": 311,
    "kcmp": 312,
    "finit_module": 313,
    "sched_setattr": 314,
    "seccomp": 317,
    "getrandom": 318,
    "kexec_file_load": 320,
    "bpf": 321,
    "execveat": 322,
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
    "fchmodat2": 452,
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

# Who setpriority(2) and ioprio_set(2) address: the process `who`, else its
# process group or every process of a user (a uid the front-ends share).
PRIO_PROCESS = 0
IOPRIO_WHO_PROCESS = 1

SOCK_STREAM = 1
SOCK_SEQPACKET = 5
# socket(2)'s type argument: the type in the low bits, SOCK_NONBLOCK and
# SOCK_CLOEXEC above them.
SOCK_TYPE_MASK = 0xF

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
_ALU_AND_K = 0x04 | 0x50 | 0x00
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

#: A front-end's syscalls beside DENIED_SYSCALLS (build_frontend_filter):
#: what the process that parses a tenant's clients' bytes never needs. The
#: front-ends of every tenant share one uid, so what the kernel lets a
#: process do to another of its uid is denied when it names another process.
FRONTEND_DENIED: tuple[DeniedGroup, ...] = (
    DeniedGroup(
        "outbound",
        "a front-end never connects: it accepts on its listening socket and talks "
        "over the socketpair it inherited",
        ("connect",),
        denied=(Call("connect", (-1, 0, 0)),),
        allowed=(Call("accept4", (-1, 0, 0, 0)),),
    ),
    DeniedGroup(
        "exec",
        "a front-end runs no program: it stays the interpreter it was started as",
        ("execve", "execveat"),
        denied=(Call("execve", (_NOWHERE, 0, 0)), Call("execveat", (-1, _NOWHERE, 0, 0, 0))),
        allowed=(Call("getpid"),),
    ),
    DeniedGroup(
        "identity",
        "a front-end never changes its identity, capabilities or root directory",
        (
            "setuid",
            "setgid",
            "setreuid",
            "setregid",
            "setresuid",
            "setresgid",
            "setgroups",
            "setfsuid",
            "setfsgid",
            "capset",
            "chroot",
        ),
        # -1 leaves an id as it is, or is an invalid one (EINVAL).
        denied=(
            Call("setuid", (-1,)),
            Call("setgid", (-1,)),
            Call("setreuid", (-1, -1)),
            Call("setregid", (-1, -1)),
            Call("setresuid", (-1, -1, -1)),
            Call("setresgid", (-1, -1, -1)),
            Call("setgroups", (-1, 0)),
            Call("setfsuid", (-1,)),
            Call("setfsgid", (-1,)),
            Call("capset", (0, 0)),
            Call("chroot", (_NOWHERE,)),
        ),
        allowed=(Call("getppid"),),
    ),
    DeniedGroup(
        "metadata",
        "a front-end changes no file's mode, owner, times or extended attributes "
        "(landlock does not cover them; its socket gets its mode from the umask)",
        (
            "chmod",
            "fchmod",
            "fchmodat",
            "fchmodat2",
            "chown",
            "fchown",
            "lchown",
            "fchownat",
            "utime",
            "utimes",
            "futimesat",
            "utimensat",
            "setxattr",
            "lsetxattr",
            "fsetxattr",
            "removexattr",
            "lremovexattr",
            "fremovexattr",
        ),
        denied=(
            Call("chmod", (_NOWHERE, 0)),
            Call("fchmod", (-1, 0)),
            Call("fchmodat", (-1, _NOWHERE, 0)),
            Call("chown", (_NOWHERE, 0, 0)),
            Call("fchown", (-1, 0, 0)),
            Call("lchown", (_NOWHERE, 0, 0)),
            Call("fchownat", (-1, _NOWHERE, 0, 0, 0)),
            Call("utimensat", (-1, _NOWHERE, 0, 0)),
            Call("setxattr", (_NOWHERE, _NOWHERE, 0, 0, 0)),
            Call("fremovexattr", (-1, _NOWHERE)),
        ),
        allowed=(Call("getpid"),),
    ),
    DeniedGroup(
        "other_processes",
        "the limits, priority or scheduling of another process, its process group "
        "or every process of its uid (another tenant's front-end): only its own",
        (
            "prlimit64",
            "setpriority",
            "ioprio_set",
            "sched_setaffinity",
            "sched_setscheduler",
            "sched_setparam",
            "sched_setattr",
        ),
        denied=(
            Call("prlimit64", (_NO_PID, 7, 0, 0)),  # RLIMIT_NOFILE, nothing set
            Call("setpriority", (PRIO_PROCESS, _NO_PID, 0)),
            Call("ioprio_set", (IOPRIO_WHO_PROCESS, _NO_PID, 0)),
            Call("sched_setaffinity", (_NO_PID, 0, 0)),
            Call("sched_setscheduler", (_NO_PID, 0, 0)),
            Call("sched_setparam", (_NO_PID, 0)),
            Call("sched_setattr", (_NO_PID, 0, 0)),
        ),
        allowed=(Call("prlimit64", (0, 7, 0, 0)),),
    ),
)

#: Syscalls the filter inspects arguments of, instead of denying outright:
#: the label of their check.
_ARG_CHECKED = {
    "clone": "clone",
    "personality": "personality",
    "ioctl": "ioctl",
    # build_frontend_filter's: pid 0 (the caller) only.
    "prlimit64": "self_arg0",
    "sched_setaffinity": "self_arg0",
    "sched_setscheduler": "self_arg0",
    "sched_setparam": "self_arg0",
    "sched_setattr": "self_arg0",
    "setpriority": "setpriority",
    "ioprio_set": "ioprio_set",
}
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
        prog.jeq(TIOCLINUX, jt="eperm", jf="allow")

    # pid_t, int `which` and `who`: the kernel truncates them to 32 bits.
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
