"""Issue 29's cloaks of the audited argv, tried against the real daemon: a
command hidden behind a secret-shaped assignment (``API_TOKEN=1; ...``) and
one pushed out of the record by 4,096 blanks. Each ran; its exec record must
show the payload (or flag what it hid), and carry the digest of the argv that
ran, which `hostcapctl audit verify-argv` checks."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from escape_attempts import SecurityHost
from hostcap_proto.audit import REDACTED, argv_sha256
from support.daemon import audit_records
from support.process import Client, outcome

REPO = Path(__file__).resolve().parents[2]
PAYLOAD = "echo payload; touch cloak-ran"
CLOAKS = {
    "secret-assignment": ["sh", "-c", f"API_TOKEN=1; {PAYLOAD}"],
    "padding": ["sh", "-c", " " * 4096 + PAYLOAD],
}


def exec_record(host: SecurityHost, spawn_id: str) -> dict[str, Any]:
    for record in audit_records(host.daemon.audit_path):
        if record["event"] == "process.exec" and record["spawn_id"] == spawn_id:
            return record
    raise AssertionError(f"no process.exec for spawn {spawn_id}")


def verify_argv(
    host: SecurityHost, spawn_id: str, argv: list[str]
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "hostcap.ctl.main", "audit", "verify-argv",
         "--file", str(host.daemon.audit_path), "--spawn", spawn_id, "--", *argv],
        capture_output=True, text=True, timeout=60, cwd=REPO,
    )  # fmt: skip


@pytest.mark.parametrize("name", sorted(CLOAKS))
async def test_a_cloaked_command_is_seen_and_proved_in_its_exec_record(
    name: str, alpha: Client, host: SecurityHost
) -> None:
    argv = CLOAKS[name]
    marker = host.workspace("alpha") / "cloak-ran"
    marker.unlink(missing_ok=True)
    result = await alpha.run(*argv)
    assert (outcome(result), result.exited.exit_code) == ("EXITED", 0)
    assert result.stdout == b"payload\n" and marker.exists()  # the payload did run
    record = exec_record(host, result.started.spawn_id)
    script = record["argv"][2]
    assert PAYLOAD in script, f"the payload is not in the record: {script[-200:]!r}"
    if name == "secret-assignment":
        assert script == f"API_TOKEN={REDACTED}; {PAYLOAD}"
        assert record["argv_redacted"] is True
    else:
        assert record["argv_truncated"] is True and record["argc"] == 3
    assert record["argv_sha256"] == argv_sha256(argv)
    proved = verify_argv(host, result.started.spawn_id, argv)
    assert proved.returncode == 0 and proved.stdout.startswith("OK"), proved.stdout + proved.stderr
    # Another argv, with the same record, does not pass for the one that ran.
    innocent = [*argv[:2], argv[2].replace(PAYLOAD, "echo payload")]
    refuted = verify_argv(host, result.started.spawn_id, innocent)
    assert refuted.returncode == 1 and refuted.stdout.startswith("FAIL"), refuted.stdout
    marker.unlink()


async def test_the_record_of_a_plain_argv_flags_nothing(alpha: Client, host: SecurityHost) -> None:
    result = await alpha.run("sh", "-c", "echo hi")
    record = exec_record(host, result.started.spawn_id)
    assert record["argv"] == ["sh", "-c", "echo hi"]
    assert (record["argv_redacted"], record["argv_truncated"]) == (False, False)
    assert record["argv_sha256"] == argv_sha256(["sh", "-c", "echo hi"])
    assert json.dumps(record).count("payload") == 0
