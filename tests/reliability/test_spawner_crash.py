"""The spawner alone is SIGKILLed. The chosen behaviour (docs/reliability.md):
the front-end keeps serving and starts a new spawner; the spawns the dead one
owned end SPAWN_FAILED with their trees gone, each with its exit audited."""

from __future__ import annotations

import asyncio
import os
import signal
from typing import Any

import grpc
from hostcap_proto.errors import from_rpc_error
from hostcap_proto.v1 import common_pb2, process_pb2
from reliability_probes import (
    cgroup_subtrees,
    exit_records,
    first_started,
    wait_cgroups_gone,
    wait_dead,
    wait_for,
    wait_healthy,
)
from support.daemon import Daemon, audit_records, processes_with, wait_gone, zombies_under
from support.process import Client, outcome, request

#: Outcomes the issue allows for a spawn whose spawner died under it.
SPAWNER_LOSS_OUTCOMES = {"SPAWN_FAILED", "DAEMON_SHUTDOWN"}
#: A new spawner is a fresh interpreter: generous time to be up.
RESTART_S = 30.0


def kill_spawner(daemon: Daemon) -> int:
    pid = daemon.spawner_pid()
    assert pid is not None, "the daemon has no spawner"
    os.kill(pid, signal.SIGKILL)
    return pid


async def new_spawner(daemon: Daemon, old: int) -> int:
    await wait_for(
        lambda: daemon.spawner_pid() not in (None, old), 30, "the daemon to start a new spawner"
    )
    pid = daemon.spawner_pid()
    assert pid is not None
    return pid


async def final_event(call: Any) -> process_pb2.SpawnEvent:
    last: process_pb2.SpawnEvent | None = None
    async for event in call:
        last = event
    assert last is not None and last.WhichOneof("event") == "exited", last
    return last


async def test_running_spawns_end_spawn_failed_and_the_daemon_keeps_serving(
    daemon: Daemon, client: Client, marker: str
) -> None:
    subtrees = cgroup_subtrees(daemon)
    programs = [
        "(setsid sh -c 'sleep 1000; :' </dev/null >/dev/null 2>&1 &); sleep 1000; :",
        "trap '' TERM; sleep 1000; :",
        "sleep 1000 & sleep 1000; :",
    ]
    calls = [
        client.stub.Spawn(request(["sh", "-c", p], env={"TEST_MARKER": marker})) for p in programs
    ]
    spawn_ids = [(await first_started(call)).spawn_id for call in calls]
    await wait_for(lambda: len(processes_with(marker)) >= 7, 10, "the trees to settle")
    front_end = daemon.pid

    old = kill_spawner(daemon)

    ends = await asyncio.wait_for(asyncio.gather(*(final_event(c) for c in calls)), 30)
    for end in ends:
        assert common_pb2.Outcome.Name(end.exited.outcome) in SPAWNER_LOSS_OUTCOMES, end.exited
        assert end.exited.message
    assert wait_gone(marker, 1.0) == [], "a tree outlived its spawner by 1 s"
    assert wait_cgroups_gone(subtrees, 5.0) == set()
    assert daemon.proc is not None and daemon.proc.poll() is None and daemon.pid == front_end
    assert await new_spawner(daemon, old) != old
    assert await wait_healthy(daemon, RESTART_S) == ""
    exits = exit_records(daemon)
    assert {exits[s]["outcome"] for s in spawn_ids} <= SPAWNER_LOSS_OUTCOMES
    # The new spawner's trees are killed like the old one's were.
    result = await client.run(
        "sh", "-c", programs[0], limits={"wall_seconds": 1}, env={"TEST_MARKER": marker}
    )
    assert outcome(result) == "TIMEOUT"
    assert wait_gone(marker, 1.0) == []


