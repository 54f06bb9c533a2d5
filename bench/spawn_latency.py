"""Row 1: spawn latency of /bin/true through the client, p50 / p95.

Back-to-back rounds interleave, in rotating order: the C posix_spawn floor,
Python subprocess.run, bwrap (until its tree is reaped), and a Run of
/bin/true on the `full` (default profile), `nocg` (default without cgroups)
and `minimal` tenants, as the daemon's defaults make them (`full` and `nocg`
with warm children, decision 0026), and `full_fresh` and `nocg_fresh`, the
same without (the warm path's A/B). Spaced rounds put 50 ms of idle before
each spawn of `full`, `nocg`, `full_fresh` and bwrap: on cgroup v1 joining a
cgroup after an idle gap waits in synchronize_rcu, which back-to-back spawns
never see (a warm child joined its cgroup before the request). Also the RPC
floor: a Health.Check on the daemon against a bare grpc.aio unary call and a
plain asyncio Unix-socket echo.

The design floor: a bare grpc.aio round trip plus the C set-up of the
default sandbox alone (bench/sandbox_floor.py, in the back-to-back
rotation), the least a spawn through any grpc.aio front-end driving this C
set-up could cost; the sum of the two medians, over bwrap's. The daemon's
time over that floor is the front-end's own (Python, the audit record, the
spawner hop); `minimal` is set against the RPC plus the posix_spawn floor.

The floors of the design (issue 35; bench/design_floor.py, bench/README.md
"The floors of the design"): one sample is a grpc.aio call through the
front-end's relay on to a hop process, then at once the sandbox part the
line needs: a warm child given its request, the durable exec record, the go
and the reap (`floor_warm`, also in the spaced rounds, where the 50 ms idle
comes once before the call, as before a spawn), the fresh set-up overlapped
with the record (`floor_fresh`), the same joining an open environment's
namespaces (`floor_env`), the `minimal` profile's (`floor_minimal`). Each is
in the rotation of the line it bounds; a floor line's ratio is its median
over that line's baseline, beside the line's target.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from hostcap_proto.v1 import process_pb2

from bench.baselines import Baselines
from bench.client import TenantClient
from bench.design_floor import DesignFloor
from bench.report import Line, Row, Target, ms
from bench.sandbox_floor import SandboxFloor
from bench.stats import Summary, rotation

SPACING = 0.05


async def _sync(fn: Callable[[], float]) -> float:
    return fn()


async def measure(
    base: Baselines,
    clients: dict[str, TenantClient],
    quick: bool,
    sandbox: SandboxFloor | None = None,
    design: DesignFloor | None = None,
) -> tuple[Row, Row]:
    rounds = 60 if quick else 400
    #: Each floor sample's two parts (relay + hop RTT, sandbox part), seconds.
    parts: dict[str, tuple[list[float], list[float]]] = {}
    spaced_rounds = 12 if quick else 60
    contenders: dict[str, Callable[[], Awaitable[float]]] = {
        "floor": lambda: _sync(base.floor_true),
        "subprocess": lambda: _sync(base.subprocess_run),
        "bwrap": lambda: _sync(base.bwrap),
        "full": clients["full"].true,
        "nocg": clients["nocg"].true,
        "minimal": clients["minimal"].true,
        # The same profiles without warm children (warm_spawns = 0): the A/B.
        "full_fresh": clients["full_fresh"].true,
        "nocg_fresh": clients["nocg_fresh"].true,
    }
    # A spawn in an open environment of `full` (its network, IPC and mount
    # namespaces made at the open, shared by its spawns).
    environment = await clients["full"].open_environment()
    contenders["environment"] = lambda: clients["full"].true_in(environment)
    if sandbox is not None:
        contenders["csetup"] = lambda: _sync(sandbox.true)
        # The same without the init as pid 1 (the command is pid 1): its cost.
        contenders["csetup_noinit"] = lambda: _sync(lambda: sandbox.true(init=False))
    if design is not None:
        for name, part in (
            ("floor_warm", design.warm),
            ("floor_fresh", design.fresh),
            ("floor_env", design.environment),
            ("floor_minimal", design.minimal),
        ):
            contenders[name] = _chain(base, part, parts.setdefault(name, ([], [])))
    for fn in contenders.values():  # warm-up: connections, caches, the hash cache
        for _ in range(3):
            await fn()
    record_bytes = design.calibrate() if design is not None else 0
    samples: dict[str, list[float]] = {name: [] for name in contenders}
    names = list(contenders)
    for index in range(rounds):
        for name in rotation(names, index):
            samples[name].append(await contenders[name]())

    await clients["full"].process.CloseEnvironment(
        process_pb2.CloseEnvironmentRequest(environment_id=environment)
    )

    spaced_names = ["full", "bwrap", "nocg", "full_fresh"]
    if design is not None:
        spaced_names.append("floor_warm")
    spaced: dict[str, list[float]] = {name: [] for name in spaced_names}
    for index in range(spaced_rounds):
        for name in rotation(spaced_names, index):
            await asyncio.sleep(SPACING)
            spaced[name].append(await contenders[name]())

    rpc_names = ["echo", "grpc", "daemon"]
    rpc_fns: dict[str, Callable[[], Awaitable[float]]] = {
        "echo": base.echo_rtt,
        "grpc": base.grpc_rtt,
        "daemon": clients["full"].health_rtt,
    }
    if design is not None:  # the relay alone, and on to the hop
        rpc_names += ["relay", "relay_hop"]
        rpc_fns["relay"] = base.relay_rtt
        rpc_fns["relay_hop"] = base.relay_hop_rtt
    rpc: dict[str, list[float]] = {name: [] for name in rpc_names}
    for index in range(rounds * 2):
        for name in rotation(rpc_names, index):
            rpc[name].append(await rpc_fns[name]())

    s = {name: Summary.of(v) for name, v in samples.items()}
    sp = {name: Summary.of(v) for name, v in spaced.items()}
    r = {name: Summary.of(v) for name, v in rpc.items()}
    row = Row("1 spawn latency")
    for name, summary in [*s.items(), *((f"spaced_{k}", v) for k, v in sp.items())]:
        row.figures[f"{name}.p50_us"] = summary.p50_us
        row.figures[f"{name}.p95_us"] = summary.p95_us
        row.figures[f"{name}.n"] = summary.n
    bw, fl = s["bwrap"], s["floor"]

    def vs(
        name: str,
        summary: Summary,
        base_name: str,
        base_s: Summary,
        what: str,
        key: str = "",
        target: Target | None = None,
    ) -> None:
        row.lines.append(
            Line(
                "1",
                f"{what} p50",
                summary.p50_us / base_s.p50_us,
                ms(summary.p50_us),
                f"{base_name} {ms(base_s.p50_us)}",
                key,
                target,
            )
        )
        row.lines.append(
            Line(
                "1",
                f"{what} p95",
                summary.p95_us / base_s.p95_us,
                ms(summary.p95_us),
                f"{base_name} {ms(base_s.p95_us)}",
            )
        )

    vs(
        "nocg",
        s["nocg"],
        "bwrap",
        bw,
        "default, no cgroup / bwrap",
        "default_over_bwrap",
        Target("<=", 0.9),
    )
    vs(
        "full",
        s["full"],
        "bwrap",
        bw,
        "default + cgroup / bwrap",
        "default_cgroup_over_bwrap",
        Target("<=", 1.0),
    )
    vs(
        "spaced_full",
        sp["full"],
        "bwrap spaced",
        sp["bwrap"],
        "default + cgroup, spaced 50 ms / bwrap",
        "default_cgroup_spaced_over_bwrap",
        Target("<=", 1.0),
    )
    vs("spaced_nocg", sp["nocg"], "bwrap spaced", sp["bwrap"], "default, no cgroup, spaced / bwrap")
    vs(
        "full",
        s["full"],
        "fresh",
        s["full_fresh"],
        "default + cgroup, warm / fresh (warm_spawns = 0)",
        "warm_over_fresh",
    )
    vs(
        "nocg",
        s["nocg"],
        "fresh",
        s["nocg_fresh"],
        "default, no cgroup, warm / fresh",
        "warm_over_fresh_nocg",
    )
    vs(
        "spaced_full",
        sp["full"],
        "fresh spaced",
        sp["full_fresh"],
        "default + cgroup, spaced 50 ms, warm / fresh",
        "warm_over_fresh_spaced",
    )
    vs(
        "spaced_full",
        sp["full"],
        "bwrap spaced",
        sp["bwrap"],
        "default + cgroup, warm, spaced 50 ms / bwrap spaced",
        "warm_spaced_over_bwrap_spaced",
        Target("<=", 0.6),
    )
    vs(
        "environment",
        s["environment"],
        "bwrap",
        bw,
        "default + cgroup, in an open environment / bwrap",
        "environment_spawn_over_bwrap",
        Target("<=", 0.6),
    )
    vs(
        "environment",
        s["environment"],
        "fresh",
        s["full_fresh"],
        "default + cgroup, in an open environment / fresh",
        "environment_over_fresh",
    )
    vs("nocg_fresh", s["nocg_fresh"], "bwrap", bw, "default, no cgroup, fresh / bwrap")
    vs(
        "minimal",
        s["minimal"],
        "floor",
        fl,
        "minimal / C posix_spawn floor",
        "minimal_over_floor",
    )
    vs("bwrap", bw, "floor", fl, "bwrap / C posix_spawn floor")
    vs("subprocess", s["subprocess"], "floor", fl, "subprocess.run / C posix_spawn floor")
    row.lines.append(
        Line(
            "1",
            "full / C posix_spawn floor p50",
            s["full"].p50_us / fl.p50_us,
            ms(s["full"].p50_us),
            f"floor {ms(fl.p50_us)}",
        )
    )

    if sandbox is not None:
        _design_floor(row, s, r["grpc"])
    if design is not None:
        row.figures["floor.exec_record_bytes"] = record_bytes
        part_p50: dict[str, float] = {}
        for name, (rtts, sandbox_parts) in parts.items():
            # The spaced rounds' samples are in the same lists: the back-to-back
            # ones come first (`rounds` of them after the warm-up's 3).
            kept = slice(3, 3 + rounds)
            rtt_s, part_s = Summary.of(rtts[kept]), Summary.of(sandbox_parts[kept])
            row.figures[f"{name}.relay_hop.p50_us"] = rtt_s.p50_us
            row.figures[f"{name}.part.p50_us"] = part_s.p50_us
            part_p50[name] = part_s.p50_us
        _floors(row, s, sp, r, part_p50)

    rpc_row = Row("0 rpc overhead")
    for name, summary in r.items():
        rpc_row.figures[f"{name}.p50_us"] = summary.p50_us
        rpc_row.figures[f"{name}.p95_us"] = summary.p95_us
    rpc_row.lines.append(
        Line(
            "0",
            "daemon Health.Check / asyncio echo p50",
            r["daemon"].p50_us / r["echo"].p50_us,
            ms(r["daemon"].p50_us),
            f"echo {ms(r['echo'].p50_us)}",
            "rpc_over_echo",
        )
    )
    rpc_row.lines.append(
        Line(
            "0",
            "bare grpc.aio unary / asyncio echo p50",
            r["grpc"].p50_us / r["echo"].p50_us,
            ms(r["grpc"].p50_us),
            f"echo {ms(r['echo'].p50_us)}",
        )
    )
    rpc_row.lines.append(
        Line(
            "0",
            "daemon Health.Check / bare grpc.aio p50",
            r["daemon"].p50_us / r["grpc"].p50_us,
            ms(r["daemon"].p50_us),
            f"grpc {ms(r['grpc'].p50_us)}",
        )
    )
    return rpc_row, row


def _design_floor(row: Row, s: dict[str, Summary], grpc: Summary) -> None:
    """Lines for the floor of the design: what a zero-cost front-end would take."""
    floor_us = grpc.p50_us + s["csetup"].p50_us
    measured = f"{ms(floor_us)}"
    minimal_floor_us = grpc.p50_us + s["floor"].p50_us
    lines: tuple[tuple[str, float, str, str, str, Target | None], ...] = (
        (
            "design floor (grpc.aio RTT + C set-up) / bwrap",
            floor_us / s["bwrap"].p50_us,
            measured,
            f"bwrap {ms(s['bwrap'].p50_us)}",
            "design_floor_over_bwrap",
            None,
        ),
        (
            "default, no cgroup / design floor",
            s["nocg"].p50_us / floor_us,
            ms(s["nocg"].p50_us),
            f"floor {measured}",
            "default_over_design_floor",
            Target("<=", 1.8),
        ),
        (
            "C set-up alone / bwrap",
            s["csetup"].p50_us / s["bwrap"].p50_us,
            ms(s["csetup"].p50_us),
            f"bwrap {ms(s['bwrap'].p50_us)}",
            "",
            None,
        ),
        (
            "C set-up with the init / without it",
            s["csetup"].p50_us / s["csetup_noinit"].p50_us,
            ms(s["csetup"].p50_us),
            f"no init {ms(s['csetup_noinit'].p50_us)}",
            "init_over_no_init",
            Target("<=", 1.3),
        ),
        (
            "grpc.aio RTT + posix_spawn / posix_spawn floor",
            minimal_floor_us / s["floor"].p50_us,
            ms(minimal_floor_us),
            f"floor {ms(s['floor'].p50_us)}",
            "minimal_design_floor_over_floor",
            None,
        ),
        (
            "minimal / its design floor (grpc.aio RTT + posix_spawn)",
            s["minimal"].p50_us / minimal_floor_us,
            ms(s["minimal"].p50_us),
            f"floor {ms(minimal_floor_us)}",
            "minimal_over_minimal_design_floor",
            Target("<=", 2.0),
        ),
    )
    for what, ratio, value, baseline, key, target in lines:
        row.lines.append(Line("1", f"{what} p50", ratio, value, baseline, key, target))


def _chain(
    base: Baselines, part: Callable[[], float], kept: tuple[list[float], list[float]]
) -> Callable[[], Awaitable[float]]:
    """One floor sample: the relay + hop call, then at once the sandbox part."""

    async def sample() -> float:
        rtt = await base.relay_hop_rtt()
        seconds = part()
        kept[0].append(rtt)
        kept[1].append(seconds)
        return rtt + seconds

    return sample


def _floors(
    row: Row,
    s: dict[str, Summary],
    sp: dict[str, Summary],
    r: dict[str, Summary],
    part: dict[str, float],
) -> None:
    """Issue 35's floors: each measured in the rotation of the line it
    bounds, over that line's baseline."""
    grpc = r["grpc"]
    warm = s["floor_warm"].p50_us
    warm_spaced = sp["floor_warm"].p50_us
    fresh = s["floor_fresh"].p50_us
    env = s["floor_env"].p50_us
    # Against row 0's bare grpc.aio RTT plus posix_spawn: the relay and hop
    # from the same rotation as that RTT (row 0's), like with like.
    minimal = r["relay_hop"].p50_us + part["floor_minimal"]
    old_minimal = grpc.p50_us + s["floor"].p50_us
    bw, bws = s["bwrap"].p50_us, sp["bwrap"].p50_us
    via = "relay + hop RTT"
    for name, value in (("warm", warm), ("warm_spaced", warm_spaced), ("fresh", fresh)):
        row.figures[f"floor.{name}.p50_us"] = value
    row.figures["floor.environment.p50_us"] = env
    row.figures["floor.minimal.p50_us"] = minimal
    lines: tuple[tuple[str, float, float, str, str, str, Target | None], ...] = (
        (
            f"floor, default ({via} + warm child's go ‖ durable append) / bwrap",
            warm,
            bw,
            "bwrap",
            "default_over_bwrap_floor",
            "default_over_bwrap",
            Target("<=", 0.9),
        ),
        (
            "floor, default + cgroup (the same: cgroup made ahead) / bwrap",
            warm,
            bw,
            "bwrap",
            "default_cgroup_over_bwrap_floor",
            "default_cgroup_over_bwrap",
            Target("<=", 1.0),
        ),
        (
            f"floor, spaced 50 ms (50 ms idle, then {via} + warm) / bwrap spaced",
            warm_spaced,
            bws,
            "bwrap spaced",
            "default_cgroup_spaced_over_bwrap_floor",
            "default_cgroup_spaced_over_bwrap",
            Target("<=", 1.0),
        ),
        (
            "floor, warm spaced 50 ms (the same) / bwrap spaced",
            warm_spaced,
            bws,
            "bwrap spaced",
            "warm_spaced_over_bwrap_spaced_floor",
            "warm_spaced_over_bwrap_spaced",
            Target("<=", 0.6),
        ),
        (
            "floor, in an environment (the default's: a warm child per environment,"
            " not built) / bwrap",
            warm,
            bw,
            "bwrap",
            "environment_spawn_over_bwrap_floor",
            "environment_spawn_over_bwrap",
            Target("<=", 0.6),
        ),
        (
            f"floor, minimal ({via} + its set-up ‖ append) / grpc.aio RTT + posix_spawn",
            minimal,
            old_minimal,
            "grpc + posix_spawn",
            "minimal_over_minimal_design_floor_floor",
            "minimal_over_minimal_design_floor",
            Target("<=", 2.0),
        ),
    )
    for what, value, base, base_name, key, floor_of, target in lines:
        row.lines.append(
            Line(
                "1",
                f"{what} p50",
                value / base,
                ms(value),
                f"{base_name} {ms(base)}",
                key,
                target,
                floor_of=floor_of,
            )
        )
    info = (
        (f"floor, fresh set-up ({via} + C set-up ‖ append) / bwrap", fresh, bw, "bwrap"),
        (
            "floor, default, with row 0's relay + hop RTT (calls 2 ms apart) / bwrap",
            r["relay_hop"].p50_us + part["floor_warm"],
            bw,
            "bwrap",
        ),
        (
            f"floor, in an environment, fresh ({via} + set-up joining its namespaces"
            " ‖ append) / bwrap",
            env,
            bw,
            "bwrap",
        ),
        ("default, no cgroup / its floor (warm)", s["nocg"].p50_us, warm, "floor"),
        ("default + cgroup, warm, spaced / its floor", sp["full"].p50_us, warm_spaced, "floor"),
        ("default + cgroup, in an environment / its floor", s["environment"].p50_us, warm, "floor"),
        ("minimal / its floor", s["minimal"].p50_us, minimal, "floor"),
        (
            "relay RTT / bare grpc.aio RTT (row 0's rotation)",
            r["relay"].p50_us,
            grpc.p50_us,
            "grpc",
        ),
        (
            "relay + hop RTT / bare grpc.aio RTT (row 0's rotation)",
            r["relay_hop"].p50_us,
            grpc.p50_us,
            "grpc",
        ),
    )
    keys = (
        "design_floor_fresh_over_bwrap",
        "default_floor_row0_rtt_over_bwrap",
        "environment_fresh_floor_over_bwrap",
        "default_over_its_floor",
        "warm_spaced_over_its_floor",
        "environment_over_its_floor",
        "minimal_over_its_floor",
        "relay_over_grpc_rtt",
        "relay_hop_over_grpc_rtt",
    )
    for (what, value, base, base_name), key in zip(info, keys, strict=True):
        row.lines.append(
            Line("1", f"{what} p50", value / base, ms(value), f"{base_name} {ms(base)}", key)
        )
