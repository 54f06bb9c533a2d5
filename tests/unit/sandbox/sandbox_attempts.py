"""Run a tiny Python child that applies a mechanism to itself
and then attempts things, reporting each outcome ("ok" or an errno name).

These unit tests may fork: they are not the gRPC daemon. Imported by the
tests of this folder as `sandbox_attempts`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

import pytest

#: The child: optional set-up (namespaces, mounts, late landlock rules), then
#: landlock and/or seccomp applied to itself, then the attempts.
CHILD = r"""
import ctypes, errno, json, os, socket, sys
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
    check(libc.prctl(38, 1, 0, 0, 0), "no_new_privs")
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
