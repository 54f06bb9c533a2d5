"""seccomp: a child under the filter attempts the syscalls it denies."""

from __future__ import annotations

import errno
import json
import os
import re
import shutil
import signal
import subprocess
from pathlib import Path

import pytest
from hostcapd.sandbox import seccomp
from sandbox_attempts import require_root, run_seccomp_child, run_through_setup

SUPPORT = seccomp.probe()
pytestmark = pytest.mark.skipif(not SUPPORT.available, reason=f"no seccomp: {SUPPORT.reason}")
FILTER = seccomp.build_filter()
NR = seccomp.X86_64_SYSCALLS
UNISTD_64 = Path("/usr/include/x86_64-linux-gnu/asm/unistd_64.h")


def _json_args(call: seccomp.Call) -> list[object]:
    return [a.decode("latin-1") if isinstance(a, bytes) else a for a in call.args]


def outcomes(
    calls: list[seccomp.Call], *, filtered: bool, private_mounts: bool = False
) -> list[str]:
    spec = {
        "filter": FILTER.hex() if filtered else "",
        "calls": [[NR[c.name], _json_args(c)] for c in calls],
        "private_mounts": private_mounts,
    }
    done = run_seccomp_child(spec)
    assert done.returncode == 0, done.stderr
    result: list[str] = json.loads(done.stdout)
    return result


def test_probe_says_the_filter_can_run() -> None:
    assert SUPPORT.available
    assert "syscalls" in SUPPORT.reason


def test_the_filter_is_a_sock_filter_array_built_the_same_every_time() -> None:
    assert len(FILTER) % 8 == 0
    assert 0 < len(FILTER) // 8 <= 4096
    assert seccomp.build_filter() == FILTER


def test_every_denied_syscall_has_a_number_and_an_example() -> None:
    named: list[str] = []
    for group in seccomp.DENIED_SYSCALLS:
        assert group.denied and group.allowed, group.name
        named += group.syscalls
        for call in (*group.denied, *group.allowed):
            assert call.name in NR, call
        # Every syscall of a group is shown denied by at least one example.
        assert {c.name for c in group.denied} == set(group.syscalls), group.name
    assert len(named) == len(set(named))
    required = {
        "ptrace",
        "process_vm_readv",
        "process_vm_writev",
        "bpf",
        "perf_event_open",
        "keyctl",
        "add_key",
        "request_key",
        "io_uring_setup",
        "io_uring_enter",
        "io_uring_register",
        "kexec_load",
        "kexec_file_load",
        "init_module",
        "finit_module",
        "delete_module",
        "mount",
        "umount2",
        "pivot_root",
        "unshare",
        "setns",
        "userfaultfd",
        "personality",
        "clone",
        "clone3",
        "open_tree",
        "move_mount",
        "fsopen",
        "fsmount",
        "fsconfig",
        "fspick",
        "mount_setattr",
        "swapon",
        "swapoff",
        "reboot",
        "acct",
        "quotactl",
        "lookup_dcookie",
        "syslog",
        "uselib",
        "iopl",
        "ioperm",
        "vhangup",
        "name_to_handle_at",
        "open_by_handle_at",
        "ioctl",
    }
    assert required <= set(named)


@pytest.mark.skipif(not UNISTD_64.exists(), reason="no kernel headers to compare against")
def test_syscall_numbers_match_the_kernel_headers() -> None:
    header = dict(re.findall(r"#define __NR_(\w+) (\d+)", UNISTD_64.read_text()))
    checked = [name for name in NR if name in header]
    assert len(checked) >= len(NR) - 2  # headers older than the running kernel miss the newest
    for name in checked:
        assert NR[name] == int(header[name]), name


@pytest.mark.parametrize("group", seccomp.DENIED_SYSCALLS, ids=lambda g: g.name)
def test_table_examples_are_denied_by_the_filter_and_only_by_it(
    group: seccomp.DeniedGroup,
) -> None:
    """Each denied example gets the group's errno under the filter and something
    else without it; each allowed example behaves the same with and without."""
    require_root()  # unfiltered, the examples must fail for reasons other than privilege
    calls = [*group.denied, *group.allowed]
    plain = outcomes(calls, filtered=False, private_mounts=True)
    under = outcomes(calls, filtered=True, private_mounts=True)
    code = errno.errorcode[group.errno]
    for call, before, after in zip(calls, plain, under, strict=True):
        if call in group.denied:
            assert after == code, f"{call} under the filter: {after}"
            assert before != code, f"{call} gives {code} even without the filter"
        else:
            assert after == before, f"{call}: {before} without the filter, {after} with it"


