"""Helpers of the ops tests: the service manager's notify socket, hostcapctl,
clients run as another uid, and waiting for a condition with a deadline."""

from __future__ import annotations

import json
import os
import select
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from support.daemon import REPO, Daemon, audit_records, connectable

#: A generous correctness deadline (never a timing assertion).
DEADLINE_S = 30.0


def wait_until(condition: Callable[[], bool], what: str, timeout: float = DEADLINE_S) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout:g} s: {what}")
        time.sleep(0.02)


def wait_admin(daemon: Daemon) -> Daemon:
    """The support helper waits for the tenant sockets; the admin socket is
    served right after them."""
    wait_until(lambda: connectable(daemon.admin_socket), f"{daemon.admin_socket} serves")
    return daemon


class NotifySocket:
    """What systemd is to a Type=notify service: a datagram socket whose path
    goes into the daemon's $NOTIFY_SOCKET; it records every message."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC)
        self.sock.bind(str(path))
        self.messages: list[str] = []

    def _receive(self, timeout: float) -> bool:
        ready, _, _ = select.select([self.sock], [], [], timeout)
        if not ready:
            return False
        self.messages.append(self.sock.recv(8192).decode())
        return True

    def wait_for(
        self, predicate: Callable[[str], bool], what: str, timeout: float = DEADLINE_S
    ) -> str:
        """The first message (received so far or from now on) that satisfies
        `predicate`, consuming nothing."""
        deadline = time.monotonic() + timeout
        seen = 0
        while True:
            for message in self.messages[seen:]:
                if predicate(message):
                    return message
            seen = len(self.messages)
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"no {what} within {timeout:g} s; got {self.messages}")
            self._receive(left)

    def wait_after(
        self, index: int, predicate: Callable[[str], bool], what: str, timeout: float = DEADLINE_S
    ) -> int:
        """The index of the first message after `index` satisfying `predicate`."""
        deadline = time.monotonic() + timeout
        position = index + 1
        while True:
            while position < len(self.messages):
                if predicate(self.messages[position]):
                    return position
                position += 1
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"no {what} within {timeout:g} s; got {self.messages}")
            self._receive(left)

    def drain(self) -> None:
        while self._receive(0):
            pass

    def close(self) -> None:
        self.sock.close()


def assignments(message: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in message.split("\n") if "=" in line)


def hostcapctl(
    *args: str, admin: Path | None = None, tenant: Path | None = None, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "hostcap.ctl.main"]
    if admin is not None:
        argv += ["--admin-socket", str(admin)]
    if tenant is not None:
        argv += ["--socket", str(tenant)]
    return subprocess.run(
        [*argv, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=REPO,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": os.environ.get("PYTHONPATH", "")},
    )


#: Run as another identity: drop to it for real (setgroups, setgid, setuid),
#: then try to connect to the socket; print what happened as JSON.
_CONNECT_AS = """
import errno, json, os, socket, sys
uid, gid, groups, path = int(sys.argv[1]), int(sys.argv[2]), json.loads(sys.argv[3]), sys.argv[4]
os.setgroups(groups)
os.setgid(gid)
os.setuid(uid)
assert os.getuid() == uid and os.geteuid() == uid
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
try:
    s.connect(path)
    result = {"connected": True}
except OSError as e:
    result = {"connected": False, "errno": errno.errorcode.get(e.errno, str(e.errno))}
result["uid"] = os.getuid()
print(json.dumps(result))
"""


def connect_as(uid: int, gid: int, groups: list[int], path: Path) -> dict[str, Any]:
    """Try to connect to the Unix socket at `path` as uid/gid/groups."""
    proc = subprocess.run(
        [sys.executable, "-c", _CONNECT_AS, str(uid), str(gid), json.dumps(groups), str(path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    result: dict[str, Any] = json.loads(proc.stdout)
    return result


def hostcapctl_as(
    uid: int, gid: int, groups: list[int], *args: str
) -> subprocess.CompletedProcess[str]:
    """hostcapctl run by another identity (os.setuid in the child before exec)."""
    # Imports first, as root (the interpreter may live where nobody cannot
    # read); the identity is dropped before hostcapctl opens any socket.
    code = (
        "import json, os, sys\n"
        "from hostcap.ctl import main\n"
        "main.build_parser()\n"
        "os.setgroups(json.loads(sys.argv[3])); os.setgid(int(sys.argv[2])); os.setuid(int(sys.argv[1]))\n"
        "sys.exit(main.main(sys.argv[4:]))\n"
    )
    return subprocess.run(
        [sys.executable, "-c", code, str(uid), str(gid), json.dumps(groups), *args],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
    )


def reload_records(daemon: Daemon) -> list[dict[str, Any]]:
    return [r for r in audit_records(daemon.audit_path) if r["event"] == "daemon.reload"]


def sighup_reload(daemon: Daemon) -> dict[str, Any]:
    """Send SIGHUP and return the daemon.reload record it produced."""
    before = len(reload_records(daemon))
    assert daemon.proc is not None
    daemon.proc.send_signal(signal.SIGHUP)
    wait_until(lambda: len(reload_records(daemon)) > before, "a daemon.reload record")
    return reload_records(daemon)[before]


def launch(daemon: Daemon) -> Daemon:
    """Start hostcapd like `Daemon.start`, but return at once: the caller
    waits for what it means to observe (a notification, a socket)."""
    daemon.write_config()
    env = {"PATH": "/usr/bin:/bin", **daemon.env}
    daemon.log = open(daemon.state / "daemon.log", "ab")  # noqa: SIM115
    daemon.proc = subprocess.Popen(
        [sys.executable, "-m", "hostcapd", "serve", "--config", str(daemon.config_path)],
        env=env,
        stdout=daemon.log,
        stderr=daemon.log,
        cwd=REPO,
    )
    return daemon
