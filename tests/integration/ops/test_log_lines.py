"""The daemon's log as a line-based shipper and the journal read it: one
record per line in text and in JSON (the start-up banner and a rejected
reload included), tenant and spawn id as JSON fields, syslog priorities
when stderr is the journal, refusals logged at INFO and rate-limited per
tenant and reason, the stop logged with how many spawns it ended, and a bad
--log-level refused as a usage error."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from ops_support import hostcapctl, wait_admin, wait_until
from support.daemon import REPO, Daemon, daemon_config, tenant_config
from support.process import Client, request

STAMP = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z"
TEXT_RECORD = re.compile(rf"^{STAMP} hostcapd (DEBUG|INFO|WARNING|ERROR|CRITICAL) \S+: ")


@pytest.fixture
def started(state_dir: Path) -> Iterator[list[Daemon]]:
    daemons: list[Daemon] = []
    yield daemons
    for daemon in daemons:
        if daemon.proc is not None and daemon.proc.poll() is None:
            daemon.stop()


def start(
    started: list[Daemon],
    state: Path,
    *args: str,
    env: dict[str, str] | None = None,
    tenants: tuple[str, ...] = ("dev",),
) -> Daemon:
    config = daemon_config(state, {name: tenant_config(state, name) for name in tenants})
    daemon = Daemon(state, config, env=env or {}, args=list(args))
    started.append(daemon)
    return wait_admin(daemon.start())


def records(daemon: Daemon) -> list[dict[str, Any]]:
    """Every line of its stderr, each a JSON object (or the test fails)."""
    return [json.loads(line) for line in daemon.output().splitlines()]


def reject_a_reload(daemon: Daemon) -> None:
    """A config with two errors, on two lines of the rejection's message."""
    body = daemon.config_path.read_text()
    daemon.config_path.write_text(body.replace('"run_as_user"', '"run_as_usr"', 1) + "\n[bogus]\n")
    assert hostcapctl("reload", admin=daemon.admin_socket).returncode == 125
    wait_until(lambda: "reload rejected" in daemon.output(), "the rejection is logged")


def test_a_bad_log_level_is_a_usage_error_listing_the_levels() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "hostcapd", "serve", "--dev", "--log-level", "debg"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
    )
    assert done.returncode == 2, done
    assert "Traceback" not in done.stderr
    assert "usage: hostcapd serve" in done.stderr
    assert (
        "argument --log-level: invalid choice: 'DEBG' (choose from 'DEBUG', 'INFO', 'WARNING', "
        "'ERROR', 'CRITICAL')"
    ) in done.stderr


def test_every_text_record_is_one_line_the_banner_and_a_rejected_reload_too(
    started: list[Daemon], state_dir: Path
) -> None:
    daemon = start(started, state_dir, tenants=("alpha", "beta"))
    reject_a_reload(daemon)
    lines = daemon.output().splitlines()
    assert lines and all(TEXT_RECORD.match(line) for line in lines), lines
    (rejected,) = [line for line in lines if "reload rejected" in line]
    assert "run_as_usr: unknown key (did you mean 'run_as_user'?)" in rejected
    assert "bogus: unknown key" in rejected
    banner = [line for line in lines if "children run as" in line]
    assert len(banner) == 2 and all("protections applied:" in line for line in banner), banner


async def test_json_records_carry_tenant_and_spawn_id(
    started: list[Daemon], state_dir: Path
) -> None:
    daemon = start(started, state_dir, "--log-format", "json")
    client = Client(daemon.socket)
    try:
        call = client.stub.Spawn(request(["sleep", "1000"]))
        async for event in call:
            spawn_id: str = event.started.spawn_id
            break
        assert hostcapctl("kill", spawn_id, admin=daemon.admin_socket).returncode == 0
        assert await client.refusal("/no/such/program") == "EXECUTABLE_NOT_ALLOWED"
    finally:
        await client.close()
    reject_a_reload(daemon)
    wait_until(lambda: "refused EXECUTABLE_NOT_ALLOWED" in daemon.output(), "the refusal")
    found = records(daemon)
    assert all({"time", "level", "logger", "message"} <= r.keys() for r in found), found
    banner = [r for r in found if "children run as" in r["message"]]
    assert [r["tenant"] for r in banner] == ["dev"]
    (kill,) = [r for r in found if r["message"].startswith("admin kill of spawn")]
    assert (kill["tenant"], kill["spawn_id"]) == ("dev", spawn_id)
    (refusal,) = [r for r in found if r.get("reason") == "EXECUTABLE_NOT_ALLOWED"]
    assert (refusal["level"], refusal["tenant"], refusal["method"]) == ("INFO", "dev", "Run")
    (rejected,) = [r for r in found if "reload rejected" in r["message"]]
    assert rejected["level"] == "ERROR" and "run_as_usr" in rejected["message"]


async def test_refusals_are_logged_once_per_tenant_and_reason_in_a_while(
    started: list[Daemon], state_dir: Path
) -> None:
    daemon = start(started, state_dir, tenants=("alpha", "beta"))
    for tenant in ("alpha", "beta"):
        client = Client(daemon.socket_of(tenant))
        try:
            for _ in range(5):
                assert await client.refusal("/no/such/program") == "EXECUTABLE_NOT_ALLOWED"
            assert await client.refusal("true", env={"NOT_ALLOWED": "x"}) == "ENV_NOT_ALLOWED"
        finally:
            await client.close()
    wait_until(lambda: daemon.output().count(" refused ") >= 4, "the refusals are logged")
    lines = [line for line in daemon.output().splitlines() if " refused " in line]
    for tenant in ("alpha", "beta"):
        mine = [line for line in lines if f"tenant {tenant}: Run refused " in line]
        reasons = sorted(line.split(" refused ")[1].split(":")[0] for line in mine)
        # Five of one reason in a moment: one line; the other reason: its own.
        assert reasons == ["ENV_NOT_ALLOWED", "EXECUTABLE_NOT_ALLOWED"], mine
        assert all(" INFO hostcapd.service: " in line for line in mine), mine


def test_the_journal_gets_syslog_priorities(started: list[Daemon], state_dir: Path) -> None:
    state_dir.mkdir(parents=True, exist_ok=True)
    log = state_dir / "daemon.log"
    log.touch()
    st = os.stat(log)
    daemon = start(started, state_dir, env={"JOURNAL_STREAM": f"{st.st_dev}:{st.st_ino}"})
    reject_a_reload(daemon)
    lines = daemon.output().splitlines()
    assert all(re.match(r"^<[0-7]>hostcapd ", line) for line in lines), lines
    (rejected,) = [line for line in lines if "reload rejected" in line]
    assert rejected.startswith("<3>hostcapd ERROR hostcapd: reload rejected")
    assert any(line.startswith("<6>hostcapd INFO hostcapd: hostcapd ") for line in lines)


async def test_a_stop_is_logged_with_how_many_spawns_it_ended(
    started: list[Daemon], state_dir: Path
) -> None:
    daemon = start(started, state_dir, "--log-format", "json")
    client = Client(daemon.socket)
    calls = [client.stub.Spawn(request(["sleep", "1000"])) for _ in range(2)]
    for call in calls:
        async for _ in call:
            break
    assert daemon.stop() == 0
    await client.close()
    found = records(daemon)
    stopping = [r for r in found if r["message"].startswith("stopping: ")]
    stopped = [r for r in found if r["message"].startswith("stopped: ")]
    assert [r["spawns"] for r in stopping] == [2], found
    assert [r["message"] for r in stopped] == ["stopped: ended 2 spawn(s)"]
