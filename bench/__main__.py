"""python -m bench [--quick] [--only ROWS] [--keep-state]

Runs every row of issue 7 against real daemons, prints one table in which
every figure is a ratio to a baseline measured in the same run (interleaved),
and writes the JSON to bench/results/<timestamp>.json.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import prctl

from bench import (
    egress_bench,
    file_io,
    kill,
    memory,
    procfs,
    spawn_latency,
    stream,
    throughput,
    tty_bench,
)
from bench.baselines import Baselines
from bench.client import TenantClient
from bench.daemon import REPO, BenchDaemon, state_parent
from bench.design_floor import DesignFloor
from bench.native import BenchError
from bench.report import Row, document, table, write
from bench.sandbox_floor import SandboxFloor

RESULTS = REPO / "bench" / "results"
#: Seconds a server is left alone after start before its idle RSS is read.
SETTLE = 1.0
ROWS = ("1", "2", "3", "4", "5", "6", "7", "8")


def _progress(message: str, started: float) -> None:
    print(f"[{time.monotonic() - started:6.1f} s] {message}", file=sys.stderr, flush=True)


def _meta(quick: bool) -> dict[str, Any]:
    def run(*argv: str) -> str:
        try:
            return subprocess.run(
                argv, capture_output=True, text=True, check=False, cwd=REPO
            ).stdout.strip()
        except OSError:
            return ""

    return {
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "quick": quick,
        "kernel": platform.release(),
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "commit": run("git", "rev-parse", "--short", "HEAD"),
        "dirty": bool(run("git", "status", "--porcelain", "--untracked-files=no")),
        "bwrap": run("bwrap", "--version"),
        "loadavg_start": os.getloadavg()[0],
    }


async def run(quick: bool, only: set[str], keep_state: bool) -> int:
    started = time.monotonic()
    meta = _meta(quick)
    state = Path(tempfile.mkdtemp(prefix="state-", dir=state_parent()))
    main = BenchDaemon(
        state / "main", ("full", "nocg", "minimal", "stream", "full_fresh", "nocg_fresh")
    )
    mem = BenchDaemon(state / "mem", ("full",))
    base: Baselines | None = None
    clients: dict[str, TenantClient] = {}
    rows: list[Row] = []
    design: DesignFloor | None = None
    try:
        _progress("starting daemons, floor servers, compiling the C baselines", started)
        main.start()
        mem.start()
        bin_dir = main.workspace("full") / "bench-bin"
        bin_dir.mkdir(mode=0o755)
        base = await Baselines.start(state, bin_dir, SETTLE)
        idle_rss = procfs.rss_bytes(mem.pid)  # started before the floor server: settled as long
        frontend_idle_rss = max(map(procfs.rss_bytes, mem.frontend_pids()), default=0)
        clients = {name: TenantClient(main.socket(name)) for name in main.tenants}
        if only & {"1", "2"}:
            try:
                design = DesignFloor(main)
            except (BenchError, OSError) as error:
                print(f"bench: no floors of the design: {error}", file=sys.stderr)
                design = None
        if "1" in only:
            _progress("row 1: spawn latency (and the RPC floor)", started)
            try:
                sandbox = SandboxFloor(main)
            except (BenchError, OSError) as error:
                print(f"bench: no design floor lines: {error}", file=sys.stderr)
                sandbox = None
            try:
                rows += await spawn_latency.measure(base, clients, quick, sandbox, design)
            finally:
                if sandbox is not None:
                    sandbox.close()
        if "2" in only:
            _progress("row 2: throughput with 8 clients", started)
            rows.append(await throughput.measure(base, main, quick, design))
        if "3" in only:
            _progress("row 3: stdout stream", started)
            rows.append(await stream.measure(base, main, quick))
        if "4" in only:
            _progress("row 4: kill of a 50-process tree", started)
            rows.append(await kill.measure(base, clients["full"], quick))
        if "5" in only:
            _progress("row 5: ReadFile / WriteFile", started)
            rows.append(
                await file_io.measure(main.socket("full"), quick, base.grpc_rtt, base.relay_read_4k)
            )
        if "6" in only:
            _progress("row 6: memory", started)
            rows.append(
                await memory.measure(mem, idle_rss, base.grpc_idle_rss, quick, frontend_idle_rss)
            )
        if "7" in only:
            _progress("row 7: the egress proxy (a daemon of its own)", started)
            rows.append(egress_bench.row(await egress_bench.measure(quick)))
        if "8" in only:
            _progress(
                "row 8: a terminal's keystroke echo and stream (a daemon of its own)", started
            )
            rows.append(tty_bench.row(await tty_bench.measure(quick)))
    except BenchError as error:
        print(f"bench: {error}", file=sys.stderr)
        return 1
    finally:
        if design is not None:
            design.close()
        for client in clients.values():
            await client.close()
        if base is not None:
            await base.close()
        main.stop()
        mem.stop()
        procfs.reap_orphans()
        if keep_state:
            print(f"bench: state kept in {state}", file=sys.stderr)
        else:
            shutil.rmtree(state, ignore_errors=True)
    meta["loadavg_end"] = os.getloadavg()[0]
    meta["seconds"] = round(time.monotonic() - started, 1)
    stamp = datetime.datetime.now(datetime.UTC).strftime("%Y%m%dT%H%M%SZ")
    path = write(document(rows, meta), RESULTS, stamp)
    print(table(rows))
    print(
        f"\n{'quick' if quick else 'full'} run, {meta['seconds']} s, load {meta['loadavg_start']:.1f}"
        f" -> {meta['loadavg_end']:.1f}; JSON: {path.relative_to(REPO)}"
    )
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench", description=__doc__.splitlines()[0] if __doc__ else None
    )
    parser.add_argument("--quick", action="store_true", help="a reduced run (under a minute)")
    parser.add_argument(
        "--only", default=",".join(ROWS), help="rows to run, e.g. 1,3 (default: all)"
    )
    parser.add_argument(
        "--keep-state", action="store_true", help="keep the daemons' state and logs"
    )
    args = parser.parse_args(argv)
    only = set(args.only.split(","))
    if not only <= set(ROWS):
        parser.error(f"--only takes rows among {','.join(ROWS)}")
    if os.geteuid() != 0:
        print(
            "bench: the daemon's full profile needs root (namespaces, cgroups, uid drop)",
            file=sys.stderr,
        )
        return 2
    # The bench reaps what it kills: the killpg baseline's orphans come back here.
    prctl.set_child_subreaper(True)
    return asyncio.run(run(args.quick, only, args.keep_state))


if __name__ == "__main__":
    sys.exit(main())
