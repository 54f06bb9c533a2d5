"""The job ledger: spawns whose process.exec has no process.exit (a crash, a
SIGKILL of the daemon) are found at the next start, across rotated files,
and closed with outcome DAEMON_SHUTDOWN."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

from audit_helpers import SettingsFactory, exec_fields, exit_fields
from hostcap_proto.audit import verify_files
from hostcapd.audit import AuditLog
from hostcapd.audit.files import rotated_files


def records(path: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in path.read_bytes().splitlines()]


async def test_open_spawns_are_execs_without_exits_and_close_orphans_ends_them(
    make_settings: SettingsFactory,
) -> None:
    s = make_settings()
    log = AuditLog.open(s, "boot-1")
    for spawn in ("a", "b", "c"):
        await log.write_durable("process.exec", **exec_fields(spawn, pid=100))
    log.write("process.exit", **exit_fields("b"))
    assert [r["spawn_id"] for r in log.open_spawns()] == ["a", "c"]
    await log.close()  # the daemon "crashes": a and c never exit

    log = AuditLog.open(s, "boot-2")
    assert [r["spawn_id"] for r in log.open_spawns()] == ["a", "c"]
    assert log.open_spawns()[0]["argv"] == ["git", "status", "--short"]
    assert log.close_orphans("hostcapd restarted; the spawn's fate is unknown") == 2
    assert log.open_spawns() == []
    await log.close()

    exits = [r for r in records(s.path) if r["event"] == "process.exit"]
    closed = {r["spawn_id"]: r for r in exits if r["outcome"] == "DAEMON_SHUTDOWN"}
    assert set(closed) == {"a", "c"}
    assert closed["a"]["request_id"] == "req-a"
    assert closed["a"]["labels"] == {"session": "s1", "tool_call_id": "call-a"}
    assert closed["a"]["message"] == "hostcapd restarted; the spawn's fate is unknown"
    assert verify_files([s.path]).ok
    # closed orphans stay closed
    log = AuditLog.open(s, "boot-3")
    assert log.open_spawns() == []
    await log.close()


async def test_an_exec_in_a_rotated_file_is_still_found(make_settings: SettingsFactory) -> None:
    s = make_settings(max_bytes=4096, keep_files=50)
    log = AuditLog.open(s, "boot-1")
    await log.write_durable("process.exec", **exec_fields("long-running"))
    for i in range(30):
        await log.write_durable("process.exec", **exec_fields(f"s{i}"))
        log.write("process.exit", **exit_fields(f"s{i}"))
    await log.close()
    assert len(rotated_files(s.path)) >= 3

    log = AuditLog.open(s, "boot-2")
    (orphan,) = log.open_spawns()
    assert orphan["spawn_id"] == "long-running"
    assert orphan["event"] == "process.exec"  # the full record, read from its rotated file
    assert log.close_orphans("restart") == 1
    await log.close()
    assert verify_files([*rotated_files(s.path), s.path]).ok


async def test_a_pruned_exec_is_still_closed_from_the_rotation_summary(
    make_settings: SettingsFactory,
) -> None:
    s = make_settings(max_bytes=4096, keep_files=1)
    log = AuditLog.open(s, "boot-1")
    await log.write_durable("process.exec", **exec_fields("long-running"))
    for i in range(30):
        await log.write_durable("process.exec", **exec_fields(f"s{i}"))
        log.write("process.exit", **exit_fields(f"s{i}"))
    await log.close()
    log = AuditLog.open(s, "boot-2")
    (orphan,) = log.open_spawns()
    assert orphan["spawn_id"] == "long-running"
    assert orphan["tenant"] == "dev" and orphan["request_id"] == "req-long-running"
    assert orphan["exec_seq"] == 1  # the summary the audit.rotate header carried
    assert log.close_orphans("restart") == 1
    await log.close()


_KILLED_MID_SPAWN = textwrap.dedent(
    """
    import asyncio, sys, time
    from pathlib import Path
    sys.path.insert(0, sys.argv[2])
    from audit_helpers import exec_fields
    from hostcapd.config import AuditSettings
    from hostcapd.audit import AuditLog

    async def main():
        settings = AuditSettings(path=Path(sys.argv[1]), group=None, journal="off")
        log = AuditLog.open(settings, "doomed")
        await log.write_durable("process.exec", **exec_fields("in-flight"))
        log.write("daemon.reload", version="x")  # batched, may or may not be on disk
        print("exec durable", flush=True)
        time.sleep(600)  # the spawn runs; the daemon is SIGKILLed

    asyncio.run(main())
    """
)


async def test_sigkill_mid_spawn_leaves_the_exec_and_the_next_start_closes_it(
    make_settings: SettingsFactory,
) -> None:
    s = make_settings()
    s.path.parent.mkdir(parents=True)
    child = subprocess.Popen(
        [sys.executable, "-c", _KILLED_MID_SPAWN, str(s.path), str(Path(__file__).parent)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "exec durable"
    finally:
        os.kill(child.pid, signal.SIGKILL)
        child.wait(timeout=30)
    log = AuditLog.open(s, "next")
    assert [r["spawn_id"] for r in log.open_spawns()] == ["in-flight"]
    assert log.close_orphans("hostcapd was killed") == 1
    await log.close()
    assert verify_files([s.path]).ok
    last = records(s.path)[-1]
    assert (last["event"], last["outcome"]) == ("process.exit", "DAEMON_SHUTDOWN")
