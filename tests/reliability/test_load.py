"""Load: many clients at once, spawns mixed with file reads and writes. All
complete, and afterwards the daemon holds exactly what it held before (fds,
threads, zombies, cgroups, temp files) and its RSS is back near idle. The
per-tenant quota refuses the excess at once, and a tenant flooding its quota
does not starve another."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import grpc
from hostcap_proto.errors import from_rpc_error
from reliability_probes import (
    Footprint,
    audit_log,
    cgroup_subtrees,
    exec_records,
    exit_records,
    fd_kinds,
    first_started,
    health_problem,
    wait_for,
)
from reliability_workload import client_session, prepare_load_dir, require_fs, settle, spawns_in
from support.daemon import Daemon, MiB, processes_with, wait_gone
from support.process import Client, outcome, request

CLIENTS = 16
CALLS_PER_CLIENT = 200
#: RSS may settle this far above idle after the load (allocator high-water
#: marks, grpc's buffer pools); a per-call leak of 3200 calls would not fit.
RSS_SLACK = 24 * MiB


async def test_sixteen_clients_times_two_hundred_mixed_calls_leave_nothing_behind(
    start_reliable_daemon: Callable[..., Daemon],
) -> None:
    daemon = start_reliable_daemon({"dev": {"max_concurrent_spawns": 64}})
    await require_fs(daemon)
    prepare_load_dir(daemon)
    subtrees = cgroup_subtrees(daemon)
    # Warm-up at the same concurrency: lazy state, thread pools, allocator.
    warm = await asyncio.gather(*(client_session(daemon, n, 16, True) for n in range(CLIENTS)))
    assert warm == [[]] * CLIENTS
    await asyncio.sleep(0.5)
    before = Footprint.of(daemon, subtrees)
    execs_before = len(exec_records(daemon))

    results = await asyncio.gather(
        *(client_session(daemon, n, CALLS_PER_CLIENT, True) for n in range(CLIENTS))
    )

    assert [p for problems in results for p in problems] == []
    after = await settle(daemon, subtrees, before)
    assert after.zombies == ()
    assert after.cgroups == frozenset()
    assert after.temp_files == before.temp_files == frozenset()
    assert after.helpers == before.helpers, "the spawner or fs worker was replaced under load"
    assert after.threads <= before.threads, (before.threads, after.threads)
    extra = after.fds - before.fds
    assert not extra, f"fds left open after the load: {fd_kinds(extra)}"
    assert after.rss - before.rss < RSS_SLACK, (
        f"RSS {before.rss / MiB:.0f} MiB idle, {after.rss / MiB:.0f} MiB after the load"
    )
    # Every spawn of the load was audited from exec to exit.
    execs, exits = exec_records(daemon), exit_records(daemon)
    assert len(execs) - execs_before == CLIENTS * spawns_in(CALLS_PER_CLIENT, True)
    assert set(execs) <= set(exits)
    writes = [r for r in audit_log(daemon) if r["event"] == "file.write"]
    assert len(writes) == CLIENTS * (16 + CALLS_PER_CLIENT) // 4
    assert await health_problem(daemon) == ""


# ---- quota and fairness ------------------------------------------------------


def two_tenants(flood_quota: int) -> dict[str, dict[str, Any]]:
    return {"flood": {"max_concurrent_spawns": flood_quota}, "calm": {"max_concurrent_spawns": 8}}


async def reason_of(call: Any) -> str:
    try:
        await call
    except grpc.aio.AioRpcError as error:
        wire = from_rpc_error(error)
        return wire.reason if wire else error.code().name
    return "ran"


async def test_the_quota_refuses_the_excess_at_once_instead_of_queuing(
    start_reliable_daemon: Callable[..., Daemon], marker: str
) -> None:
    daemon = start_reliable_daemon(two_tenants(4))
    flood = Client(daemon.socket_of("flood"))
    holders = [
        flood.stub.Spawn(request(["sleep", "1000"], env={"TEST_MARKER": marker})) for _ in range(4)
    ]
    for call in holders:
        await first_started(call)
    await wait_for(lambda: len(processes_with(marker)) == 4, 10, "the quota's holders to run")

    excess = await asyncio.gather(
        *(reason_of(flood.stub.Run(request(["echo", "more"]))) for _ in range(12))
    )

    # Refused while the quota's holders still run (they never end by themselves):
    # nothing was queued behind them.
    assert excess == ["QUOTA_EXCEEDED"] * 12
    assert len(processes_with(marker)) == 4
    denials = [
        r
        for r in audit_log(daemon)
        if r["event"] == "policy.deny" and r["reason"] == "QUOTA_EXCEEDED"
    ]
    assert len(denials) == 12 and {r["tenant"] for r in denials} == {"flood"}
    for call in holders:
        call.cancel()
    assert wait_gone(marker, 3.0) == []
    await wait_for(lambda: not daemon_spawns_running(daemon), 5, "the quota to be released")
    assert outcome(await flood.run("echo", "again")) == "EXITED"
    await flood.close()


def daemon_spawns_running(daemon: Daemon) -> bool:
    execs, exits = exec_records(daemon), exit_records(daemon)
    return bool(set(execs) - set(exits))


async def test_a_tenant_flooding_its_quota_does_not_starve_another(
    start_reliable_daemon: Callable[..., Daemon], marker: str
) -> None:
    daemon = start_reliable_daemon(two_tenants(6))
    flood_clients = [Client(daemon.socket_of("flood")) for _ in range(8)]
    calm = Client(daemon.socket_of("calm"))
    stop = asyncio.Event()
    tally = {"ran": 0, "QUOTA_EXCEEDED": 0}

    async def flooder(client: Client) -> None:
        # CPU burners up to the quota, and a stream of requests beyond it.
        while not stop.is_set():
            reason = await reason_of(
                client.stub.Run(
                    request(
                        ["sh", "-c", "while :; do :; done"],
                        limits={"wall_seconds": 1},
                        env={"TEST_MARKER": marker},
                    )
                )
            )
            tally[reason] = tally.get(reason, 0) + 1

    flooding = [asyncio.ensure_future(flooder(c)) for c in flood_clients]
    await wait_for(lambda: tally["QUOTA_EXCEEDED"] > 20, 30, "the flood to hit its quota")

    async def calm_worker(w: int) -> list[Any]:
        # Within calm's own quota: four at a time, ten each.
        return [await calm.run("sh", "-c", f"echo calm {w * 10 + i}") for i in range(10)]

    calm_results = [
        r
        for rs in await asyncio.wait_for(asyncio.gather(*(calm_worker(w) for w in range(4))), 60)
        for r in rs
    ]

    stop.set()
    await asyncio.gather(*flooding)
    assert [(outcome(r), r.stdout) for r in calm_results] == [
        ("EXITED", f"calm {i}\n".encode()) for i in range(40)
    ]
    # The flood really was at its quota the whole time, and nothing else.
    assert set(tally) == {"ran", "QUOTA_EXCEEDED"} and tally["ran"] > 0
    calm_denials = [
        r for r in audit_log(daemon) if r["event"] == "policy.deny" and r["tenant"] == "calm"
    ]
    assert calm_denials == []
    assert wait_gone(marker, 3.0) == []
    for c in [*flood_clients, calm]:
        await c.close()
    assert await health_problem(daemon, "calm") == ""
    assert await health_problem(daemon, "flood") == ""
