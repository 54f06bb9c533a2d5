"""A fresh spawn's order leaves before its exec record is built and appended
(`daemon.order_before_exec_record`, on by default; a warm child's follows
its record): the audit semantics are those of the record first
(docs/decisions/0007, 0020). Each test runs both ways, for a fresh child
and for a warm one, on a real in-process daemon,
with a fault put where the order and the record now trade places, and
checks the same observable result: no exec without a durable exec record; a
set-up failure recorded as tried (exec, then exit); an exec record that
cannot be appended refuses the spawn and nothing runs."""

from __future__ import annotations

import asyncio
import errno
import os
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
from hostcapd.audit import AuditLog, AuditUnavailable
from hostcapd.audit import fsync as fsync_module
from hostcapd.config import load_config
from hostcapd.daemon import Daemon
from hostcapd.sandbox.cgroups import CgroupError, CgroupHost
from hostcapd.spawner.client import SpawnerClient
from support import toml
from support.daemon import audit_records, daemon_config, prepare_roots, tenant_config, wait_gone
from support.process import Client, outcome, request

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="an in-process daemon needs root")

#: What happened, in order: ("order", spawn id) as the spawner is given it,
#: ("exec", spawn id) as its exec record is appended (or tried).
Events = list[tuple[str, str]]


@pytest.fixture(
    params=[(True, 0), (False, 0), (True, 2), (False, 2)],
    ids=["order-first-fresh", "record-first-fresh", "order-first-warm", "record-first-warm"],
)
async def started(
    request: pytest.FixtureRequest, state_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[tuple[Daemon, Client, Path, Events, bool]]:
    order_first, warm_spawns = request.param
    events: Events = []
    spawn = SpawnerClient.spawn

    def noted_spawn(self: SpawnerClient, order: Any, fds: list[int]) -> Any:
        events.append(("order", order.id))
        return spawn(self, order, fds)

    pending = AuditLog.write_pending

    def noted_pending(self: AuditLog, event: str, **fields: Any) -> Any:
        if event == "process.exec":
            events.append(("exec", fields.get("built", fields)["spawn_id"]))
        return pending(self, event, **fields)

    monkeypatch.setattr(SpawnerClient, "spawn", noted_spawn)
    monkeypatch.setattr(AuditLog, "write_pending", noted_pending)
    config = daemon_config(
        state_dir,
        {"dev": tenant_config(state_dir, "dev", warm_spawns=warm_spawns)},
        daemon={"order_before_exec_record": order_first},
    )
    prepare_roots(config)
    path = state_dir / "hostcapd.toml"
    path.write_text(toml.dumps(config))
    daemon = Daemon(load_config(path), path)
    await daemon.start()
    pool = daemon.tenants["dev"].runtime.warm
    for _ in range(500):  # the warm children ready, so that a spawn takes one
        if sum(entry.usable for entry in pool._entries.values()) >= warm_spawns:
            break
        await asyncio.sleep(0.01)
    client = Client(Path(config["tenants"]["dev"]["socket"]))
    try:
        yield daemon, client, Path(config["audit"]["path"]), events, order_first
    finally:
        await client.close()
        await daemon.stop()


def records_of(audit: Path, spawn_id: str) -> list[str]:
    return [r["event"] for r in audit_records(audit) if r.get("spawn_id") == spawn_id]


async def test_a_fresh_spawn_runs_and_its_order_left_as_configured(
    started: tuple[Daemon, Client, Path, Events, bool],
) -> None:
    daemon, client, audit, events, order_first = started
    pool = daemon.tenants["dev"].runtime.warm
    result = await client.run("true")
    assert outcome(result) == "EXITED"
    assert pool.taken == (1 if pool.size else 0)  # a warm child's, where there are
    spawn_id = result.started.spawn_id
    mine = [kind for kind, sid in events if sid == spawn_id]
    assert mine == (["order", "exec"] if order_first and not pool.size else ["exec", "order"])
    assert records_of(audit, spawn_id) == ["process.exec", "process.exit"]


async def test_an_exec_record_that_cannot_be_appended_refuses_and_nothing_runs(
    started: tuple[Daemon, Client, Path, Events, bool],
    monkeypatch: pytest.MonkeyPatch,
    marker: str,
) -> None:
    daemon, client, audit, events, order_first = started
    workspace = audit.parents[1] / "dev" / "workspace"  # tenant_config's
    pending = AuditLog.write_pending  # the noting one

    def failing(self: AuditLog, event: str, **fields: Any) -> Any:
        if event == "process.exec":
            events.append(("exec", fields.get("built", fields)["spawn_id"]))
            raise AuditUnavailable("the test's append fails")
        return pending(self, event, **fields)

    monkeypatch.setattr(AuditLog, "write_pending", failing)
    reason = await client.refusal("sh", "-c", "touch ran; sleep 1000", env={"TEST_MARKER": marker})
    assert reason == "AUDIT_UNAVAILABLE"
    pool = daemon.tenants["dev"].runtime.warm
    assert pool.taken == (1 if pool.size else 0)
    (spawn_id,) = {sid for kind, sid in events if kind == "exec"}
    mine = [kind for kind, sid in events if sid == spawn_id]
    # Order first: its child was cloned and set up, and waited for a go it never had.
    assert mine == (["order", "exec"] if order_first and not pool.size else ["exec"])
    assert wait_gone(marker, 3.0) == []
    assert not (workspace / "ran").exists()
    assert records_of(audit, spawn_id) == []
    # The next spawn, with the log back, runs.
    monkeypatch.setattr(AuditLog, "write_pending", pending)
    assert outcome(await client.run("true")) == "EXITED"


async def test_a_cgroup_that_cannot_be_limited_is_recorded_as_tried(
    started: tuple[Daemon, Client, Path, Events, bool], monkeypatch: pytest.MonkeyPatch
) -> None:
    _, client, audit, events, _ = started

    def failing(*args: Any, **kwargs: Any) -> None:
        raise CgroupError("the test's cgroup refuses its limits")

    monkeypatch.setattr(CgroupHost, "set_limits", failing)
    monkeypatch.setattr(CgroupHost, "create", failing)
    result = await client.run("true")
    assert outcome(result) == "SPAWN_FAILED"
    assert result.exited.failed_step == "cgroup"
    spawn_id = result.started.spawn_id or next(sid for kind, sid in events if kind == "exec")
    # Recorded as tried, whichever way round: its exec record, then its end.
    assert records_of(audit, spawn_id) == ["process.exec", "process.exit"]
    assert [kind for kind, sid in events if sid == spawn_id] == ["exec"]


async def test_a_spawn_cancelled_before_its_order_left_is_recorded_as_cancelled(
    started: tuple[Daemon, Client, Path, Events, bool], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The spawner is not ready when the order would leave; the client goes
    away meanwhile. Its exec record was appended (before the wait, or after
    it), its exit says CANCELLED, and its child never ran."""
    _, client, audit, events, _ = started
    gate: list[Callable[[], None]] = []
    ready = SpawnerClient.ready

    async def slow_ready(self: SpawnerClient) -> None:
        waiter = asyncio.get_running_loop().create_future()
        gate.append(lambda: waiter.done() or waiter.set_result(None))
        await waiter
        await ready(self)

    monkeypatch.setattr(SpawnerClient, "ready", slow_ready)
    call = client.stub.Run(request(["true"]))
    task = asyncio.ensure_future(call)
    for _ in range(200):
        if gate:
            break
        await asyncio.sleep(0.01)
    assert gate, "the spawn never reached its order"
    call.cancel()
    await asyncio.sleep(0.2)
    monkeypatch.setattr(SpawnerClient, "ready", ready)
    gate[0]()
    with pytest.raises(asyncio.CancelledError):
        await task
    for _ in range(200):
        ids = {sid for kind, sid in events if kind == "exec"}
        if ids and all("process.exit" in records_of(audit, sid) for sid in ids):
            break
        await asyncio.sleep(0.01)
    (spawn_id,) = ids
    assert records_of(audit, spawn_id) == ["process.exec", "process.exit"]
    (exit_record,) = (
        r for r in audit_records(audit)
        if r.get("spawn_id") == spawn_id and r["event"] == "process.exit"
    )  # fmt: skip
    assert exit_record["outcome"] == "CANCELLED", exit_record


async def test_an_exec_record_whose_fsync_fails_refuses_and_nothing_runs(
    started: tuple[Daemon, Client, Path, Events, bool],
    monkeypatch: pytest.MonkeyPatch,
    marker: str,
) -> None:
    """The record is appended but its fsync fails (EIO): the go is never
    written, the cancel is (in the turn the fsync's end reaches the loop,
    `AuditLog.write_pending(settled=...)`), the child never execs, and the
    spawn is refused AUDIT_UNAVAILABLE; the log fails closed."""
    daemon, client, audit, events, _ = started
    workspace = audit.parents[1] / "dev" / "workspace"  # tenant_config's
    real = fsync_module.sync_files

    def failing(
        retired: list[int],
        directory: Path | None,
        fd: int,
        release: tuple[int, ...] = (),
        **kw: Any,
    ) -> None:
        if not release:  # a batched fsync: as it is
            return real(retired, directory, fd, release, **kw)
        # No go written into them (the writer closes them on the loop).
        raise OSError(errno.EIO, "the test's fdatasync fails")

    monkeypatch.setattr(fsync_module, "sync_files", failing)
    try:
        asked = time.monotonic()
        reason = await client.refusal(
            "sh", "-c", "touch ran; sleep 1000", env={"TEST_MARKER": marker}
        )
        assert reason == "AUDIT_UNAVAILABLE"
        # Ended by its cancel, not by the set-up's own 30 s wait for a go
        # (which fails closed too, but only then): a bound on the mechanism.
        assert time.monotonic() - asked < 15
        (spawn_id,) = {sid for kind, sid in events if kind == "exec"}
        assert wait_gone(marker, 3.0) == []
        assert not (workspace / "ran").exists()
        # Appended, never made durable, never closed by an exit record.
        assert records_of(audit, spawn_id) == ["process.exec"]
        assert daemon.audit is not None and daemon.audit.unwritable()  # failed closed
    finally:
        monkeypatch.setattr(fsync_module, "sync_files", real)
        if daemon.audit is not None:
            # A restart would reopen it; the fixture's stop needs a log to close.
            daemon.audit._failure = None
