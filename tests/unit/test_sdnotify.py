"""sd_notify: what the service manager receives, on a socket the test provides.

Each test binds a real AF_UNIX datagram socket (a path or an abstract name),
points $NOTIFY_SOCKET at it the way systemd does, and reads what arrives.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import struct
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from hostcapd import sdnotify
from hostcapd.sdnotify import NotifyError


@pytest.fixture(autouse=True)
def _clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    # The test run itself may be under a service manager.
    for name in ("NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def manager(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[socket.socket]:
    """A stand-in for systemd's notify socket at a file-system path."""
    path = tmp_path / "notify"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.bind(str(path))
        sock.settimeout(10)
        monkeypatch.setenv("NOTIFY_SOCKET", str(path))
        yield sock


@pytest.fixture
def abstract_manager(monkeypatch: pytest.MonkeyPatch) -> Iterator[socket.socket]:
    """The same at an abstract name, which $NOTIFY_SOCKET writes as @name."""
    name = f"hostcap-test-{uuid.uuid4().hex}"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.bind("\0" + name)
        sock.settimeout(10)
        monkeypatch.setenv("NOTIFY_SOCKET", "@" + name)
        yield sock


def received(sock: socket.socket) -> str:
    return sock.recv(65536).decode()


def nothing_waiting(sock: socket.socket) -> bool:
    sock.setblocking(False)
    try:
        sock.recv(65536)
    except BlockingIOError:
        return True
    return False


def test_ready_arrives_on_a_path_socket(manager: socket.socket) -> None:
    assert sdnotify.ready() is True
    assert received(manager) == "READY=1"


def test_stopping_arrives_on_an_abstract_socket(abstract_manager: socket.socket) -> None:
    assert sdnotify.stopping() is True
    assert received(abstract_manager) == "STOPPING=1"


def test_every_helper_sends_its_assignment(manager: socket.socket) -> None:
    sdnotify.ready()
    sdnotify.status("serving 2 tenants")
    sdnotify.stopping()
    sdnotify.notify("WATCHDOG=1")
    assert [received(manager) for _ in range(4)] == [
        "READY=1",
        "STATUS=serving 2 tenants",
        "STOPPING=1",
        "WATCHDOG=1",
    ]


def test_the_manager_can_authenticate_the_sender_as_this_process(manager: socket.socket) -> None:
    # NotifyAccess=main rests on the kernel-attached credentials: they must
    # name the process that called notify(), not a helper.
    manager.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
    sdnotify.ready()
    data, ancillary, _, _ = manager.recvmsg(4096, socket.CMSG_SPACE(12))
    assert data == b"READY=1"
    creds = [
        d
        for level, kind, d in ancillary
        if level == socket.SOL_SOCKET and kind == socket.SCM_CREDENTIALS
    ]
    assert len(creds) == 1
    pid, uid, gid = struct.unpack("iII", creds[0])
    assert (pid, uid, gid) == (os.getpid(), os.getuid(), os.getgid())


def test_reloading_carries_the_monotonic_time_of_the_reload(manager: socket.socket) -> None:
    before = time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000
    assert sdnotify.reloading() is True
    after = time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000
    lines = received(manager).split("\n")
    assert lines[0] == "RELOADING=1"
    key, _, value = lines[1].partition("=")
    assert key == "MONOTONIC_USEC"
    assert before <= int(value) <= after
    assert len(lines) == 2


def test_a_status_cannot_smuggle_in_another_assignment(manager: socket.socket) -> None:
    sdnotify.status("config rejected:\nREADY=1\n  tenants.x: bad")
    message = received(manager)
    assert "\n" not in message
    assert message == "STATUS=config rejected: READY=1 tenants.x: bad"


def test_a_long_status_is_cut_to_fit(manager: socket.socket) -> None:
    sdnotify.status("x" * 10_000)
    assert received(manager) == "STATUS=" + "x" * sdnotify.MAX_STATUS_CHARS


@pytest.mark.parametrize(
    "state",
    ["", "READY", "ready=1", "READY=1\n", "READY=1\nSTATUS", "STATUS=a\0b", "=1"],
)
def test_a_malformed_notification_is_refused_and_nothing_is_sent(
    manager: socket.socket, state: str
) -> None:
    with pytest.raises(NotifyError):
        sdnotify.notify(state)
    assert nothing_waiting(manager)


