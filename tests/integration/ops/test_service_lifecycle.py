"""The service lifecycle against a real daemon: sd_notify readiness, status,
watchdog, reload and stop messages on a socket the test provides (as systemd
would), SIGTERM draining, and NOTIFY_SOCKET never reaching a child."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import psutil
from hostcap_proto.v1 import common_pb2
from ops_support import (
    DEADLINE_S,
    NotifySocket,
    assignments,
    hostcapctl,
    reload_records,
    wait_admin,
    wait_until,
)
from support.daemon import (
    REPO,
    Daemon,
    audit_records,
    children_of,
    cmdline,
    connectable,
    environ,
    processes_with,
)
from support.process import Client, request


def test_ready_comes_once_every_socket_serves(
    launch_daemon: Callable[..., Daemon], notify: NotifySocket
) -> None:
    daemon = launch_daemon(
        tenants={"dev": {}, "ci": {}, "docs": {}}, env={"NOTIFY_SOCKET": str(notify.path)}
    )
    notify.wait_for(lambda m: "READY=1" in m.split("\n"), "READY=1")
    # At READY every socket already answers: nothing here waits or retries.
    sockets = [daemon.socket_of(t) for t in ("dev", "ci", "docs")] + [daemon.admin_socket]
    assert [connectable(s) for s in sockets] == [True] * 4
    status = notify.wait_for(lambda m: m.startswith("STATUS="), "STATUS=")
    assert assignments(status)["STATUS"] == "serving 3 tenant(s): ci, dev, docs"
    assert daemon.stop() == 0
    notify.wait_for(lambda m: m == "STOPPING=1", "STOPPING=1")


def test_a_failed_start_says_why_and_never_reports_ready(
    launch_daemon: Callable[..., Daemon], notify: NotifySocket
) -> None:
    daemon = launch_daemon(
        tenants={"dev": {"sandbox": {"simulate_unavailable": ["landlock"]}}},
        env={"NOTIFY_SOCKET": str(notify.path)},
    )
    assert daemon.proc is not None
    assert daemon.proc.wait(DEADLINE_S) == 2
    status = notify.wait_for(lambda m: m.startswith("STATUS="), "STATUS=")
    assert "start-up failed" in status and "landlock" in status
    notify.drain()
    assert "READY=1" not in notify.messages


def test_watchdog_pings_when_the_manager_asks(
    launch_daemon: Callable[..., Daemon], notify: NotifySocket
) -> None:
    launch_daemon(env={"NOTIFY_SOCKET": str(notify.path), "WATCHDOG_USEC": "200000"})
    first = notify.wait_after(-1, lambda m: m == "WATCHDOG=1", "a first WATCHDOG=1")
    second = notify.wait_after(first, lambda m: m == "WATCHDOG=1", "a second WATCHDOG=1")
    notify.wait_after(second, lambda m: m == "WATCHDOG=1", "a third WATCHDOG=1")


def test_no_watchdog_pings_meant_for_another_process(
    launch_daemon: Callable[..., Daemon], notify: NotifySocket
) -> None:
    # WATCHDOG_PID names the process the manager watches; inherited by another, it is not ours.
    daemon = launch_daemon(
        env={
            "NOTIFY_SOCKET": str(notify.path),
            "WATCHDOG_USEC": "200000",
            "WATCHDOG_PID": str(os.getpid()),
        }
    )
    notify.wait_for(lambda m: "READY=1" in m.split("\n"), "READY=1")
    wait_admin(daemon)
    # The watchdog task starts at READY and pings before it first sleeps; a
    # reload, started later by a signal, reports after it: had the daemon
    # pinged, the ping would be in by the time RELOADING=1 is.
    daemon.proc.send_signal(signal.SIGHUP)  # type: ignore[union-attr]
    notify.wait_for(lambda m: m.startswith("RELOADING=1"), "RELOADING=1")
    notify.drain()
    assert "WATCHDOG=1" not in notify.messages


def test_sighup_sends_reloading_then_ready(
    launch_daemon: Callable[..., Daemon], notify: NotifySocket
) -> None:
    daemon = launch_daemon(env={"NOTIFY_SOCKET": str(notify.path)})
    ready = notify.wait_after(-1, lambda m: m == "READY=1", "READY=1")
    before_usec = time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000
    assert daemon.proc is not None
    daemon.proc.send_signal(signal.SIGHUP)
    reloading = notify.wait_after(ready, lambda m: m.startswith("RELOADING=1"), "RELOADING=1")
    fields = assignments(notify.messages[reloading])
    # MONOTONIC_USEC is the daemon's CLOCK_MONOTONIC when the reload began (systemd's check).
    assert before_usec <= int(fields["MONOTONIC_USEC"])
    assert int(fields["MONOTONIC_USEC"]) <= time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000
    notify.wait_after(reloading, lambda m: m == "READY=1", "READY=1 after the reload")
    wait_until(lambda: len(reload_records(daemon)) == 1, "the reload is audited")
    assert reload_records(daemon)[0]["message"] == "no change"


async def test_sigterm_drains_running_spawns_and_removes_the_sockets(
    start_daemon: Callable[..., Daemon], notify: NotifySocket, marker: str
) -> None:
    daemon = wait_admin(start_daemon(env={"NOTIFY_SOCKET": str(notify.path)}))
    client = Client(daemon.socket)
    try:
        call = client.stub.Spawn(
            request(["sh", "-c", "setsid sleep 1000 & sleep 1000"], env={"TEST_MARKER": marker})
        )
        async for event in call:
            assert event.WhichOneof("event") == "started"
            spawn_id = event.started.spawn_id
            break
        wait_until(lambda: len(processes_with(marker)) >= 2, "the tree is up")
        assert daemon.proc is not None
        daemon.proc.send_signal(signal.SIGTERM)
        events = [e async for e in call]
        exited = events[-1].exited
        assert common_pb2.Outcome.Name(exited.outcome) == "DAEMON_SHUTDOWN"
        assert daemon.proc.wait(DEADLINE_S) == 0
    finally:
        await client.close()
    notify.wait_for(lambda m: m == "STOPPING=1", "STOPPING=1")
    assert processes_with(marker) == []
    records = list(audit_records(daemon.audit_path))
    exits = [r for r in records if r["event"] == "process.exit" and r["spawn_id"] == spawn_id]
    assert [r["outcome"] for r in exits] == ["DAEMON_SHUTDOWN"]
    assert records[-1]["event"] == "daemon.stop"
    run_dir = daemon.socket.parent
    assert sorted(p.name for p in run_dir.iterdir()) == []  # tenant, admin and temporary sockets
    # New connections are refused once it has gone.
    assert not connectable(daemon.socket)


async def test_notify_socket_never_reaches_a_child_or_a_helper_process(
    start_daemon: Callable[..., Daemon], notify: NotifySocket
) -> None:
    daemon = wait_admin(start_daemon(env={"NOTIFY_SOCKET": str(notify.path)}))
    notify.wait_for(lambda m: m == "READY=1", "READY=1")
    client = Client(daemon.socket)
    try:
        result = await client.run("sh", "-c", "env; cat /proc/self/environ")
        assert result.exited.exit_code == 0
        assert b"NOTIFY_SOCKET" not in result.stdout
        assert str(notify.path).encode() not in result.stdout
    finally:
        await client.close()
    helpers = children_of(daemon.pid)
    names = [cmdline(pid) for pid in helpers]
    assert any(b"hostcapd.spawner" in n for n in names), names
    assert any(b"hostcapd.fs" in n for n in names), names
    for pid in helpers:
        assert b"NOTIFY_SOCKET" not in environ(pid), cmdline(pid)


def test_dev_mode_notifies_and_reloads_its_embedded_config(
    tmp_path: Path, notify: NotifySocket
) -> None:
    state = tmp_path / "dev-state"
    log = open(tmp_path / "dev.log", "wb")  # noqa: SIM115
    proc = subprocess.Popen(
        [sys.executable, "-m", "hostcapd", "serve", "--dev", "--state-dir", str(state)],
        env={"PATH": "/usr/bin:/bin", "NOTIFY_SOCKET": str(notify.path)},
        stdout=log,
        stderr=log,
        cwd=REPO,
    )
    try:
        ready = notify.wait_after(-1, lambda m: m == "READY=1", "READY=1 in --dev")
        admin = state / "run" / "admin.sock"
        assert hostcapctl("health", admin=admin).returncode == 0
        # `make run` shows the split: each socket's front-end, not root.
        banner = (tmp_path / "dev.log").read_text()
        served = re.findall(
            r"served by an unprivileged front-end: pid (\d+), \S+ \(uid (\d+)", banner
        )
        assert len(served) == 2, banner  # the dev tenant's socket and the admin socket
        for pid, uid in served:
            uids = psutil.Process(int(pid)).uids()
            assert uids.real == uids.effective == int(uid) != 0, uids
        proc.send_signal(signal.SIGHUP)
        reloading = notify.wait_after(ready, lambda m: m.startswith("RELOADING=1"), "RELOADING=1")
        notify.wait_after(reloading, lambda m: m == "READY=1", "READY=1 after the reload")
        audit = state / "log" / "audit.jsonl"
        wait_until(
            lambda: any(r["event"] == "daemon.reload" for r in audit_records(audit)),
            "the reload is audited",
        )
        (record,) = [r for r in audit_records(audit) if r["event"] == "daemon.reload"]
        assert (record["message"], record["added"], record["removed"], record["changed"]) == (
            "no change",
            [],
            [],
            [],
        )
        assert hostcapctl("reload", admin=admin).stdout == "reloaded: no tenant changed\n"
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(DEADLINE_S) == 0
        notify.wait_for(lambda m: m == "STOPPING=1", "STOPPING=1")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        log.close()
