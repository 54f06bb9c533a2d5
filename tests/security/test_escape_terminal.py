"""A terminal must not be a way out (issue 31, decision 0031). Sandboxed
programs, with a terminal of their own and without one, try to type into a
terminal (TIOCSTI, TIOCLINUX), to open the daemon's /dev/tty and a host
/dev/pts/N (made openable by DAC), and another tenant tries to write into a
session; a flood of WriteStdin must not grow the daemon's memory. Controls
show the same calls work unsandboxed, as the same uid, so each refusal is
the sandbox's."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
from collections.abc import Iterator
from typing import Any

import grpc
import psutil
import pytest
from escape_attempts import PRELUDE, SecurityHost, as_nobody, attack
from hostcap_proto.v1 import process_pb2
from support.interactive import Output, refusal, resize, start, write
from support.process import Client

TIOCLINUX = 0x541C

TERMINAL_ATTACK = """
import fcntl, termios
def ioctl(fd, request, arg):
    try:
        fcntl.ioctl(fd, request, arg)
        return "ok"
    except OSError as e:
        return name(e.errno)
def own_tty():
    fd = os.open("/dev/tty", os.O_RDWR | os.O_NOCTTY)
    same = os.tcgetpgrp(fd) == os.getpgrp() == os.tcgetpgrp(0)  # its own session's
    os.close(fd)
    if not same:
        raise OSError(errno.EXDEV, "a terminal not its own")
def new_pty():
    master = os.open("/dev/ptmx", os.O_RDWR | os.O_NOCTTY)
    fcntl.ioctl(master, 0x80045430, bytes(4))  # TIOCGPTN: it is a pty master
    os.close(master)
def host_pts(path):
    fd = os.open(path, os.O_RDWR | os.O_NOCTTY)
    if os.isatty(0) and os.fstat(fd).st_dev == os.fstat(0).st_dev:
        raise OSError(errno.EXDEV, "that name is a pty of its own devpts instance")
    os.write(fd, b"escaped")
    fcntl.ioctl(fd, termios.TIOCSTI, b"x")
report(
    own_tiocsti=ioctl(0, termios.TIOCSTI, b"x"),
    own_tioclinux=ioctl(0, %(tioclinux)d, bytes([2]) + bytes(16)),
    own_tiocsetd=ioctl(0, 0x5423, bytes(4)),  # TIOCSETD to N_TTY (0), the one it has
    dev_tty=attempt(own_tty),
    new_pty=attempt(new_pty),
    host_pts=attempt(host_pts, %(host_pts)r),
)
if os.isatty(0):
    input()
