"""Outcomes that say what happened (issue 13, part 3).

A spawn ended by a signal has no exit code, on the wire and in the audit
record; a cancel or a timeout carries the signal that ended the command;
rusage's max_rss is the command tree's own peak, not the spawner's size.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from typing import Any

from support.daemon import audit_records
from support.process import Client, outcome

MiB = 1024 * 1024


def exit_record(daemon: Any, spawn_id: str) -> dict[str, Any]:
    (record,) = [
        r
        for r in audit_records(daemon.audit_path)
        if r["event"] == "process.exit" and r["spawn_id"] == spawn_id
    ]
    return record


async def test_a_signaled_spawn_has_no_exit_code(client: Client, daemon: Any) -> None:
    result = await client.run("sh", "-c", "kill -KILL $$")
    assert outcome(result) == "SIGNALED"
    assert not result.exited.HasField("exit_code")
    assert (result.exited.signal, result.exited.signal_name) == (9, "SIGKILL")
    record = exit_record(daemon, result.started.spawn_id)
    assert "exit_code" not in record
    assert (record["signal"], record["signal_name"]) == (9, "SIGKILL")


async def test_an_exited_spawn_has_its_exit_code_even_zero(client: Client, daemon: Any) -> None:
    result = await client.run("true")
    assert result.exited.HasField("exit_code") and result.exited.exit_code == 0
    assert result.exited.signal == 0
    record = exit_record(daemon, result.started.spawn_id)
    assert (record["exit_code"], record["signal"]) == (0, 0)


async def test_a_timeout_record_carries_the_signal(client: Client, daemon: Any) -> None:
    result = await client.run("sleep", "30", limits={"wall_seconds": 0.3})
    assert (outcome(result), result.exited.signal) == ("TIMEOUT", signal.SIGTERM)
    assert not result.exited.HasField("exit_code")
    record = exit_record(daemon, result.started.spawn_id)
    assert (record["outcome"], record["signal"], record["signal_name"]) == (
        "TIMEOUT",
        15,
        "SIGTERM",
    )
    assert "exit_code" not in record


async def test_true_reports_its_own_small_peak(client: Client) -> None:
    # Not the spawner's size, which the command's process was cloned from.
    result = await client.run("/bin/true")
    assert outcome(result) == "EXITED"
    assert 0 < result.exited.rusage.max_rss_bytes < 8 * MiB, result.exited.rusage


async def test_records_name_the_kernel_boot_and_the_daemon_run(client: Client, daemon: Any) -> None:
    result = await client.run("true")
    record = exit_record(daemon, result.started.spawn_id)
    with open("/proc/sys/kernel/random/boot_id") as f:
        assert record["boot_id"] == f.read().strip()
    run_ids = {r.get("run_id") for r in audit_records(daemon.audit_path)}
    assert len(run_ids) == 1 and len(record["run_id"]) == 32


def test_hostcapctl_run_exits_128_plus_the_signal(daemon: Any) -> None:
    def ctl(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "hostcap.ctl.main", "--socket", str(daemon.socket), *args],
            capture_output=True,
            text=True,
            timeout=60,
        )

    assert ctl("run", "--", "sh", "-c", "kill -TERM $$").returncode == 128 + 15
    done = ctl("run", "--json", "--", "sh", "-c", "kill -TERM $$")
    data = json.loads(done.stdout)
    assert (data["outcome"], data["exit_code"], data["signal"]) == ("SIGNALED", None, "SIGTERM")
    assert ctl("run", "--", "sh", "-c", "exit 7").returncode == 7
