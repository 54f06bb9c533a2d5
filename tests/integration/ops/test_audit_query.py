"""`hostcapctl audit query` answers an operator's questions against a real
daemon's log: what ran, which failed, what was written; from the files and
over the admin socket alike."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import grpc
import pytest
from hostcap_proto.v1 import fs_pb2, fs_pb2_grpc
from ops_support import hostcapctl, wait_admin
from support.daemon import NOBODY, Daemon, audit_records
from support.process import Client, outcome


@pytest.fixture
async def history(daemon: Daemon) -> Daemon:
    """A log with a success, a non-zero exit, a timeout and a file write."""
    wait_admin(daemon)
    client = Client(daemon.socket)
    try:
        assert outcome(await client.run("true")) == "EXITED"
        failed = await client.run("sh", "-c", "exit 3")
        assert (outcome(failed), failed.exited.exit_code) == ("EXITED", 3)
        slow = await client.run("sleep", "30", limits={"wall_seconds": 0.5})
        assert outcome(slow) == "TIMEOUT"
    finally:
        await client.close()
    async with grpc.aio.insecure_channel(f"unix:{daemon.socket}") as channel:
        fs = fs_pb2_grpc.FsServiceStub(channel)  # type: ignore[no-untyped-call]
        await fs.WriteFile(
            fs_pb2.WriteFileRequest(path="notes/today.txt", data=b"hi", create_parents=True)
        )
    return daemon


def query(daemon: Daemon, *args: str, admin: bool = False) -> Any:
    """Both ways (files, admin socket) must agree; the JSON array."""
    files = [str(p) for p in sorted(daemon.audit_path.parent.glob("audit.jsonl*"))]
    by_file = hostcapctl(
        "audit", "query", *[a for f in files for a in ("--file", f)], *args, "--format", "json"
    )
    assert by_file.returncode == 0, by_file.stderr
    by_socket = hostcapctl("audit", "query", *args, "--format", "json", admin=daemon.admin_socket)
    assert by_socket.returncode == 0, by_socket.stderr
    assert json.loads(by_file.stdout) == json.loads(by_socket.stdout)
    return json.loads(by_file.stdout)


def test_failed_exits_carry_the_command_they_ended(history: Daemon) -> None:
    rows = query(history, "--tenant", "dev", "--failed")
    assert [(r["outcome"], r["command"]) for r in rows] == [
        ("EXITED", ["sh", "-c", "exit 3"]),
        ("TIMEOUT", ["sleep", "30"]),
    ]
    assert rows[0]["exit_code"] == 3
    table = hostcapctl("audit", "query", "--failed", admin=history.admin_socket)
    assert table.returncode == 0, table.stderr
    lines = table.stdout.splitlines()
    assert len(lines) == 3 and lines[0].startswith("TIME (UTC)")
    assert lines[1].endswith("<- sh -c 'exit 3'") and "exit=3" in lines[1]
    assert "TIMEOUT" in lines[2] and lines[2].endswith("<- sleep 30")


def test_exit_code_exe_and_uid(history: Daemon) -> None:
    assert [r["command"] for r in query(history, "--exit-code", "3")] == [["sh", "-c", "exit 3"]]
    # A timed-out program did not exit: it has no exit code to match.
    assert [r["command"] for r in query(history, "--exit-code", "0")] == [["true"]]
    sleeps = query(history, "--exe", "sleep")
    assert [r["event"] for r in sleeps] == ["process.exec", "process.exit"]
    assert sleeps[1]["outcome"] == "TIMEOUT"
    path = sleeps[0]["executable"]["path"]
    assert query(history, "--exe", path) == sleeps
    assert query(history, "--exe", "/nowhere/*") == []
    assert len(query(history, "--uid", str(NOBODY), "--event", "process.exec")) == 3
    assert query(history, "--uid", "4242") == []


def test_path_selects_the_file_writes(history: Daemon) -> None:
    writes = query(history, "--path", str(history.root("dev") / "notes"))
    assert [(r["event"], Path(r["path"]).name) for r in writes] == [("file.write", "today.txt")]
    assert query(history, "--path", "*/today.txt") == writes
    assert query(history, "--path", str(history.root("dev") / "note")) == []


def test_jsonl_is_the_stored_lines(history: Daemon) -> None:
    done = hostcapctl("audit", "query", "--failed", "--format", "jsonl", admin=history.admin_socket)
    assert done.returncode == 0, done.stderr
    stored = {r["seq"]: r for r in audit_records(history.audit_path)}
    lines = [json.loads(line) for line in done.stdout.splitlines()]
    assert [stored[r["seq"]] for r in lines] == lines
    assert all("command" not in r for r in lines)


@pytest.mark.parametrize("admin", [False, True])
def test_an_unknown_outcome_is_an_error_listing_the_valid_ones(
    history: Daemon, admin: bool
) -> None:
    args = ["audit", "query", "--outcome", "TIMEDOUT"]
    if not admin:
        args += ["--file", str(history.audit_path)]
    done = hostcapctl(*args, admin=history.admin_socket if admin else None)
    assert done.returncode == 2 and done.stdout == "", done
    assert "unknown outcome 'TIMEDOUT'" in done.stderr
    assert "TIMEOUT" in done.stderr and "SPAWN_FAILED" in done.stderr
    assert [r["outcome"] for r in query(history, "--outcome", "timeout")] == ["TIMEOUT"]


def _both(history: Daemon, *args: str) -> list[Any]:
    """hostcapctl audit query ARGS from the files and over the admin socket."""
    files = [
        a
        for f in sorted(history.audit_path.parent.glob("audit.jsonl*"))
        for a in ("--file", str(f))
    ]
    return [
        hostcapctl("audit", "query", *files, *args),
        hostcapctl("audit", "query", *args, admin=history.admin_socket),
    ]


def test_a_misspelt_filter_fails_with_the_valid_values(history: Daemon) -> None:
    """Issue 33: --tenant alpah and --event proces.exec were empty answers, exit 0."""
    for done in _both(history, "--tenant", "alpah"):
        assert done.returncode == 2 and done.stdout == "", done
        assert "unknown tenant 'alpah'" in done.stderr and "dev" in done.stderr, done.stderr
    for done in _both(history, "--event", "proces.exec"):
        assert done.returncode == 2 and done.stdout == "", done
        assert "unknown event 'proces.exec'" in done.stderr and "process.exec" in done.stderr
    for done in _both(history, "--event", "proc*", "--tenant", "dev", "--format", "json"):
        assert done.returncode == 0 and json.loads(done.stdout), done.stderr
    # A known tenant with nothing in the window is an empty answer, not an error.
    for done in _both(
        history, "--tenant", "dev", "--since", "2h", "--until", "1h", "--format", "json"
    ):
        assert done.returncode == 0 and json.loads(done.stdout) == [], done.stderr


async def test_a_spawn_prefix_finds_its_spawn_and_an_ambiguous_one_lists_them(
    history: Daemon,
) -> None:
    def exec_ids() -> list[str]:
        return [
            r["spawn_id"] for r in audit_records(history.audit_path) if r["event"] == "process.exec"
        ]

    ids = exec_ids()
    target = ids[1]
    others = set(ids) - {target}
    # The shortest prefix no other spawn shares.
    length = next(n for n in range(1, 33) if not any(o.startswith(target[:n]) for o in others))
    rows = query(history, "--spawn", target[:length])
    assert [(r["event"], r["spawn_id"]) for r in rows] == [
        ("process.exec", target), ("process.exit", target)
    ]  # fmt: skip
    assert query(history, "--spawn", target) == rows
    # Spawns until two ids share a first digit (at most 17, by pigeonhole).
    client = Client(history.socket)
    try:
        while len({i[0] for i in ids}) == len(ids):
            await client.run("true")
            ids = exec_ids()
    finally:
        await client.close()
    shared = next(i[0] for i in ids if sum(j[0] == i[0] for j in ids) > 1)
    for done in _both(history, "--spawn", shared):
        assert done.returncode == 2 and "ambiguous" in done.stderr, done
        assert all(i in done.stderr for i in ids if i.startswith(shared))
    for done in _both(history, "--spawn", "zz-not-an-id"):
        assert done.returncode == 2 and "no spawn id in the log starts with" in done.stderr, done


def test_since_and_until_take_a_time_of_day(history: Daemon) -> None:
    times = sorted(r["time"] for r in audit_records(history.audit_path))
    first, last = times[0], times[-1]
    if first[:10] != last[:10]:
        pytest.skip("the history straddles midnight UTC")
    since = first[11:16]  # HH:MM of the first record: every record is at or after it
    rows = query(history, "--since", since, "--until", "23:59:59.999999")
    assert len(rows) == len(times)
    assert query(history, "--until", since + ":00", "--since", since + ":00") == []
