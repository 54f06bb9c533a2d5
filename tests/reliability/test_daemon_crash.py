"""The daemon is SIGKILLed while spawns run: nothing it started survives, and
a restart on the same state dir sweeps what the crash left and serves again."""

from __future__ import annotations

import signal
from collections.abc import Callable

from hostcap_proto.v1 import common_pb2
from reliability_probes import (
    READY_PREFIX,
    SPAWN_PREFIX,
    WARM_PREFIX,
    audit_chain_intact,
    audit_log,
    cgroup_ids,
    cgroup_subtrees,
    descendants,
    exec_records,
    exit_records,
    first_started,
    health_problem,
    spawn_cgroups,
    temp_files,
    wait_cgroups_gone,
    wait_dead,
    wait_for,
    waiting_warm_cgroups,
)
from support.daemon import Daemon, connectable, processes_with, wait_gone
from support.process import Client, outcome, request

#: Each program leaves something a naive kill misses.
CRASH_PROGRAMS = {
    # A grandchild that left the session and whose parent exited (double fork):
    # it is reparented away from the main process and is in no process group of it.
    "setsid double fork": "(setsid sh -c 'sleep 1000; :' </dev/null >/dev/null 2>&1 &); sleep 1000; :",
    # Survives the polite part of any kill sequence.
    "ignores SIGTERM": "trap '' TERM; sleep 1000; :",
    # A plain child holding the output pipe open.
    "child holds the pipe": "sleep 1000 & sleep 1000; :",
}
#: Processes the programs above run once settled: sh + sleep each, plus the
#: double fork's detached sh and its sleep, plus the pipe holder's extra sleep
#: (no sh execs its last command here: each ends in ``; :``).
SETTLED_PROCESSES = 2 * 3 + 2 + 1


async def test_sigkill_of_the_daemon_kills_every_tree_and_a_restart_recovers(
    start_reliable_daemon: Callable[..., Daemon], marker: str
) -> None:
    daemon = start_reliable_daemon()
    subtrees = cgroup_subtrees(daemon)
    assert subtrees, "the daemon's spawn cgroup subtree was not found"
    client = Client(daemon.socket)
    calls = [
        client.stub.Spawn(request(["sh", "-c", script], env={"TEST_MARKER": marker}))
        for script in CRASH_PROGRAMS.values()
    ]
    spawn_ids = {(await first_started(call)).spawn_id for call in calls}
    # Settled: exactly the programs' processes, and the same set twice in a row
    # (a subshell of the double fork exists only for a moment).
    seen: list[set[int]] = [set()]

    def settled() -> bool:
        now = set(processes_with(marker))
        stable = now == seen[0] and len(now) == SETTLED_PROCESSES
        seen[0] = now
        return stable

    await wait_for(settled, 10, "the trees to settle")
    # The daemon's own helpers (spawner, fs worker) must not outlive it either.
    everything = descendants(daemon.pid)
    marked = set(processes_with(marker))
    assert marked <= everything, (
        f"sandboxed processes outside the daemon's tree: {marked - everything}"
    )
    # (The warm children ordered to replace the ones the spawns took come
    # within FILL_QUIET: until then their cgroups are empty.)
    await wait_for(lambda: spawn_cgroups(subtrees) == spawn_ids, 5, "only the spawns' cgroups")
    waiting = waiting_warm_cgroups(subtrees)
    # The cgroups made ahead that no spawn took (a spawn that took one runs in
    # its ready-<id>, which is among the spawn ids).
    pooled = cgroup_ids(subtrees, READY_PREFIX) - spawn_ids

    daemon.stop(signal.SIGKILL)

    assert wait_gone(marker, 1.0) == [], "sandboxed processes outlived the daemon by 1 s"
    assert wait_dead(everything, 1.0) == set(), "daemon helpers outlived the daemon by 1 s"
    for call in calls:
        call.cancel()
    await client.close()
    # What the crash left: the spawns' cgroups (and those its warm children
    # waited in, and the untaken ones made ahead), a dead socket, open exec
    # records. Every cgroup counts here: empty, a spawn's ready-<id> cannot be
    # told from the pool's.
    left = cgroup_ids(subtrees, SPAWN_PREFIX, WARM_PREFIX, READY_PREFIX)
    assert spawn_ids | waiting | pooled <= left
    # Beyond those, only a cgroup made ahead: a warm child's or the pool's in
    # the making when the kill came (a refill late under load); never a spawn's.
    made_ahead = cgroup_ids(subtrees, WARM_PREFIX, READY_PREFIX)
    assert left - (spawn_ids | waiting | pooled) <= made_ahead - spawn_ids
    assert daemon.socket.exists() and not connectable(daemon.socket)
    old_socket_inode = daemon.socket.stat().st_ino
    assert set(exec_records(daemon)) >= spawn_ids
    assert not spawn_ids & set(exit_records(daemon))

    daemon.start()

    stale = spawn_cgroups(subtrees) & left
    assert stale == set(), "stale spawn cgroups were not swept"
    assert daemon.socket.stat().st_ino != old_socket_inode
    assert temp_files(daemon) == set()
    exits = exit_records(daemon)
    for spawn_id in spawn_ids:
        assert spawn_id in exits, f"the ledger did not close spawn {spawn_id}"
        assert exits[spawn_id]["outcome"] == common_pb2.Outcome.Name(common_pb2.DAEMON_SHUTDOWN)
    assert audit_chain_intact(daemon) == ""
    assert await health_problem(daemon) == ""
    # A new tree after the restart is killed as before, and its cgroup goes.
    again = Client(daemon.socket)
    result = await again.run(
        "sh",
        "-c",
        CRASH_PROGRAMS["setsid double fork"],
        limits={"wall_seconds": 1},
        env={"TEST_MARKER": marker},
    )
    await again.close()
    assert outcome(result) == "TIMEOUT"
    assert wait_gone(marker, 1.0) == []
    assert wait_cgroups_gone(subtrees, 3.0) == set()


async def test_a_second_crash_right_after_restart_still_closes_every_spawn(
    start_reliable_daemon: Callable[..., Daemon], marker: str
) -> None:
    """Crash, restart, crash again with new spawns: the ledger closes both
    generations and exactly once each (no duplicate exit for the first)."""
    daemon = start_reliable_daemon()
    generations: list[set[str]] = []
    for _ in range(2):
        client = Client(daemon.socket)
        calls = [
            client.stub.Spawn(request(["sleep", "1000"], env={"TEST_MARKER": marker}))
            for _ in range(3)
        ]
        generations.append({(await first_started(call)).spawn_id for call in calls})
        daemon.stop(signal.SIGKILL)
        assert wait_gone(marker, 1.0) == []
        for call in calls:
            call.cancel()
        await client.close()
        daemon.start()
    crashed = set().union(*generations)
    exits = [
        r for r in audit_log(daemon) if r["event"] == "process.exit" and r["spawn_id"] in crashed
    ]
    assert sorted(r["spawn_id"] for r in exits) == sorted(crashed)
    assert {r["outcome"] for r in exits} == {"DAEMON_SHUTDOWN"}
    assert audit_chain_intact(daemon) == ""
