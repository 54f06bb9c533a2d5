"""Every record a real daemon writes is what the audit models would have made
of its fields: the writer's fast field check may skip pydantic, never its
answer. Spawns end every way they can here (exit codes, a signal, a
timeout, an output cap, a failed set-up, refusals, the daemon stopping)."""

from __future__ import annotations

import os
import signal
from typing import Any

from hostcap_proto.audit import (
    EVENT_FIELDS,
    HEADER_FIELDS,
    check_line,
    validate_event_fields_by_model,
    verify_files,
)
from hostcap_proto.v1 import process_pb2
from support.process import Client, outcome, request


async def killed(client: Client) -> process_pb2.RunResult:
    """A spawn ended by SIGKILL through the Signal call, as its RunResult."""
    call = client.stub.Spawn(request(["sleep", "1000"]))
    result = process_pb2.RunResult()
    async for event in call:
        kind = event.WhichOneof("event")
        if kind == "started":
            result.started.CopyFrom(event.started)
            await client.stub.Signal(
                process_pb2.SignalRequest(spawn_id=event.started.spawn_id, signal=signal.SIGKILL)
            )
        elif kind == "exited":
            result.exited.CopyFrom(event.exited)
    return result


async def test_every_record_the_daemon_writes_fits_the_models(client: Client, daemon: Any) -> None:
    locked = daemon.root() / "locked"
    locked.mkdir(mode=0o700)  # owned by root: the run-as user cannot enter it
    results = [
        await client.run("true", labels={"session": "s1", "tool_call_id": "t1"}),
        await client.run("sh", "-c", "echo héllo ✓; exit 3", request_id="req-fit"),
        await killed(client),
        await client.run("sleep", "30", limits={"wall_seconds": 1}),
        await client.run("seq", "1", "100000", limits={"output_bytes": 100}),
        await client.run("pwd", cwd="locked"),
        await client.run("env", "API_TOKEN=abc", "true", "--password", "hunter2"),
    ]
    assert [outcome(r) for r in results] == [
        "EXITED", "EXITED", "SIGNALED", "TIMEOUT", "EXITED", "SPAWN_FAILED", "EXITED",
    ]  # fmt: skip
    assert await client.refusal("no-such-command-xyz") == "EXECUTABLE_NOT_FOUND"
    assert await client.refusal("pwd", cwd="/etc") == "PATH_ESCAPES_ROOT"
    assert daemon.stop() == 0

    raw_lines = daemon.audit_path.read_bytes().split(b"\n")
    assert raw_lines[-1] == b""
    events = []
    for raw in raw_lines[:-1]:
        record = check_line(raw)  # canonical form, hash, header
        event = record["event"]
        events.append(event)
        assert event in EVENT_FIELDS, event
        fields = {k: v for k, v in record.items() if k not in HEADER_FIELDS}
        assert validate_event_fields_by_model(event, fields) == fields, record
    assert events.count("process.exec") == 7
    assert events.count("process.exit") == 7
    assert events.count("policy.deny") == 2
    assert {"daemon.start", "daemon.stop"} <= set(events)
    report = verify_files([daemon.audit_path])
    assert report.failure is None, report.failure
    assert os.path.getsize(daemon.audit_path) > 0
