"""A/B of the spawner's pool maker (spawner/maker.py), and of the ways a
pooled mount namespace is made, each in one process.

    python -m bench.pool_maker_ab --a-python PY [--rounds N] [--pairs N] [--late]
    python -m bench.pool_maker_ab --mounts [--rounds N] [--late]

With `--a-python` (another checkout's venv: its own hostcapd), each round
starts a driver under each interpreter in turn, in alternating order: the
driver starts that checkout's pool maker and `--pairs` times asks it for a
network and a mount namespace of the default profile, takes both and hands
them back, as the spawner does for each spawn. Prints the medians over the
rounds of the maker's CPU per pair (its own, from schedstat; with its
reaped children, whose CPU its own does not count, from /proc/PID/stat in
ticks), the wall time per pair and the driver's own CPU per pair (the
spawner's side of the asks), b (this checkout) over a.

With `--mounts`: in this process, interleaved, the CPU (with the children)
and wall time of a mount namespace built whole for a spawn, a copy of the
profile's template made by a child, and one made by the calling thread.

`--late`: the tenant's root beneath /tmp (cloned from the host for each
copy), else beneath /var/tmp.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import select
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from hostcapd import childsetup
from hostcapd.childsetup import Mount
from hostcapd.config import Sandbox
from hostcapd.sandbox import namespaces

REPO = Path(__file__).resolve().parent.parent


def _pooled(late: bool) -> list[Mount]:
    root = Path(tempfile.mkdtemp(prefix="pool-maker-ab-", dir=None if late else "/var/tmp"))
    os.chmod(root, 0o755)
    sandbox = Sandbox()
    plan = namespaces.plan(
        {*namespaces.NAMESPACES, "uid_drop"},
        sandbox.tmp_size_bytes,
        "hostcap",
        roots=((root, True),),
        system_dirs=sandbox.system_dirs,
    )
    return list(plan.pooled_mounts)


def drive(pairs: int, late: bool) -> None:
    """The driver (under either interpreter): its maker's CPU per pair, as JSON."""
    from hostcapd.spawner.maker import PoolMaker

    pooled = _pooled(late)
    maker = PoolMaker.start()
    assert maker is not None

    def own() -> float:
        tasks = Path(f"/proc/{maker.pid}/task").iterdir()
        return sum(int((t / "schedstat").read_text().split()[0]) for t in tasks) / 1e9

    def whole() -> float:
        fields = Path(f"/proc/{maker.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return sum(int(f) for f in fields[11:15]) / os.sysconf("SC_CLK_TCK")

    # A maker that takes what is asked at one time in one message
    # (PoolMaker.ask) is driven as the spawner drives it: the pair taken is
    # handed back (one message), then both are asked for (one message).
    batch = hasattr(maker, "ask")
    held: list[int] = []

    def pair() -> None:
        if batch:
            if held:
                maker.release(held)
                for fd in held:
                    os.close(fd)
                held.clear()
            maker.ask([("n", "", ()), ("m", "k", pooled)])
        else:
            maker.ask([("n", "", ())])  # one message an ask, as before
            maker.ask([("m", "k", pooled)])
        got: list[int] = []
        while len(got) < 2:
            select.select([maker.sock], [], [], 5)
            for reply in maker.replies():
                assert reply[2] >= 0, reply
                got.append(reply[2])
                if len(reply) > 5 and int(reply[5]) >= 0:
                    os.close(int(reply[5]))
        if batch:
            held.extend(got)
            return
        maker.release(got)
        for fd in got:
            os.close(fd)

    for _ in range(20):
        pair()
    time.sleep(0.2)
    own0, whole0, start = own(), whole(), time.perf_counter()
    driver0 = time.process_time()
    for _ in range(pairs):
        pair()
    took = time.perf_counter() - start
    driver = time.process_time() - driver0
    time.sleep(0.2)  # the last ones handed back are closed
    print(
        json.dumps(
            {
                "own_ms": (own() - own0) * 1e3 / pairs,
                "whole_ms": (whole() - whole0) * 1e3 / pairs,
                "wall_ms": took * 1e3 / pairs,
                "driver_ms": driver * 1e3 / pairs,
            }
        )
    )
    maker.close()


def compare(a_python: str, rounds: int, pairs: int, late: bool) -> None:
    pythons = {"a": a_python, "b": sys.executable}
    found: dict[str, list[dict[str, float]]] = {kind: [] for kind in pythons}
    print(f"load before: {os.getloadavg()[0]:.2f}", flush=True)
    for index in range(rounds):
        for kind in sorted(pythons, reverse=bool(index % 2)):
            argv = [pythons[kind], "-m", "bench.pool_maker_ab", "--drive", str(pairs)]
            done = subprocess.run(
                [*argv, *(["--late"] if late else [])],
                capture_output=True,
                text=True,
                cwd=REPO,
                check=False,
            )
            assert done.returncode == 0, done.stderr
            found[kind].append(json.loads(done.stdout))
    for field in ("own_ms", "whole_ms", "wall_ms", "driver_ms"):
        a, b = (statistics.median(r[field] for r in found[kind]) for kind in ("a", "b"))
        print(f"maker per pair, {field}: a {a:.3f} | b {b:.3f} | b / a {b / a:.2f}")
    print(f"load after: {os.getloadavg()[0]:.2f}")


def mounts(rounds: int, late: bool) -> None:
    from hostcapd.spawner.mntns import Templates

    pooled = _pooled(late)
    here, child = Templates(here=True), Templates(here=False)
    ways = {
        "built whole": lambda: childsetup.mount_namespace(pooled),
        "copy, by a child": lambda: child.make("k", pooled)[0],
        "copy, by this thread": lambda: here.make("k", pooled)[0],
    }

    def cpu() -> float:
        own = resource.getrusage(resource.RUSAGE_SELF)
        children = resource.getrusage(resource.RUSAGE_CHILDREN)
        return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime

    spent = {name: [0.0, 0.0, 0.0] for name in ways}  # CPU, wall, CPU of the close
    names = list(ways)
    print(f"load before: {os.getloadavg()[0]:.2f}", flush=True)
    for index in range(rounds):
        for name in names[index % 3 :] + names[: index % 3]:
            cpu0, wall0 = cpu(), time.perf_counter()
            fd = ways[name]()
            cpu1, wall1 = cpu(), time.perf_counter()
            os.close(fd)
            spent[name][0] += cpu1 - cpu0
            spent[name][1] += wall1 - wall0
            spent[name][2] += cpu() - cpu1
    first = spent[names[0]][0]
    for name, (made, wall, closed) in spent.items():
        print(
            f"{name:22} CPU {made * 1e3 / rounds:.3f} ms (/ built {made / first:.2f}),"
            f" wall {wall * 1e3 / rounds:.3f} ms, its close {closed * 1e3 / rounds:.3f} ms"
        )
    print(f"load after: {os.getloadavg()[0]:.2f}")
    here.close()
    child.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.pool_maker_ab")
    parser.add_argument("--a-python", default="", help="the interpreter of a")
    parser.add_argument("--mounts", action="store_true")
    parser.add_argument("--drive", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--pairs", type=int, default=400)
    parser.add_argument("--late", action="store_true")
    args = parser.parse_args(argv)
    if args.drive:
        drive(args.drive, args.late)
    elif args.mounts:
        mounts(args.rounds, args.late)
    elif args.a_python:
        compare(args.a_python, args.rounds, args.pairs, args.late)
    else:
        parser.error("--a-python or --mounts")
    return 0


if __name__ == "__main__":
    sys.exit(main())
