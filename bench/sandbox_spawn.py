"""Issue 3's benchmark: the sandboxed spawn cost of /bin/true through the daemon.

    python -m bench.sandbox_spawn [--quick]        # as root: prints medians, p95 and ratios
    figures = await run(quick=True)                # from the bench harness

One round runs, in rotating order (each goes first in turn):

- **daemon**: a `ProcessService.Run` of /bin/true on a tenant with the
  default profile (every protection required: pid/net/ipc/uts/mount
  namespaces, cgroup, landlock, seccomp, rlimits, no_new_privs, uid drop,
  exec by fd), timed by the client until the result arrived: validation,
  the durable exec audit record, cgroup set-up and removal, the C set-up,
  reaping, and the exit record are all in it;
- **posix_spawn**: `posix_spawn("/bin/true")` + `waitpid`, timed in C by
  bench/floor.c (compiled with gcc into a temporary directory): the floor;
- **bwrap**: `bwrap --ro-bind / / --unshare-all --die-with-parent /bin/true`,
  timed by the same helper until its whole tree is reaped (the helper is a
  PR_SET_CHILD_SUBREAPER, so an orphan of bwrap's comes back to it and is
  waited for; the bench process is one too, for the daemon's leftovers).

Keys of the returned dict, all floats: `sandbox_spawn.{daemon,posix_spawn,bwrap}.{p50_us,p95_us}`,
`sandbox_spawn.ratio_vs_posix_spawn` and `sandbox_spawn.ratio_vs_bwrap` (daemon p50 over
each baseline's p50; the issue's target is ratio_vs_bwrap <= 1),
`sandbox_spawn.bwrap_ratio_vs_posix_spawn`, the same three at p95 (`.p95_ratio_*`), and
`sandbox_spawn.rounds`.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import sys
import tempfile
from collections.abc import Awaitable, Callable
from pathlib import Path

import prctl

from bench import procfs
from bench.client import TenantClient
from bench.daemon import BenchDaemon, state_parent
from bench.native import BenchError, Floor, bwrap_argv, compile_c
from bench.stats import Summary, rotation

PREFIX = "sandbox_spawn"
WARM_UP = 5


def _rounds(quick: bool) -> int:
    return 40 if quick else 400


async def _in_c(measure: Callable[[], float]) -> float:
    return measure()


def figures(summaries: dict[str, Summary], rounds: int) -> dict[str, float]:
    """The flat result dict of the module doc, from each contender's summary."""
    daemon, floor, bwrap = summaries["daemon"], summaries["posix_spawn"], summaries["bwrap"]
    out: dict[str, float] = {f"{PREFIX}.rounds": float(rounds)}
    for name, summary in summaries.items():
        out[f"{PREFIX}.{name}.p50_us"] = summary.p50_us
        out[f"{PREFIX}.{name}.p95_us"] = summary.p95_us
    out[f"{PREFIX}.ratio_vs_posix_spawn"] = daemon.p50_us / floor.p50_us
    out[f"{PREFIX}.ratio_vs_bwrap"] = daemon.p50_us / bwrap.p50_us
    out[f"{PREFIX}.bwrap_ratio_vs_posix_spawn"] = bwrap.p50_us / floor.p50_us
    out[f"{PREFIX}.p95_ratio_vs_posix_spawn"] = daemon.p95_us / floor.p95_us
    out[f"{PREFIX}.p95_ratio_vs_bwrap"] = daemon.p95_us / bwrap.p95_us
    out[f"{PREFIX}.p95_bwrap_ratio_vs_posix_spawn"] = bwrap.p95_us / floor.p95_us
    return out


async def run(quick: bool) -> dict[str, float]:
    """Start a daemon (default profile) and the C helper, measure interleaved
    rounds, stop everything; the figures of the module doc. Needs root (the
    default profile drops to the run-as uid). Raises BenchError when a
    contender fails: a failed spawn is never counted as a fast one."""
    if os.geteuid() != 0:
        raise BenchError("the default sandbox profile needs a root daemon: run the bench as root")
    prctl.set_child_subreaper(True)
    state = Path(tempfile.mkdtemp(prefix="sandbox-spawn-", dir=state_parent()))
    daemon = BenchDaemon(state / "daemon", ("full",))
    floor: Floor | None = None
    client: TenantClient | None = None
    try:
        daemon.start()
        helper = floor = Floor(compile_c("floor.c", state), bwrap_argv())
        client = TenantClient(daemon.socket("full"))
        contenders: dict[str, Callable[[], Awaitable[float]]] = {
            "daemon": client.true,
            "posix_spawn": lambda: _in_c(lambda: helper.spawn_true(1)[0]),
            "bwrap": lambda: _in_c(lambda: helper.tree(1)[0]),
        }
        for measure in contenders.values():  # connections, caches, the daemon's hash cache
            for _ in range(WARM_UP):
                await measure()
        samples: dict[str, list[float]] = {name: [] for name in contenders}
        rounds = _rounds(quick)
        for index in range(rounds):
            for name in rotation(list(contenders), index):
                samples[name].append(await contenders[name]())
        return figures({name: Summary.of(s) for name, s in samples.items()}, rounds)
    finally:
        if client is not None:
            await client.close()
        if floor is not None:
            floor.close()
        daemon.stop()
        procfs.reap_orphans()
        shutil.rmtree(state, ignore_errors=True)


def report(result: dict[str, float]) -> str:
    """A small table of the figures, for a person."""
    lines = [f"sandboxed spawn of /bin/true, {int(result[f'{PREFIX}.rounds'])} interleaved rounds"]
    lines.append(f"  {'':28}{'p50 us':>10}{'p95 us':>10}")
    labels = {
        "daemon": "daemon (default profile)",
        "posix_spawn": "posix_spawn + waitpid",
        "bwrap": "bwrap --unshare-all",
    }
    for name, label in labels.items():
        p50, p95 = result[f"{PREFIX}.{name}.p50_us"], result[f"{PREFIX}.{name}.p95_us"]
        lines.append(f"  {label:28}{p50:10.0f}{p95:10.0f}")
    lines.append(
        f"  daemon / posix_spawn: {result[f'{PREFIX}.ratio_vs_posix_spawn']:.1f}x p50, "
        f"{result[f'{PREFIX}.p95_ratio_vs_posix_spawn']:.1f}x p95"
    )
    lines.append(
        f"  daemon / bwrap:       {result[f'{PREFIX}.ratio_vs_bwrap']:.2f}x p50, "
        f"{result[f'{PREFIX}.p95_ratio_vs_bwrap']:.2f}x p95 (target: <= 1)"
    )
    lines.append(
        f"  bwrap / posix_spawn:  {result[f'{PREFIX}.bwrap_ratio_vs_posix_spawn']:.1f}x p50"
    )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.sandbox_spawn",
        description=__doc__.splitlines()[0] if __doc__ else None,
    )
    parser.add_argument(
        "--quick", action="store_true", help=f"{_rounds(True)} rounds instead of {_rounds(False)}"
    )
    args = parser.parse_args(argv)
    try:
        result = asyncio.run(run(args.quick))
    except BenchError as error:
        print(f"bench: {error}", file=sys.stderr)
        return 1
    print(report(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
