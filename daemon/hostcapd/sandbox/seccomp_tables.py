"""The seccomp deny lists, as tables with examples (the Codex execpolicy
habit: each group carries a call the filter denies and one it lets through,
run by tests/unit/sandbox/test_sandbox_seccomp.py): `DENIED_SYSCALLS` for
every sandboxed child, `FRONTEND_DENIED` added for a tenant front-end.
sandbox/seccomp.py compiles them."""

from __future__ import annotations

import errno
from dataclasses import dataclass

from hostcapd.sandbox.x86_64 import (
    ADDR_NO_RANDOMIZE,
    CLONE_NEWNET,
    CLONE_NEWUSER,
    CLONE_SIGHAND,
    IOPRIO_WHO_PROCESS,
    PER_LINUX,
    PER_LINUX32,
    PERSONALITY_QUERY,
    PRIO_PROCESS,
    TIOCGWINSZ,
    TIOCLINUX,
    TIOCSETD,
    TIOCSTI,
)

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
        "TIOCSTI / TIOCLINUX push input into a terminal outside the sandbox; "
        "TIOCSETD swaps a terminal's line discipline (kernel code a module may bring)",
        ("ioctl",),
        denied=(
            Call("ioctl", (-1, TIOCSTI, 0)),
            Call("ioctl", (-1, TIOCLINUX, 0)),
            Call("ioctl", (-1, TIOCSETD, 0)),
        ),
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
#: The one address length a front-end may connect() with: its gRPC server's
#: abstract name in its own network namespace, sa_family_t + "\0h"
#: (`hostcapd.frontend.peers.INNER_ADDRLEN`). A pathname that short is two
#: characters: a name in its bind directory (chdir is denied), or "/" and one
#: character (decision 0033).
FRONTEND_CONNECT_ADDRLEN = 4

FRONTEND_DENIED: tuple[DeniedGroup, ...] = (
    DeniedGroup(
        "outbound",
        "a front-end connects only to its own gRPC server (an abstract socket in its "
        "own network namespace, of one address length); it accepts on its listening "
        "socket and talks to the root side over the socketpair it inherited",
        ("connect",),
        denied=(Call("connect", (-1, 0, 0)), Call("connect", (-1, 0, 110))),
        allowed=(
            Call("accept4", (-1, 0, 0, 0)),
            Call("connect", (-1, 0, FRONTEND_CONNECT_ADDRLEN)),
        ),
    ),
    DeniedGroup(
        "cwd",
        "a front-end stays in its bind directory, where a relative socket name resolves",
        ("chdir", "fchdir"),
        denied=(Call("chdir", (_NOWHERE,)), Call("fchdir", (-1,))),
        allowed=(Call("getcwd", (0, 0)),),
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
    # build_frontend_filter's: the address length of its own gRPC server only.
    "connect": "connect_len",
}
#: Checked by the tenant's socket policy (not in DENIED_SYSCALLS).
_SOCKET_CALLS = ("socket", "socketpair")
