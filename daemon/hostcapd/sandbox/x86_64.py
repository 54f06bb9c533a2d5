"""The x86_64 numbers the seccomp filter (sandbox/seccomp.py) and its tables
(sandbox/seccomp_tables.py) name: syscalls, the audit arch, and the argument
values its checks compare (clone flags, personas, ioctls, socket types)."""

from __future__ import annotations

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
    "getcwd": 79,
    "chdir": 80,
    "fchdir": 81,
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
#: Set a terminal's line discipline (which may load its kernel module).
TIOCSETD = 0x5423
TIOCGWINSZ = 0x5413


def syscall_name(number: int) -> str:
    """The name of an x86_64 syscall the filter names, else "syscall <n>"."""
    for name, nr in X86_64_SYSCALLS.items():
        if nr == number:
            return name
    return f"syscall {number}"
