"""The audit of interactive spawns (issue 31): each WriteStdin is a
process.input record, written before its bytes reach the command, in order
between the spawn's exec and exit records, its text redacted by the secret
rules of argv and cut to `[audit] input_text_bytes`; `hostcapctl audit query
--spawn ID` shows them so."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from support.daemon import Daemon
from support.interactive import Output, start, write
from support.process import Client

SECRET = "ghp_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8"


def query(source: list[str], spawn_id: str) -> list[dict[str, Any]]:
    """`hostcapctl [--admin-socket S] audit query [--file F] --spawn ID`."""
    admin = source if source[0] == "--admin-socket" else []
    files = [] if admin else source
    done = subprocess.run(
        [
            str(Path(sys.executable).parent / "hostcapctl"),
            *admin,
            "audit",
            "query",
            *files,
            "--spawn",
            spawn_id,
            "--format",
            "json",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    found: list[dict[str, Any]] = json.loads(done.stdout)
    return found


async def test_input_records_are_in_order_between_exec_and_exit_and_redacted(
    start_daemon: Callable[..., Daemon], state_dir: Path
) -> None:
    audit = {"path": str(state_dir / "log" / "audit.jsonl"), "group": "root", "journal": "off"}
    daemon = start_daemon(audit={**audit, "input_text_bytes": 64})
    client = Client(daemon.socket)
    try:
        spawn_id = await start(client, "sh", tty=(24, 80))
        typed = [
            b"echo first\r",
            f"export GH_TOKEN={SECRET}\r".encode(),
            b"echo " + b"x" * 200 + b"\r",
            b"exit\r",
        ]
        for line in typed:
            await write(client, spawn_id, line)
        await Output(client, spawn_id).ended()
    finally:
        await client.close()
    for source in (
        ["--file", str(daemon.audit_path)],
        ["--admin-socket", str(daemon.admin_socket)],
    ):
        records = query(source, spawn_id)
        events = [r["event"] for r in records]
        assert events == ["process.exec", *["process.input"] * 4, "process.exit"], events
        inputs = records[1:5]
        assert [r["index"] for r in inputs] == [1, 2, 3, 4]
        for record, data in zip(inputs, typed, strict=True):
            assert record["bytes"] == len(data)
            assert record["sha256"] == hashlib.sha256(data).hexdigest()
            assert record["tty"] is True
        assert inputs[0]["text"] == "echo first\r" and not inputs[0]["text_redacted"]
        assert SECRET not in json.dumps(records)
        assert inputs[1]["text_redacted"] and "GH_TOKEN=" in inputs[1]["text"]
        assert inputs[2]["text_truncated"] and len(inputs[2]["text"].encode()) == 64
        assert records[-1]["input_writes"] == 4
        assert records[-1]["input_bytes"] == sum(len(d) for d in typed)
        assert records[-1]["tty"] == {"rows": 24, "cols": 80}