def test_attacks_after_set_up_fail() -> None:
    require_root()
    user_ns = seccomp.Call("unshare", (seccomp.CLONE_NEWUSER,))
    mount = seccomp.Call("mount", (b"tmpfs", b"/tmp", b"tmpfs", 0, 0))
    traceme = seccomp.Call("ptrace", (0, 0, 0, 0))  # PTRACE_TRACEME
    io_uring = seccomp.Call("io_uring_setup", (8, b"\0" * 120))
    bpf_map = seccomp.Call("bpf", (0, b"\0" * 72, 72))  # BPF_MAP_CREATE
    linux32 = seccomp.Call("personality", (seccomp.PER_LINUX32,))
    query = seccomp.Call("personality", (seccomp.PERSONALITY_QUERY,))
    calls = [user_ns, mount, traceme, io_uring, bpf_map, linux32, query]
    assert outcomes(calls, filtered=True, private_mounts=True) == ["EPERM"] * 6 + ["ok"]
    # Without the filter the same calls succeed (root, in a private mount namespace).
    assert outcomes([user_ns, mount, traceme], filtered=False, private_mounts=True) == ["ok"] * 3
    x32 = {"filter": FILTER.hex(), "calls": [[seccomp.X32_SYSCALL_BIT | NR["getpid"], []]]}
    done = run_seccomp_child(x32)
    assert json.loads(done.stdout) == ["EPERM"], done.stderr


def test_ordinary_programs_keep_working_under_the_filter() -> None:
    # Threads (clone3 -> ENOSYS -> clone), a pipeline of two processes, fork.
    done = run_seccomp_child({"filter": FILTER.hex(), "workload": True})
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == ["thread piped fork 7"]


INT80 = r"""
#include <stdio.h>
int main(void) {
    long ret;
    /* 20 is getpid in the i386 table; int 0x80 enters the 32-bit syscall path. */
    __asm__ volatile ("int $0x80" : "=a"(ret) : "a"(20L) : "memory");
    printf("%ld\n", ret);
    return 0;
}
"""


def test_a_32_bit_syscall_kills_the_process(tmp_path: Path) -> None:
    gcc = shutil.which("gcc")
    if gcc is None:
        pytest.skip("gcc is needed to build the int 0x80 program")
    source, program = tmp_path / "int80.c", tmp_path / "int80"
    source.write_text(INT80)
    subprocess.run(
        [gcc, "-O0", "-static", "-o", str(program), str(source)], check=True, capture_output=True
    )
    plain = subprocess.run([str(program)], capture_output=True, text=True, check=False)
    if plain.returncode != 0 or int(plain.stdout) <= 0:
        pytest.skip(f"this kernel has no 32-bit syscall entry (int 0x80 -> {plain.returncode})")
    done = run_seccomp_child({"filter": FILTER.hex(), "exec": [str(program)]})
    assert done.returncode == -signal.SIGSYS, (done.returncode, done.stdout)
    assert done.stdout == ""


def test_the_spawn_set_up_after_the_filter_still_runs() -> None:
    """The C set-up loads the filter, then close_range, poll and execveat: a
    spawn through it with this filter must exec."""
    require_root()
    cancel_r, cancel_w = os.pipe()
    try:
        code, text = run_through_setup(
            [b"/bin/sh", b"-c", b"echo ran; ls /proc/self/fd"],
            seccomp_filter=FILTER,
            cancel_fd=cancel_r,
        )
    finally:
        os.close(cancel_r)
        os.close(cancel_w)
    assert code == 0, text
    # Only stdio is left (3 is the directory ls reads): the exe and cancel fds closed.
    assert text.split() == ["ran", "0", "1", "2", "3"]
