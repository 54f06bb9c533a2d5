"""The egress proxy's own confinement, tried from inside: a process confined
as the proxy is (`Confinement(egress_ports=...)`) connects to its rules'
ports, and is refused every other TCP port (landlock), exec and identity
changes (seccomp), and any file beyond the interpreter and the resolver's.
So a proxy taken over by the bytes it parses still cannot reach a port no
rule names, nor run a program."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys

import pytest

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the identity change needs root")

PROBE = r"""
import json, os, socket, sys
from hostcapd.frontend.confine import Confinement, confine, interpreter_paths
from hostcapd.egress.proxy import preload
allowed, other = int(sys.argv[1]), int(sys.argv[2])
preload()  # as the proxy does before it confines itself
confine(Confinement("", interpreter_paths(), os.getppid(), uid=65534, gid=65534,
                    egress_ports=(allowed,)))
out = {}
def attempt(name, call):
    try:
        call()
        out[name] = "ok"
    except OSError as error:
        out[name] = error.errno
attempt("allowed_port", lambda: socket.create_connection(("127.0.0.1", allowed), timeout=5).close())
attempt("other_port", lambda: socket.create_connection(("127.0.0.1", other), timeout=5).close())
attempt("exec", lambda: os.execv("/bin/true", ["true"]))
attempt("read_shadow", lambda: open("/etc/shadow", "rb").read())
attempt("read_hosts", lambda: open("/etc/hosts", "rb").read())
attempt("setuid", lambda: os.setuid(0))
print(json.dumps(out))
"""


def test_a_confined_proxy_reaches_only_its_rules_ports_and_runs_nothing() -> None:
    listeners = [socket.create_server(("127.0.0.1", 0)) for _ in range(2)]
    try:
        allowed, other = (s.getsockname()[1] for s in listeners)
        proc = subprocess.run(
            [sys.executable, "-I", "-c", PROBE, str(allowed), str(other)],
            capture_output=True, timeout=60, cwd="/",
        )  # fmt: skip
    finally:
        for s in listeners:
            s.close()
    assert proc.returncode == 0, proc.stderr.decode()
    result = json.loads(proc.stdout)
    assert result["allowed_port"] == "ok"
    assert result["other_port"] == 13  # EACCES: landlock, no rule names the port
    assert result["exec"] in (1, 13)  # EPERM (seccomp) or EACCES
    assert result["read_shadow"] == 13
    assert result["read_hosts"] == "ok"  # the resolver's files stay readable
    assert result["setuid"] == 1
