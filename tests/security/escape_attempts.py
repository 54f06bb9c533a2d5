"""Sandboxed attack programs and the daemon they run under.

Every attempt in tests/security is a real program run through a real hostcapd
with the default (full) profile: a `python3 -I -c` program (or `sh -c`) that
tries the forbidden thing and prints what happened, one JSON object on its
last stdout line. Outcomes are "ok" or an errno name ("EACCES"), so a test
can tell *which* protection refused (landlock says EACCES, seccomp EPERM, a
missing namespace ESRCH or ECONNREFUSED) and a control in the same program
can show the attempt was able to succeed in principle.

`SecurityHost` is one daemon shared by the suite (start-up costs a second or
two; the attacks themselves take milliseconds). Its state and roots live
OUTSIDE /tmp on purpose: each spawn gets a private tmpfs /tmp, which would
hide anything beneath the host's /tmp and make an attempt fail for the wrong
reason. Beneath /var/tmp, as beneath /var/lib on a real install, the paths
are visible to the sandbox and only landlock, DAC and the identity drop stand
in the way.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hostcap_proto.v1 import process_pb2
from support.daemon import NOBODY, Daemon, daemon_config, tenant_config
from support.identity import as_user
from support.process import Client, outcome

#: Imported by every attack program: `attempt(fn, *args)` is "ok" or an errno
#: name; `sys_(name, *args)` makes a raw x86_64 syscall the same way.
PRELUDE = r"""
import ctypes, errno, json, os, socket, sys
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
NR = {"ptrace": 101, "mount": 165, "init_module": 175, "finit_module": 313,
      "delete_module": 176, "unshare": 272, "setns": 308, "bpf": 321,
      "io_uring_setup": 425, "perf_event_open": 298, "keyctl": 250,
      "userfaultfd": 323, "process_vm_readv": 310, "kexec_load": 246,
      "fsopen": 430, "open_tree": 428, "clone3": 435, "pidfd_getfd": 438}

def name(err):
    return errno.errorcode.get(err, str(err))

def attempt(fn, *args):
    try:
        fn(*args)
        return "ok"
    except OSError as e:
        return name(e.errno)

def sys_(call, *args):
    cargs = [ctypes.c_char_p(a) if isinstance(a, bytes) else ctypes.c_long(a) for a in args]
    rc = libc.syscall(NR[call], *cargs)
    if rc < 0:
        return name(ctypes.get_errno())
    if call in ("io_uring_setup", "bpf", "userfaultfd", "perf_event_open", "fsopen"):
        os.close(rc)
    return "ok"

def report(**results):
    print(json.dumps(results))
"""


def program(body: str) -> tuple[str, ...]:
    """argv running `body` (after the prelude) as an isolated python3."""
    return ("python3", "-I", "-c", PRELUDE + "\n" + body)


def results(result: process_pb2.RunResult) -> dict[str, Any]:
    """The JSON object an attack program reported (its last stdout line)."""
    lines = result.stdout.decode(errors="replace").strip().splitlines()
    assert lines, (
        f"the attack program reported nothing: {outcome(result)} {result.exited.message}\n"
        f"stderr: {result.stderr.decode(errors='replace')}"
    )
    value: dict[str, Any] = json.loads(lines[-1])
    return value


async def attack(client: Client, body: str, **kwargs: Any) -> dict[str, Any]:
    """Run an attack program that must itself exit 0; return what it reported."""
    result = await client.run(*program(body), **kwargs)
    assert (outcome(result), result.exited.exit_code) == ("EXITED", 0), (
        f"{outcome(result)}: {result.exited.message}\nstderr: {result.stderr.decode(errors='replace')}"
    )
    return results(result)


def as_nobody(*argv: str, **kwargs: Any) -> subprocess.CompletedProcess[str]:
    """Run argv on the host, unsandboxed, as the tenants' run-as identity: the
    control that shows what the same program could do without the sandbox."""
    return subprocess.run(
        as_user(NOBODY, NOBODY, argv),
        capture_output=True,
        text=True,
        timeout=30,
        cwd="/",
        env={"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"},
        **kwargs,
    )


#: A host process that reports the signals it catches (SIGCONT, SIGUSR1) on stdout.
SLEEPER = r"""
import signal, sys, time
def heard(sig, frame):
    print(signal.Signals(sig).name, flush=True)
