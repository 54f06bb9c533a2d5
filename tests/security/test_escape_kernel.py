"""Sandboxed programs reach for the kernel's dangerous doors: ptrace, user
namespaces, mounts, modules, io_uring, bpf and the rest of seccomp's deny
list, and 32-bit syscalls. Each attempt is the real call with valid
arguments; where the host itself (unsandboxed, as the same uid) could make
the call, a control shows it, so the refusal is the sandbox's doing."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest
from escape_attempts import PRELUDE, SecurityHost, as_nobody, attack, host_sleeper
from support.process import Client, outcome

PTRACE_ATTACH, PTRACE_SEIZE, PTRACE_TRACEME = 16, 0x4206, 0


@pytest.mark.parametrize("tenant", ["alpha", "layers"])
async def test_ptrace_is_refused(tenant: str, alpha: Client, layers: Client) -> None:
    client = {"alpha": alpha, "layers": layers}[tenant]
    with host_sleeper() as sleeper:
        found = await attack(
            client,
            f"""
import subprocess
child = subprocess.Popen(["sleep", "30"])
iov = (ctypes.c_char * 8)()
class Iovec(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]
local, remote = Iovec(ctypes.addressof(iov), 8), Iovec(0x400000, 8)
report(attach_child=sys_("ptrace", {PTRACE_ATTACH}, child.pid, 0, 0),
       seize_child=sys_("ptrace", {PTRACE_SEIZE}, child.pid, 0, 0),
       traceme=sys_("ptrace", {PTRACE_TRACEME}, 0, 0, 0),
       attach_host=sys_("ptrace", {PTRACE_ATTACH}, {sleeper.pid}, 0, 0),
       read_child_memory=sys_("process_vm_readv", child.pid, ctypes.addressof(local), 1,
                              ctypes.addressof(remote), 1, 0),
       write_child_memory=attempt(lambda: open(f"/proc/{{child.pid}}/mem", "r+b")))
child.kill()
""",
        )
        assert sleeper.poll() is None
    # seccomp's deny list: EPERM for every tracing call, whatever the target.
    # Writing through /proc/<pid>/mem (code injection without ptrace) meets
    # landlock: the sandbox's /proc is read-only, the host's not granted at all.
    assert found.pop("write_child_memory") == "EACCES"
    assert found == dict.fromkeys(found, "EPERM")


def test_host_control_nobody_may_trace_its_own_child() -> None:
    """Without the sandbox, the same uid can attach to its child (no yama
    here), so the EPERM above is the sandbox's."""
    code = (
        "import ctypes, os, subprocess; libc = ctypes.CDLL(None, use_errno=True); "
        "c = subprocess.Popen(['sleep', '30']); "
        f"r = libc.ptrace({PTRACE_ATTACH}, c.pid, 0, 0); e = ctypes.get_errno(); "
        "r == 0 and os.waitpid(c.pid, 0); "  # the attach stops it: collect that stop
        "c.kill(); c.wait(); print(r, e)"
    )
    assert as_nobody("/usr/bin/python3", "-I", "-c", code).stdout.split()[0] == "0"


async def test_user_namespace_cannot_be_created(alpha: Client) -> None:
    # Control: the kernel lets this uid create one unsandboxed.
    assert as_nobody("unshare", "-U", "true").returncode == 0
    shell = await alpha.run("sh", "-c", "unshare -U true; echo $?; unshare -Ur id; echo $?")
    assert shell.stdout.split(b"\n")[0] != b"0" and b"uid=0" not in shell.stdout
    found = await attack(
        alpha,
        """
CLONE_NEWUSER, CLONE_NEWNS = 0x10000000, 0x00020000
def fork_in_new_userns():
    pid = libc.syscall(56, CLONE_NEWUSER | 17, 0, 0, 0, 0)  # clone(flags | SIGCHLD)
    if pid == 0:
        os._exit(0)
    if pid < 0:
        raise OSError(ctypes.get_errno(), "clone")
    os.waitpid(pid, 0)
report(unshare_user=sys_("unshare", CLONE_NEWUSER),
       unshare_mount=sys_("unshare", CLONE_NEWNS),
       clone_user=attempt(fork_in_new_userns),
       clone3=sys_("clone3", 0, 0),
       setns=sys_("setns", os.open("/proc/self/ns/user", os.O_RDONLY), 0))
""",
    )
    # clone3 is ENOSYS so libc falls back to clone, whose flags the filter reads.
    assert found.pop("clone3") == "ENOSYS"
    assert found == dict.fromkeys(found, "EPERM")