"""


@contextlib.contextmanager
def host_terminal() -> Iterator[tuple[int, str]]:
    """A pty of the host (its /dev/pts), its slave open to anyone by DAC."""
    master, slave = os.openpty()
    path = os.ttyname(slave)
    os.chmod(path, 0o666)
    try:
        yield master, path
    finally:
        os.close(slave)
        os.close(master)


def _last_report(data: bytes) -> dict[str, Any]:
    lines = [x for x in data.decode(errors="replace").splitlines() if x.startswith("{")]
    assert lines, data
    value: dict[str, Any] = json.loads(lines[-1])
    return value


def _nothing_arrived(master: int) -> bytes:
    os.set_blocking(master, False)
    try:
        return os.read(master, 4096)
    except (BlockingIOError, OSError):
        return b""


@pytest.mark.parametrize("tenant", ["alpha", "layers"])
@pytest.mark.parametrize("tty", [True, False], ids=["on-a-tty", "without-a-tty"])
async def test_terminal_attacks_fail(tenant: str, tty: bool, alpha: Client, layers: Client) -> None:
    client = {"alpha": alpha, "layers": layers}[tenant]
    with host_terminal() as (master, path):
        body = TERMINAL_ATTACK % {"tioclinux": TIOCLINUX, "host_pts": path}
        if tty:
            spawn_id = await start(client, "python3", "-I", "-c", PRELUDE + body, tty=(24, 80))
            out = Output(client, spawn_id)
            await out.until(rb"\{.*\}")
            found = _last_report(out.data)
            await write(client, spawn_id, b"\r")
            await out.ended()
        else:
            found = await attack(client, body)
        assert _nothing_arrived(master) == b""
    # seccomp refuses both ioctls (EPERM), on its own terminal as on any fd.
    assert found.pop("own_tiocsti") == "EPERM"
    assert found.pop("own_tioclinux") == "EPERM"
    # ... and a line discipline's change (this host autoloads their modules).
    assert found.pop("own_tiocsetd") == "EPERM"
    # The host's /dev/pts is not reachable: landlock (EACCES) without a tty;
    # with one, /dev/pts is the spawn's own instance, where that name is not
    # there or is a pty of its own (EXDEV); nothing reached the host's pty.
    assert found.pop("host_pts") in ({"ENOENT", "EXDEV"} if tty else {"EACCES"})
    # /dev/tty is the spawn's own terminal when it has one, else nothing
    # (landlock): no terminal of the daemon's is ever reachable. /dev/ptmx
    # makes a pty in the spawn's own devpts instance, for a tty spawn only.
    assert found.pop("dev_tty") == ("ok" if tty else "EACCES")
    assert found.pop("new_pty") == ("ok" if tty else "EACCES")
    assert found == {}


def test_host_control_the_same_calls_work_unsandboxed() -> None:
    """As the same uid, on the host: TIOCSTI into its own controlling
    terminal, TIOCSETD on it and opening the host pty all work; the refusals
    are the sandbox's."""
    with host_terminal() as (_, path):
        code = (
            "import fcntl, os, termios\n"
            "m, s = os.openpty()\n"
            "os.setsid()\n"
            "fcntl.ioctl(s, termios.TIOCSCTTY, 0)\n"
            "fcntl.ioctl(s, termios.TIOCSTI, b'x')\n"
            "fcntl.ioctl(s, 0x5423, bytes(4))\n"  # TIOCSETD: N_TTY again
            f"os.close(os.open({path!r}, os.O_RDWR | os.O_NOCTTY))\n"
            "print('ok')\n"
        )
        done = as_nobody("/usr/bin/python3", "-I", "-c", code)
    assert done.stdout.strip() == "ok", done.stderr


async def test_another_tenant_gets_not_found(alpha: Client, beta: Client) -> None:
    spawn_id = await start(alpha, "sh", "-c", "read a; echo got:$a", tty=(24, 80))
    assert await refusal(write(beta, spawn_id, b"stolen\r")) == "NOT_FOUND"
    assert await refusal(resize(beta, spawn_id, 10, 10)) == "NOT_FOUND"
    await write(alpha, spawn_id, b"mine\r")
    out = Output(alpha, spawn_id)
    await out.until(rb"got:mine")
    assert b"stolen" not in out.data


def _rss(pid: int) -> int:
    return int(psutil.Process(pid).memory_info().rss)


async def test_a_flood_of_writes_keeps_the_daemon_bounded(
    host: SecurityHost, alpha: Client
) -> None:
    """1000 concurrent writes of 64 KiB (64 MiB) into a spawn that never
    reads: the pipe fills, one write waits in it and a few behind it; the
    rest are refused at once (QUOTA_EXCEEDED), so the daemon's memory does
    not grow by what was sent."""
    spawn_id = await start(alpha, "sleep", "600")
    pid = host.daemon.pid
    before = _rss(pid)
    chunk = b"\xa5" * (64 * 1024)
    calls = [
        alpha.stub.WriteStdin(process_pb2.WriteStdinRequest(spawn_id=spawn_id, data=chunk))
        for _ in range(1000)
    ]
    peak = before
    results: list[str] = []

    async def finish(call: Any) -> None:
        try:
            await call
            results.append("ok")
        except grpc.aio.AioRpcError as error:
            results.append(error.code().name)

    tasks = [asyncio.ensure_future(finish(c)) for c in calls]
    # All but the few that wait in the pipe end at once: sample the daemon meanwhile.
    for _ in range(300):
        peak = max(peak, _rss(pid))
        if sum(not t.done() for t in tasks) <= 10:
            break
        await asyncio.sleep(0.05)
    peak = max(peak, _rss(pid))
    try:
        # 64 MiB were sent: the daemon held a few of them, not all.
        assert peak - before < 24 * 1024 * 1024, (before, peak)
        assert results.count("RESOURCE_EXHAUSTED") > 900, sorted(set(results))
    finally:
        await alpha.stub.Signal(process_pb2.SignalRequest(spawn_id=spawn_id, signal=9))
        await asyncio.gather(*tasks)