for sig in (signal.SIGCONT, signal.SIGUSR1, signal.SIGTERM):
    signal.signal(sig, heard if sig != signal.SIGTERM else lambda *a: sys.exit(0))
print("ready", flush=True)
time.sleep(60)
"""


@contextlib.contextmanager
def host_sleeper() -> Iterator[subprocess.Popen[str]]:
    """A process outside the sandbox, running as the sandbox's own uid (so DAC
    alone would let the sandbox signal or trace it). Its stdout is "ready\n"
    plus the name of every signal it caught; SIGTERM ends it quietly."""
    proc = subprocess.Popen(
        as_user(NOBODY, NOBODY, ["/usr/bin/python3", "-I", "-c", SLEEPER]),
        stdout=subprocess.PIPE,
        text=True,
        cwd="/",
        start_new_session=True,  # its pid is a pgid
    )
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline()
        assert first == "ready\n", f"the host sleeper did not start: {first!r} (exit {proc.poll()})"
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()


#: The tenants of the shared daemon. alpha and beta run as the same uid, so
#: only the sandbox keeps one out of the other's roots. `layers` turns the
#: pid and net namespaces off, so the next layer (landlock's signal, socket
#: and TCP scoping, seccomp) is what the same attacks meet there.
TENANTS: dict[str, dict[str, Any]] = {
    "alpha": {},
    "beta": {},
    "layers": {"sandbox": {"pid_namespace": "off", "net_namespace": "off"}},
    #: No network sockets: AF_UNIX is the only family its children may create.
    "nonet": {"sandbox": {"network_sockets": False}},
}


@dataclass
class SecurityHost:
    """The shared daemon, its paths, and things planted outside the roots."""

    base: Path
    daemon: Daemon
    #: A world-writable directory and a world-writable file in it, outside every root.
    outside: Path = field(init=False)

    def __post_init__(self) -> None:
        self.outside = self.base / "outside"

    @property
    def state(self) -> Path:
        return self.daemon.state

    def workspace(self, tenant: str) -> Path:
        return self.daemon.root(tenant, 0)

    def reference(self, tenant: str) -> Path:
        return self.daemon.root(tenant, 1)

    def socket(self, tenant: str) -> Path:
        return self.daemon.socket_of(tenant)


def _plant(host: SecurityHost) -> None:
    host.outside.mkdir(mode=0o777)
    host.outside.chmod(0o777)  # DAC would let anyone write here: only the sandbox stops it
    victim = host.outside / "victim"
    victim.write_text("outside-original\n")
    victim.chmod(0o666)
    for tenant in TENANTS:
        secret = host.workspace(tenant) / "secret.txt"
        secret.write_text(f"{tenant}-private-canary\n")
        secret.chmod(0o644)
        os.chown(secret, NOBODY, NOBODY)
        # The read-only root is writable by DAC (owned by the run-as uid,
        # mode 0777): only the read-only tier is left to refuse a write.
        ref = host.reference(tenant)
        (ref / "doc.txt").write_text(f"{tenant}-reference\n")
        (ref / "doc.txt").chmod(0o666)
        os.chown(ref / "doc.txt", NOBODY, NOBODY)
        os.chown(ref, NOBODY, NOBODY)
        ref.chmod(0o777)


@contextlib.contextmanager
def security_host() -> Iterator[SecurityHost]:
    base = Path(tempfile.mkdtemp(prefix="hostcap-security-", dir="/var/tmp"))
    daemon: Daemon | None = None
    try:
        base.chmod(0o711)
        state = base / "state"
        state.mkdir(mode=0o711)
        config = daemon_config(
            state, {name: tenant_config(state, name, **over) for name, over in TENANTS.items()}
        )
        daemon = Daemon(state, config)
        daemon.write_config()  # creates the roots, so the plants can go in first
        host = SecurityHost(base, daemon)
        _plant(host)
        daemon.start()
        yield host
    finally:
        if daemon is not None and daemon.proc is not None and daemon.proc.poll() is None:
            daemon.stop()
        shutil.rmtree(base, ignore_errors=True)
