"""Full disks: the audit volume (spawns are refused AUDIT_UNAVAILABLE, nothing
runs, and it recovers when space returns, chain intact) and a tenant's
workspace (writes fail typed with the old file intact and no temp left)."""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import Callable, Iterator
from pathlib import Path

import grpc
import pytest
from hostcap_proto.errors import from_rpc_error
from hostcap_proto.v1 import fs_pb2, fs_pb2_grpc, process_pb2
from reliability_probes import (
    audit_chain_intact,
    audit_log,
    cgroup_subtrees,
    exec_records,
    exit_records,
    fill,
    first_started,
    health_problem,
    small_tmpfs,
    temp_files,
    wait_cgroups_gone,
)
from support.daemon import NOBODY, Daemon, wait_gone
from support.process import Client, outcome, request

#: Enough for the daemon's start-up records and a few spawns.
AUDIT_VOLUME = "256k"
WORKSPACE_VOLUME = "1m"


@pytest.fixture
def audit_volume(state_dir: Path) -> Iterator[Path]:
    with small_tmpfs(state_dir / "audit-volume", AUDIT_VOLUME) as volume:
        yield volume


async def refusal_reason(call: object) -> str:
    try:
        await call  # type: ignore[misc]
    except grpc.aio.AioRpcError as error:
        wire = from_rpc_error(error)
        assert wire is not None, f"untyped error {error.code()}: {error.details()}"
        return wire.reason
    return "ran"


async def test_a_full_audit_volume_refuses_spawns_and_recovers_when_space_returns(
    start_reliable_daemon: Callable[..., Daemon], audit_volume: Path
) -> None:
    daemon = start_reliable_daemon(
        audit={"path": str(audit_volume / "audit.jsonl"), "group": "root", "journal": "off"}
    )
    subtrees = cgroup_subtrees(daemon)
    workspace = daemon.root()
    client = Client(daemon.socket)
    assert outcome(await client.run("true")) == "EXITED"
    filler = fill(audit_volume)

    # The log's last page may still take a line or two; then every spawn is refused.
    reasons = []
    for i in range(8):
        reasons.append(await refusal_reason(client.run("touch", f"ran-{i}")))
        if reasons[-1] != "ran":
            break
    assert reasons[-1] == "AUDIT_UNAVAILABLE", reasons
    refused = len(reasons) - 1
    for _ in range(3):
        assert await refusal_reason(client.run("touch", f"ran-{refused}")) == "AUDIT_UNAVAILABLE"
    # Refused means nothing ran and nothing was left half made.
    assert not (workspace / f"ran-{refused}").exists()
    # (A refused spawn that took a warm child orders its replacement: its
    # cgroup is empty until the child is made, within FILL_QUIET.)
    assert wait_cgroups_gone(subtrees, 3.0) == set()
    assert daemon.proc is not None and daemon.proc.poll() is None

    filler.unlink()

    assert outcome(await client.run("touch", "after")) == "EXITED"
    assert (workspace / "after").exists()
    assert audit_chain_intact(daemon) == "", "a failed append left a broken line"
    execs, exits = exec_records(daemon), exit_records(daemon)
    assert set(execs) <= set(exits)
    # Every exec that was audited ran: the refused ones have no exec record.
    assert sum(r["argv"][0] == "touch" for r in execs.values()) == refused + 1
    await client.close()


async def _spawn_ended_on_a_full_log(
    daemon: Daemon, client: Client, audit_volume: Path, marker: str
) -> tuple[str, Path]:
    """A spawn whose end finds the audit volume full: (its id, the filler)."""
    call = client.stub.Spawn(request(["sleep", "1000"], env={"TEST_MARKER": marker}))
    spawn_id = (await first_started(call)).spawn_id
    filler = fill(audit_volume)
    # Use up the log's last page with refusals (each a policy.deny line, a
    # few hundred bytes) so that the exit line finds no room at all.
    for _ in range(24):
        await refusal_reason(client.run("true", env={"NOT_ALLOWED": "x"}))
    call.cancel()
    assert wait_gone(marker, 3.0) == []
    for _ in range(150):
        # Listed until the daemon has finished the spawn (its exit line tried):
        # the tree being gone is not enough, the line may not be written yet.
        listed = await client.stub.List(process_pb2.ListRequest())
        if spawn_id not in {s.spawn_id for s in listed.spawns}:
            break
        await asyncio.sleep(0.02)
    else:
        raise AssertionError("the cancelled spawn was not finished within 3 s")
    assert spawn_id not in exit_records(daemon), "the exit line found room on a full disk"
    return spawn_id, filler


