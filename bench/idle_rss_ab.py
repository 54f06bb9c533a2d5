"""A/B of an idle tenant front-end's RSS (issue 35 item 5, row 6's line):
daemons `a` and `b` (one tenant each) started in turn, `a` first in even
rounds, `b` first in odd ones, with a bare grpc.aio server (row 6's
denominator) started beside each.

    python -m bench.idle_rss_ab [--a-python PY] [--b-python PY] [--rounds N]
                                [--a-set/--b-set daemon.KEY=VALUE]

`a` and `b` are this checkout's daemon unless `--a-python` / `--b-python`
names another interpreter (another checkout's venv: its own code), each
with its `--a-set` / `--b-set` applied to its config (`bench.frontend_ab`'s). Each
reading is taken `--settle` seconds after the daemon serves, as row 6's.
Prints each round's front-end RSS, the bare server's, the front-end's
`/proc/PID/smaps_rollup` anonymous and file-backed parts, and the medians
with b - a.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from bench import procfs
from bench.baselines import start_server, stop
from bench.daemon import BenchDaemon, MiB, state_parent
from bench.frontend_ab import _apply

KINDS = ("a", "b")
TENANT = "full"


def _rollup(pid: int) -> dict[str, int]:
    fields = {}
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines()[1:]:
        key, _, value = line.partition(":")
        fields[key] = int(value.split()[0]) * 1024
    return fields


def _one(
    python: str, settings: list[str], state: Path, settle: float
) -> tuple[float, float, float, float]:
    """(front-end RSS, its anonymous part, the bare server's RSS, load) in MiB."""
    daemon = BenchDaemon(state, (TENANT,))
    _apply(daemon.config, settings)
    if python:
        daemon.python = python
    bare = None
    daemon.start()
    try:
        bare = start_server("grpc", state.parent / f"{state.name}-grpc.sock")
        time.sleep(settle)
        front = max(daemon.frontend_pids(), key=procfs.rss_bytes)
        rss = procfs.rss_bytes(front)
        anon = _rollup(front)["Anonymous"]
        base = procfs.rss_bytes(bare.pid)
        return rss / MiB, anon / MiB, base / MiB, os.getloadavg()[0]
    finally:
        if bare is not None:
            stop(bare)
        daemon.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.idle_rss_ab")
    parser.add_argument("--a-python", default="", help="the interpreter of daemon a")
    parser.add_argument("--b-python", default="", help="the interpreter of daemon b")
    parser.add_argument("--a-set", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--b-set", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--settle", type=float, default=2.0)
    args = parser.parse_args(argv)
    python = {"a": args.a_python, "b": args.b_python}
    settings = {"a": args.a_set, "b": args.b_set}
    state = Path(tempfile.mkdtemp(prefix="idle-rss-ab-", dir=state_parent()))
    seen: dict[str, list[tuple[float, float, float, float]]] = {k: [] for k in KINDS}
    for round_ in range(args.rounds):
        for kind in KINDS if round_ % 2 == 0 else KINDS[::-1]:
            got = _one(python[kind], settings[kind], state / f"{kind}{round_}", args.settle)
            seen[kind].append(got)
            rss, anon, base, load = got
            print(
                f"round {round_} {kind}: front-end {rss:.2f} MiB (anonymous {anon:.2f}), "
                f"bare grpc.aio {base:.2f} MiB, {rss / base:.3f}x, load {load:.2f}",
                flush=True,
            )
    medians = {k: [statistics.median(v[i] for v in seen[k]) for i in range(4)] for k in KINDS}
    for kind in KINDS:
        rss, anon, base, load = medians[kind]
        print(
            f"{kind} median: front-end {rss:.2f} MiB (anonymous {anon:.2f}), "
            f"bare {base:.2f} MiB, {rss / base:.3f}x, load {load:.2f}"
        )
    print(
        f"b - a: front-end {medians['b'][0] - medians['a'][0]:+.2f} MiB, "
        f"anonymous {medians['b'][1] - medians['a'][1]:+.2f} MiB"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