def test_an_oversized_notification_is_refused(manager: socket.socket) -> None:
    with pytest.raises(NotifyError, match="exceeds"):
        sdnotify.notify("X_HOSTCAP=" + "y" * sdnotify.MAX_MESSAGE_BYTES)
    assert nothing_waiting(manager)


def test_without_notify_socket_every_call_is_a_no_op() -> None:
    assert sdnotify.ready() is False
    assert sdnotify.status("anything") is False
    assert sdnotify.reloading() is False
    assert sdnotify.stopping() is False


def test_an_empty_notify_socket_counts_as_unset(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NOTIFY_SOCKET", "")
    assert sdnotify.ready() is False


@pytest.mark.parametrize("value", ["relative/notify", "vsock:2:1234", "notify"])
def test_an_unusable_notify_socket_address_is_a_typed_error(
    monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    monkeypatch.setenv("NOTIFY_SOCKET", value)
    with pytest.raises(NotifyError, match="NOTIFY_SOCKET"):
        sdnotify.ready()


def test_a_missing_manager_socket_is_a_typed_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("NOTIFY_SOCKET", str(tmp_path / "gone"))
    with pytest.raises(NotifyError, match="gone"):
        sdnotify.ready()


def test_watchdog_interval_is_read_from_watchdog_usec(monkeypatch: pytest.MonkeyPatch) -> None:
    assert sdnotify.watchdog_interval() is None
    monkeypatch.setenv("WATCHDOG_USEC", "30000000")
    assert sdnotify.watchdog_interval() == 30.0
    monkeypatch.setenv("WATCHDOG_PID", str(os.getpid()))
    assert sdnotify.watchdog_interval() == 30.0


def test_a_watchdog_meant_for_another_process_is_ignored(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WATCHDOG_USEC", "30000000")
    monkeypatch.setenv("WATCHDOG_PID", str(os.getppid()))
    assert sdnotify.watchdog_interval() is None


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("WATCHDOG_USEC", "0"),
        ("WATCHDOG_USEC", "-5"),
        ("WATCHDOG_USEC", "30s"),
        ("WATCHDOG_USEC", "²"),
        ("WATCHDOG_PID", "self"),
    ],
)
def test_a_garbled_watchdog_variable_is_a_typed_error(
    monkeypatch: pytest.MonkeyPatch, name: str, value: str
) -> None:
    monkeypatch.setenv("WATCHDOG_USEC", "30000000")
    monkeypatch.setenv(name, value)
    with pytest.raises(NotifyError, match=name):
        sdnotify.watchdog_interval()


async def receive(sock: socket.socket) -> str:
    loop = asyncio.get_running_loop()
    sock.setblocking(False)
    return (await loop.sock_recv(sock, 65536)).decode()


async def test_watchdog_loop_pings_until_cancelled(
    manager: socket.socket, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("WATCHDOG_USEC", "200000")
    task = asyncio.create_task(sdnotify.watchdog_loop())
    try:
        pings = [await asyncio.wait_for(receive(manager), 10) for _ in range(3)]
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    assert pings == ["WATCHDOG=1"] * 3
    assert task.cancelled()


async def test_watchdog_loop_returns_when_no_watchdog_is_asked_for(manager: socket.socket) -> None:
    await asyncio.wait_for(sdnotify.watchdog_loop(), 10)
    assert nothing_waiting(manager)


async def logged(caplog: pytest.LogCaptureFixture, text: str) -> None:
    while text not in caplog.text:
        await asyncio.sleep(0.01)


async def test_watchdog_loop_survives_a_manager_that_is_not_there_yet(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "late"
    monkeypatch.setenv("NOTIFY_SOCKET", str(path))
    monkeypatch.setenv("WATCHDOG_USEC", "100000")
    task = asyncio.create_task(sdnotify.watchdog_loop())
    try:
        # The first pings fail; the loop must log them and carry on.
        await asyncio.wait_for(logged(caplog, "watchdog ping not delivered"), 10)
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
            sock.bind(str(path))
            assert await asyncio.wait_for(receive(sock), 10) == "WATCHDOG=1"
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