async def test_an_exit_record_that_found_no_room_is_written_once_there_is(
    start_reliable_daemon: Callable[..., Daemon], audit_volume: Path, marker: str
) -> None:
    """The exit line is kept while the volume is full and written, with the
    spawn's true outcome, as soon as there is room (retried every second)."""
    daemon = start_reliable_daemon(
        audit={"path": str(audit_volume / "audit.jsonl"), "group": "root", "journal": "off"}
    )
    client = Client(daemon.socket)
    spawn_id, filler = await _spawn_ended_on_a_full_log(daemon, client, audit_volume, marker)
    await asyncio.sleep(1.5)  # a retry or two while still full: nothing written, nothing torn
    assert spawn_id not in exit_records(daemon)
    filler.unlink()
    for _ in range(150):  # the retry comes within 1 s; generous
        if spawn_id in exit_records(daemon):
            break
        await asyncio.sleep(0.02)
    exits = [
        r
        for r in audit_log(daemon)
        if r.get("spawn_id") == spawn_id and r["event"] == "process.exit"
    ]
    assert [r["outcome"] for r in exits] == ["CANCELLED"]
    assert audit_chain_intact(daemon) == ""
    await client.close()
    daemon.stop(signal.SIGTERM)
    daemon.start()
    # Written once: the ledger has nothing to close at the next start.
    exits = [
        r
        for r in audit_log(daemon)
        if r.get("spawn_id") == spawn_id and r["event"] == "process.exit"
    ]
    assert [r["outcome"] for r in exits] == ["CANCELLED"]
    assert set(exec_records(daemon)) <= set(exit_records(daemon))
    assert await health_problem(daemon) == ""


async def test_an_exit_record_still_without_room_at_a_crash_is_closed_by_the_ledger(
    start_reliable_daemon: Callable[..., Daemon], audit_volume: Path, marker: str
) -> None:
    """Kept in memory only: if the daemon dies before there is room, the
    ledger closes the spawn on the next start, so no exec stays open."""
    daemon = start_reliable_daemon(
        audit={"path": str(audit_volume / "audit.jsonl"), "group": "root", "journal": "off"}
    )
    client = Client(daemon.socket)
    spawn_id, filler = await _spawn_ended_on_a_full_log(daemon, client, audit_volume, marker)
    await client.close()
    daemon.stop(signal.SIGKILL)
    filler.unlink()
    daemon.start()

    exits = exit_records(daemon)
    assert exits[spawn_id]["outcome"] == "DAEMON_SHUTDOWN"
    assert set(exec_records(daemon)) <= set(exits)
    assert audit_chain_intact(daemon) == ""
    assert await health_problem(daemon) == ""


# ---- the workspace -----------------------------------------------------------


@pytest.fixture
def small_workspace(state_dir: Path) -> Iterator[Path]:
    """The tenant's read-write root is a small tmpfs (mounted before the
    daemon starts, so its fs worker opens the mounted root)."""
    with small_tmpfs(state_dir / "dev" / "workspace", WORKSPACE_VOLUME) as workspace:
        os.chown(workspace, NOBODY, NOBODY)
        yield workspace


async def test_a_full_workspace_fails_writes_typed_and_keeps_the_old_file(
    start_reliable_daemon: Callable[..., Daemon], small_workspace: Path
) -> None:
    daemon = start_reliable_daemon()
    assert daemon.root() == small_workspace
    channel = grpc.aio.insecure_channel(f"unix:{daemon.socket}")
    fs = fs_pb2_grpc.FsServiceStub(channel)  # type: ignore[no-untyped-call]
    try:
        await fs.Stat(fs_pb2.StatRequest(path="."))
    except grpc.aio.AioRpcError as error:
        if error.code() == grpc.StatusCode.UNIMPLEMENTED:
            pytest.skip("hostcapd does not serve FsService yet")
        raise
    old = b"the original content\n" * 100
    await fs.WriteFile(fs_pb2.WriteFileRequest(path="notes.txt", data=old))
    filler = fill(small_workspace, ".filler")

    reasons = []
    for size in (4096, 64 * 1024, 512 * 1024):
        reasons.append(
            await refusal_reason(
                fs.WriteFile(fs_pb2.WriteFileRequest(path="notes.txt", data=b"n" * size))
            )
        )
        reasons.append(
            await refusal_reason(
                fs.WriteFile(fs_pb2.WriteFileRequest(path="new.txt", data=b"n" * size))
            )
        )

    assert set(reasons) == {"QUOTA_EXCEEDED"}, reasons
    assert (small_workspace / "notes.txt").read_bytes() == old
    assert not (small_workspace / "new.txt").exists()
    assert temp_files(daemon) == set()
    read = await fs.ReadFile(fs_pb2.ReadFileRequest(path="notes.txt"))
    assert read.data == old
    # The refused writes were audited as refusals, never as writes.
    writes = [r for r in audit_log(daemon) if r["event"] == "file.write"]
    assert [r["path"].rsplit("/", 1)[-1] for r in writes] == ["notes.txt"]

    filler.unlink()

    new = b"the new content\n" * 1000
    done = await fs.WriteFile(fs_pb2.WriteFileRequest(path="notes.txt", data=new))
    assert done.size == len(new)
    assert (small_workspace / "notes.txt").read_bytes() == new
    assert temp_files(daemon) == set()
    await channel.close(grace=None)
    assert await health_problem(daemon) == ""