async def test_spawner_killed_during_a_burst_of_spawns_ends_each_one_typed(
    daemon: Daemon, marker: str
) -> None:
    """Spawns in every phase (queued, in set-up, running) when the spawner
    dies: each call ends with a result or a typed refusal, none hangs, no
    process is left, and the daemon serves again."""
    clients = [Client(daemon.socket) for _ in range(4)]

    async def one(i: int) -> str:
        try:
            result = await clients[i % 4].stub.Run(
                request(["sh", "-c", "sleep 2; echo ok"], env={"TEST_MARKER": marker}),
                timeout=60,
            )
        except grpc.aio.AioRpcError as error:  # a refusal must still carry a reason
            wire = from_rpc_error(error)
            assert wire is not None, f"untyped failure: {error}"
            return f"refused:{wire.reason}"
        return outcome(result)

    # Twenty running for sure, then more staggered around the kill: some in
    # set-up, some still to come when the spawner dies.
    running = [asyncio.ensure_future(one(i)) for i in range(20)]
    await wait_for(lambda: len(processes_with(marker)) >= 40, 30, "twenty running spawns")
    later = []
    old = 0
    for i in range(20, 40):
        later.append(asyncio.ensure_future(one(i)))
        await asyncio.sleep(0.01)
        if i == 25:
            old = kill_spawner(daemon)
    results = await asyncio.wait_for(asyncio.gather(*running, *later), 60)
    assert set(results) <= {"EXITED", *SPAWNER_LOSS_OUTCOMES}, results
    # Those running when it died cannot have finished normally.
    assert set(results[:20]) <= SPAWNER_LOSS_OUTCOMES, results[:20]
    assert wait_gone(marker, 1.0) == []
    await new_spawner(daemon, old)
    assert await wait_healthy(daemon, RESTART_S) == ""
    for c in clients:
        await c.close()


async def test_a_spawner_that_keeps_dying_is_restarted_each_time(daemon: Daemon) -> None:
    spawners = {daemon.spawner_pid()}
    for _ in range(3):
        old = kill_spawner(daemon)
        spawners.add(await new_spawner(daemon, old))
        assert await wait_healthy(daemon, RESTART_S) == ""
    assert len(spawners) == 4
    # The dead spawners are gone, reaped by the front-end (no zombie left).
    dead = {p for p in spawners if p is not None} - {daemon.spawner_pid()}
    assert wait_dead(dead, 1.0) == set()
    await wait_for(
        lambda: not set(zombies_under(daemon.pid)) & dead, 5, "the dead spawners' reaping"
    )


async def test_a_spawn_sent_while_the_spawner_restarts_runs_on_the_new_one(
    daemon: Daemon, client: Client
) -> None:
    kill_spawner(daemon)
    results = await asyncio.gather(*(client.run("echo", str(i)) for i in range(3)))
    assert [(outcome(r), r.exited.failed_step, r.stdout) for r in results] == [
        ("EXITED", "", f"{i}\n".encode()) for i in range(3)
    ]


async def test_a_spawner_crash_closes_the_environments_it_held(daemon: Daemon) -> None:
    """Its namespaces died with the spawner: each environment is closed,
    its record saying why, and a spawn naming it is refused NOT_FOUND."""
    client = Client(daemon.socket)
    try:
        env = (
            await client.stub.OpenEnvironment(process_pb2.OpenEnvironmentRequest())
        ).environment_id
        old = kill_spawner(daemon)
        await new_spawner(daemon, old)

        async def closed() -> bool:
            listed = await client.stub.ListEnvironments(process_pb2.ListEnvironmentsRequest())
            return not listed.environments

        for _ in range(100):
            if await closed():
                break
            await asyncio.sleep(0.1)
        assert await closed()
        try:
            await client.run("true", environment_id=env)
            raise AssertionError("a spawn ran in a closed environment")
        except grpc.aio.AioRpcError as error:
            wire = from_rpc_error(error)
            assert wire is not None and wire.reason == "NOT_FOUND"
    finally:
        await client.close()
    reasons = [
        r["reason"]
        for r in audit_records(daemon.audit_path)
        if r["event"] == "environment.close" and r["environment_id"] == env
    ]
    assert reasons == ["the spawner restarted: its namespaces are gone"]
