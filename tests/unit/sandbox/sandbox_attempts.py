"""Run a tiny Python child that applies a mechanism to itself
and then attempts things, reporting each outcome ("ok" or an errno name).

These unit tests may fork: they are not the gRPC daemon. Imported by the
tests of this folder as `sandbox_attempts`."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from typing import Any

import pytest
from support.childplans import bare_plan

#: The child: optional set-up (namespaces, mounts, late landlock rules), then
#: landlock and/or seccomp applied to itself, then the attempts.
CHILD = r"""
import ctypes, errno, json, os, socket, sys
import prctl
from hostcapd.sandbox import landlock

spec = json.loads(sys.argv[1])
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long

def check(rc, what):
    if rc != 0:
        raise OSError(ctypes.get_errno(), what)

def c(arg):
    return ctypes.c_char_p(arg.encode()) if isinstance(arg, str) else arg

for op in spec.get("setup", []):
    kind = op[0]
    if kind == "unshare":
        check(libc.unshare(op[1]), "unshare")
    elif kind == "mount":
        check(libc.mount(c(op[1]), c(op[2]), c(op[3]), ctypes.c_ulong(op[4]), c(op[5])), "mount")
    elif kind == "rule":
        landlock.add_path_rule(spec["ruleset_fd"], op[1], op[2])
if "ruleset_fd" in spec:
    prctl.set_no_new_privs(1)
    check(libc.syscall(446, spec["ruleset_fd"], 0), "landlock_restrict_self")

def attempt(op, arg):
    try:
        if op == "read":
            with open(arg, "rb") as f:
                f.read(1)
        elif op == "write":
            with open(arg, "wb") as f:
                f.write(b"x")
        elif op == "list":
            os.listdir(arg)
        elif op == "mkdir":
            os.mkdir(arg)
        elif op == "truncate":
            os.truncate(arg, 0)
        elif op == "exec":
            pid = os.posix_spawn(arg, [arg], {})
            _, status = os.waitpid(pid, 0)
            return "ok" if status == 0 else f"status {status}"
        elif op == "connect":
            # No create_connection: its getaddrinfo imports an encoding lazily.
            with socket.socket() as s:
                s.settimeout(5)
                s.connect(("127.0.0.1", arg))
        elif op == "bind":
            with socket.socket() as s:
                s.bind(("127.0.0.1", 0))
        elif op == "signal":
            os.kill(arg, 0)
        elif op == "abstract":
            with socket.socket(socket.AF_UNIX) as s:
                s.connect("\0" + arg)
        return "ok"
    except OSError as error:
        return errno.errorcode.get(error.errno, str(error.errno))

print(json.dumps([attempt(op, arg) for op, arg in spec["attempts"]]))
"""


def run_child(spec: dict[str, Any], pass_fds: tuple[int, ...] = ()) -> list[str]:
    """Run CHILD with `spec`; returns one outcome per attempt."""
    done = subprocess.run(
        [sys.executable, "-c", CHILD, json.dumps(spec)],
        pass_fds=pass_fds,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    outcomes: list[str] = json.loads(done.stdout)
    return outcomes


def require_root() -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root (namespaces, mounts, cgroups)")


#: The seccomp child: a new session (no controlling terminal, so vhangup and
#: TIOCSTI have nothing to hit), optionally a private mount namespace, the
#: filter loaded onto itself, then each call made in a forked child of its
#: own so one call's effect (a persona, a namespace) cannot colour the next.
SECCOMP_CHILD = r"""
import ctypes, errno, json, os, subprocess, sys, threading
import prctl
spec = json.loads(sys.argv[1])
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
os.setsid()

def check(rc, what):
    if rc != 0:
        raise OSError(ctypes.get_errno(), what)

if spec.get("private_mounts"):
    check(libc.unshare(0x00020000), "unshare")
    check(libc.mount(None, b"/", None, ctypes.c_ulong((1 << 14) | (1 << 18)), None), "mount")

class SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

