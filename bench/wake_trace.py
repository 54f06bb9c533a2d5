"""A spawn's timeline from the kernel's scheduler events, back to back against
spaced 50 ms, without marks in any process: `perf record` of the whole
machine around `bench.spacing --only full --gaps 0,50`, then each warm spawn
of /bin/true cut into its hops (who woke whom), and the CPU time each part
took between the exit report and the client's answer.

    python -m bench.wake_trace [--rounds N] [--python PY]

Needs `perf` and root. `--python`: the daemon's interpreter (another
checkout's venv), as HOSTCAP_BENCH_PYTHON. A hop is the wake-up of one of
the daemon's processes by another (the sched_wakeup event: when the waker
made it runnable); a step's time is from the previous hop's. The warm
child, its init and the command are the spawner's descendants (sched_wakeup_new),
the command the one that exec's.
"""

from __future__ import annotations

import argparse
import bisect
import collections
import os
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

EVENTS = (
    "sched:sched_switch",
    "sched:sched_wakeup",
    "sched:sched_wakeup_new",
    "sched:sched_process_exec",
    "sched:sched_process_exit",
)
LINE = re.compile(r"^\s*(.+?)\s+(\d+)/(\d+)\s+\[(\d+)\]\s+([\d.]+):\s+(\S+):\s*(.*)$")
SWITCH = re.compile(r"prev_comm=(.*) prev_pid=(\d+) .*==> next_comm=(.*) next_pid=(\d+)")
#: (step, waker, wakee): the hops of a warm spawn, in order ("" for the marks
#: that are not a wake-up: the exec and the command's exit).
HOPS = (
    ("the client sent (it wakes the front-end)", "bench", "frontend"),
    ("the front-end's Call (it wakes the root)", "frontend", "root"),
    ("the order (the root wakes the spawner)", "root", "spawner"),
    ("the go (the root's fsync thread wakes the command)", "root", "cmd"),
    ("the command exec's", "", "exec"),
    ("its exec record (the init wakes the spawner)", "child", "spawner"),
    ("Started (the spawner wakes the root)", "spawner", "root"),
    ("/bin/true exits", "", "exit"),
    ("the init's exit (it wakes the spawner)", "child", "spawner"),
    ("Exited (the spawner wakes the root)", "spawner", "root"),
    ("the Reply (the root wakes the front-end)", "root", "frontend"),
    ("the answer (the front-end wakes the client)", "frontend", "bench"),
)

Event = tuple[float, str, int, int, int, str, str]


def record(rounds: int, python: str, out: Path) -> dict[str, int]:
    """Run bench.spacing under perf record; its processes' pids by role."""
    env = dict(os.environ)
    if python:
        env["HOSTCAP_BENCH_PYTHON"] = python
    argv = ["perf", "record", "-q", "-a", "-k", "mono", "-o", str(out)]
    for event in EVENTS:
        argv += ["-e", event]
    argv += [sys.executable, "-m", "bench.spacing", "--only", "full", "--gaps", "0,50"]
    argv += ["--rounds", str(rounds)]
    done = subprocess.run(argv, env=env, capture_output=True, text=True, check=True)
    print(done.stdout.strip())
    line = next(x for x in done.stdout.splitlines() if x.startswith("pids "))
    pids = dict(kv.split("=") for kv in line.split()[1:])
    return {role.split("-")[0]: int(pid) for role, pid in pids.items()}