async def test_nothing_can_be_mounted(alpha: Client) -> None:
    shell = await alpha.run("sh", "-c", "mkdir -p /tmp/m && mount -t tmpfs none /tmp/m; echo $?")
    assert shell.stdout.strip() != b"0"
    found = await attack(
        alpha,
        """
os.makedirs("/tmp/m", exist_ok=True)
report(mount_tmpfs=sys_("mount", b"none", b"/tmp/m", b"tmpfs", 0, 0),
       bind_etc=sys_("mount", b"/etc", b"/tmp/m", 0, 4096, 0),
       remount_root=sys_("mount", b"none", b"/", 0, 32 | 4096, 0),
       fsopen=sys_("fsopen", b"tmpfs", 0),
       open_tree=sys_("open_tree", -100, b"/etc", 1),
       mounted=[line.split()[1] for line in open("/proc/self/mounts")].count("/tmp/m"))
""",
    )
    assert found.pop("mounted") == 0
    assert found == dict.fromkeys(found, "EPERM")


async def test_no_kernel_module_can_be_loaded_or_removed(alpha: Client) -> None:
    modules = Path("/lib/modules")
    image = next(iter(modules.rglob("*.ko*")), None) if modules.is_dir() else None
    target = str(image) if image else "/usr/bin/true"
    found = await attack(
        alpha,
        f"""
fd = os.open({target!r}, os.O_RDONLY)
report(finit_module=sys_("finit_module", fd, b"", 0),
       init_module=sys_("init_module", 0, 0, b""),
       delete_module=sys_("delete_module", b"ext4", 0),
       kexec_load=sys_("kexec_load", 0, 0, 0, 0))
""",
    )
    assert found == dict.fromkeys(found, "EPERM")


async def test_io_uring_and_bpf_are_refused(alpha: Client) -> None:
    probe = """
params = (ctypes.c_char * 120)()
attr = (ctypes.c_char * 72)()
ctypes.memmove(attr, (ctypes.c_uint32 * 4)(2, 4, 4, 1), 16)  # BPF_MAP_TYPE_ARRAY, 4-byte key/value, 1 entry
report(io_uring_setup=sys_("io_uring_setup", 8, ctypes.addressof(params)),
       bpf_map_create=sys_("bpf", 0, ctypes.addressof(attr), 72),
       perf_event_open=sys_("perf_event_open", 0, 0, -1, -1, 0),
       userfaultfd=sys_("userfaultfd", 0),
       keyctl=sys_("keyctl", 0, -3, 0, 0, 0),
       pidfd_getfd=sys_("pidfd_getfd", -1, 0, 0))
"""
    # Control: unsandboxed, the same uid sets up an io_uring (the kernel
    # allows it here), so the sandbox's EPERM is the filter's.
    host = as_nobody("/usr/bin/python3", "-I", "-c", PRELUDE + probe)
    assert host.returncode == 0, host.stderr
    assert '"io_uring_setup": "ok"' in host.stdout
    found = await attack(alpha, probe)
    assert found == dict.fromkeys(found, "EPERM")


@pytest.fixture(scope="module")
def int80_program(host: SecurityHost) -> Path:
    """A static x86-64 program that makes a 32-bit syscall (int $0x80)."""
    if shutil.which("gcc") is None:
        pytest.skip("gcc is needed to build the 32-bit-syscall attempt")
    source = (
        "int main(void) { long r; "
        '__asm__ volatile ("int $0x80" : "=a"(r) : "a"(20L) : "memory"); '  # i386 getpid
        "return r > 0 ? 0 : 1; }\n"
    )
    out = host.workspace("alpha") / "int80"
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "int80.c").write_text(source)
        subprocess.run(["gcc", "-O0", "-o", str(out), str(Path(tmp) / "int80.c")], check=True)
    out.chmod(0o755)
    return out


async def test_32_bit_syscalls_kill_the_process(alpha: Client, int80_program: Path) -> None:
    # Control: unsandboxed, the 32-bit getpid works and the program exits 0.
    assert as_nobody(str(int80_program)).returncode == 0
    result = await alpha.run("sh", "-c", f"exec {int80_program}")
    assert outcome(result) == "SIGNALED"
    assert result.exited.signal_name == "SIGSYS"