if spec.get("filter"):
    program = bytes.fromhex(spec["filter"])
    buf = ctypes.create_string_buffer(program, len(program))
    fprog = SockFprog(len(program) // 8, ctypes.addressof(buf))
    prctl.set_no_new_privs(1)
    check(libc.syscall(317, 1, 0, ctypes.byref(fprog)), "seccomp")

def arg(a):
    return ctypes.c_char_p(a.encode("latin-1")) if isinstance(a, str) else ctypes.c_long(a)

def call(nr, args):
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        rc = libc.syscall(ctypes.c_long(nr), *[arg(a) for a in args])
        err = ctypes.get_errno()
        os.write(w, ("ok" if rc >= 0 else errno.errorcode.get(err, str(err))).encode())
        os._exit(0)
    os.close(w)
    out = os.read(r, 100).decode()
    os.close(r)
    _, status = os.waitpid(pid, 0)
    if not out:
        out = f"signal {os.WTERMSIG(status)}" if os.WIFSIGNALED(status) else f"status {status}"
    return out

if spec.get("exec"):
    os.execv(spec["exec"][0], spec["exec"])

results = [call(nr, args) for nr, args in spec.get("calls", [])]
if spec.get("workload"):
    seen = []
    t = threading.Thread(target=lambda: seen.append("thread"))
    t.start()
    t.join()
    out = subprocess.run(["/bin/sh", "-c", "echo piped | cat"], capture_output=True, text=True)
    seen.append(out.stdout.strip())
    pid = os.fork()
    if pid == 0:
        os._exit(7)
    seen.append(f"fork {os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])}")
    results.append(" ".join(seen))
print(json.dumps(results))
"""


def run_seccomp_child(spec: dict[str, Any]) -> subprocess.CompletedProcess[str]:
    """Run SECCOMP_CHILD with `spec` ("filter": hex, "calls": [[nr, args]], ...)."""
    return subprocess.run(
        [sys.executable, "-c", SECCOMP_CHILD, json.dumps(spec)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


#: A child that joins a cgroup itself (writes "0" into each cgroup.procs fd it
#: is given), says "placed", then does what `mode` says.
CGROUP_CHILD = r"""
import os, signal, sys, time
fds, mode = [int(fd) for fd in sys.argv[1].split(",") if fd], sys.argv[2]
for fd in fds:
    os.write(fd, b"0")
    os.close(fd)
print("placed", flush=True)
if mode == "allocate":
    data = b"\x01" * int(sys.argv[3])  # every page touched
    print("allocated", len(data), flush=True)
elif mode == "forkbomb":
    while True:
        try:
            os.fork()
        except OSError:
            time.sleep(0.01)
elif mode == "tree":
    # An orphaned grandchild in its own session (setsid + double fork) and a
    # process that ignores SIGTERM; "tree" once all three are running.
    first = os.fork()
    if first == 0:
        os.setsid()
        if os.fork() == 0:
            time.sleep(600)
        os._exit(0)
    os.waitpid(first, 0)
    if os.fork() == 0:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        time.sleep(600)
    print("tree", flush=True)
    time.sleep(600)
else:
    time.sleep(600)
"""


def start_in_cgroup(fds: list[int], mode: str, *args: str) -> subprocess.Popen[str]:
    """Start CGROUP_CHILD; returns once it has joined the cgroup."""
    child = subprocess.Popen(
        [sys.executable, "-c", CGROUP_CHILD, ",".join(map(str, fds)), mode, *args],
        pass_fds=tuple(fds),
        stdout=subprocess.PIPE,
        text=True,
    )
    for fd in fds:
        os.close(fd)
    assert child.stdout is not None
    assert child.stdout.readline() == "placed\n"
    return child


def run_through_setup(argv: list[bytes], **plan: Any) -> tuple[int, str]:
    """Run `argv` through the C child set-up (hostcapd.childsetup.spawn) with
    `plan` over a do-nothing default; returns (exit code, stdout + stderr)."""
    from hostcapd import childsetup

    exe = os.open(argv[0], os.O_RDONLY | os.O_CLOEXEC)
    out_r, out_w = os.pipe()
    settings = bare_plan(exe_fd=exe, argv=argv, stdio=(0, out_w, out_w), no_new_privs=True)
    try:
        pid, _ = childsetup.spawn(dataclasses.replace(settings, **plan))
    finally:
        os.close(exe)
        os.close(out_w)
    with os.fdopen(out_r) as out:
        text = out.read()
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status), text