def events(data: Path) -> list[Event]:
    text = subprocess.run(
        ["perf", "script", "-i", str(data), "-F", "comm,tid,pid,cpu,time,event,trace"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    found: list[Event] = []
    for line in text.splitlines():
        m = LINE.match(line)
        if m:
            comm, pid, tid, cpu, t, name, rest = m.groups()
            found.append((float(t), comm, int(tid), int(pid), int(cpu), name, rest))
    found.sort(key=lambda e: e[0])
    return found


def analyse(ev: list[Event], pids: dict[str, int]) -> None:
    by_pid = {pid: role for role, pid in pids.items()}
    role: dict[int, str] = {}  # tid -> role
    children: set[int] = set()
    execs: list[float] = []
    exits: list[float] = []
    for t, _comm, tid, pid, _cpu, name, rest in ev:
        if pid in by_pid:
            role.setdefault(tid, by_pid[pid])
        if name == "sched:sched_wakeup_new" and (pid == pids["spawner"] or pid in children):
            child = int(re.search(r"pid=(\d+)", rest).group(1))  # type: ignore[union-attr]
            children.add(child)
            role.setdefault(child, "child")
        elif name == "sched:sched_process_exec" and pid in children and "/dev/fd/" in rest:
            execs.append(t)
            role[tid] = "cmd"
        elif name == "sched:sched_process_exit" and role.get(tid) == "cmd":
            exits.append(t)
    wakes: list[tuple[float, str, str]] = []
    for t, _comm, tid, _pid, _cpu, name, rest in ev:
        if name == "sched:sched_wakeup":
            woken = int(re.search(r"pid=(\d+)", rest).group(1))  # type: ignore[union-attr]
            if woken in role and tid in role:
                wakes.append((t, role[tid], role[woken]))
    times = [w[0] for w in wakes]

    def find(t: float, waker: str, wakee: str, lo: float, hi: float, back: bool) -> float | None:
        if back:
            i = bisect.bisect_left(times, t) - 1
            while i >= 0 and times[i] >= lo:
                if wakes[i][1:] == (waker, wakee):
                    return times[i]
                i -= 1
        else:
            i = bisect.bisect_right(times, t)
            while i < len(times) and times[i] <= hi:
                if wakes[i][1:] == (waker, wakee):
                    return times[i]
                i += 1
        return None

    chains: dict[str, list[list[float]]] = collections.defaultdict(list)
    for j, exe in enumerate(execs[1:], 1):
        kind = "spaced" if exe - execs[j - 1] > 0.03 else "back to back"
        lo, hi = exe - 0.012, exe + 0.012
        call = find(exe, "frontend", "root", lo, hi, True)
        sent = find(call, "bench", "frontend", lo, hi, True) if call else None
        order = find(exe, "root", "spawner", call, hi, True) if call else None
        go = find(exe, "root", "cmd", call, hi, True) if call else None
        record_ = find(exe, "child", "spawner", lo, hi, False)
        started = find(record_, "spawner", "root", lo, hi, False) if record_ else None
        k = bisect.bisect_left(exits, exe)
        exit_ = exits[k] if k < len(exits) and exits[k] < hi else None
        init = find(exit_, "child", "spawner", lo, hi, False) if exit_ else None
        exited = find(init, "spawner", "root", lo, hi, False) if init else None
        reply = find(exited, "root", "frontend", lo, hi, False) if exited else None
        answer = find(reply, "frontend", "bench", lo, hi, False) if reply else None
        marks = [sent, call, order, go, exe, record_, started, exit_, init, exited, reply, answer]
        if all(m is not None for m in marks):
            chains[kind].append([m for m in marks if m is not None])
    print({kind: len(c) for kind, c in chains.items()}, "spawns with every hop found")
    print(f"{'':52} {'back to back':>14} | {'spaced':>14} | step")
    print(
        f"{'event (ms from the exec; step from the line before)':52} {'at':>7}{'step':>7} | {'at':>7}{'step':>7} | diff"
    )
    for i, (step, _, _) in enumerate(HOPS):
        cells = []
        for kind in ("back to back", "spaced"):
            c = chains[kind]
            at = statistics.median((m[i] - m[4]) * 1e3 for m in c)
            dt = statistics.median((m[i] - m[i - 1]) * 1e3 for m in c) if i else 0.0
            cells.append((at, dt))
        (a1, d1), (a2, d2) = cells
        print(f"{step:52} {a1:7.2f}{d1:7.2f} | {a2:7.2f}{d2:7.2f} | {d2 - d1:+.2f}")
    for kind in ("back to back", "spaced"):
        total = statistics.median((m[-1] - m[0]) * 1e3 for m in chains[kind])
        print(f"{kind}: the client's send to its answer, p50 {total:.2f} ms")
    # What ran, on both CPUs, between the exit report and the answer.
    runs: list[tuple[float, float, str]] = []
    current: dict[int, tuple[float, str]] = {}
    for t, _comm, _tid, _pid, cpu, name, rest in ev:
        if name != "sched:sched_switch":
            continue
        m = SWITCH.search(rest)
        if m is None:
            continue
        if cpu in current:
            runs.append((current[cpu][0], t, current[cpu][1]))
        nxt, comm = int(m.group(4)), m.group(3)
        label = role.get(nxt) or (
            "idle"
            if nxt == 0
            else "kworker"
            if comm.startswith("kworker")
            else "rcu"
            if comm.startswith("rcu")
            else "other"
        )
        current[cpu] = (t, label)
    runs.sort()
    starts = [r[0] for r in runs]
    for kind in ("back to back", "spaced"):
        used: dict[str, float] = collections.defaultdict(float)
        for m in chains[kind]:
            a, b = m[9], m[11]
            i = max(0, bisect.bisect_left(starts, a) - 50)
            while i < len(runs) and runs[i][0] < b:
                s, e, label = runs[i]
                used[label] += max(0.0, min(e, b) - max(s, a))
                i += 1
        n = len(chains[kind])
        print(
            f"{kind}: CPU time on both CPUs from Exited to the answer, µs a spawn: "
            + ", ".join(
                f"{k} {v / n * 1e6:.0f}" for k, v in sorted(used.items(), key=lambda x: -x[1])
            )
        )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=150)
    parser.add_argument("--python", default="", help="the daemon's interpreter")
    args = parser.parse_args()
    print(f"load {os.getloadavg()[0]:.2f}")
    with tempfile.TemporaryDirectory(prefix="wake-trace-") as tmp:
        data = Path(tmp) / "perf.data"
        pids = record(args.rounds, args.python, data)
        analyse(events(data), pids)
    print(f"load {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
