"""python -m bench.profile [--seconds S] [--rate HZ]

Profiles a bench daemon with py-spy while it serves the load of rows 1-3:
`spawn` (one client, /bin/true back to back on the default profile),
`throughput` (8 clients) and `stream` (1 GiB of stdout, as four 256 MiB
streams). For each phase it prints the CPU each daemon process used per
spawn (or per GiB) from /proc/<pid>/stat, and py-spy's samples of the
front-end and the spawner split by where they fall (audit, cgroups, gRPC,
the spawner channel, ...), plus the top functions by own time. Raw py-spy stacks are kept in
bench/results/profile-<timestamp>/. py-spy is a dev extra (pyproject).
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import datetime
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import prctl

from bench import procfs
from bench.client import TenantClient
from bench.daemon import REPO, BenchDaemon, GiB, state_parent
from bench.frontend_ab import frontend_of
from bench.native import BenchError
from bench.stream import STREAM_OUTPUT_BYTES, daemon_stream
from bench.throughput import daemon_rate

#: (substring of a frame, category): the innermost frame that matches decides.
CATEGORIES: tuple[tuple[str, str], ...] = (
    ("hostcapd/audit/", "audit record (json, hash, write)"),
    ("sandbox/cgroups.py", "cgroup create/join/stats/remove"),
    ("sandbox/landlock.py", "landlock ruleset per spawn"),
    ("hostcapd/process/executable.py", "executable resolve/open/hash"),
    ("spawner/channel.py", "spawner channel (msgspec, sendmsg/recvmsg)"),
    ("spawner/client.py", "spawner channel (msgspec, sendmsg/recvmsg)"),
    ("_childsetup", "C set-up (clone .. exec)"),
    ("hostcapd/childsetup.py", "C set-up (clone .. exec)"),
    ("childsetup_c/", "C set-up (clone .. exec)"),
    ("spawner/maker.py", "pool maker (namespaces made, torn down)"),
    ("spawner/process.py", "spawner loop (wait4, reports)"),
    ("spawner/fresh.py", "spawner loop (wait4, reports)"),
    ("spawner/warm.py", "spawner loop (wait4, reports)"),
    ("hostcapd/process/output.py", "output buffer (head/tail)"),
    ("frontend/convert.py", "wire conversion (protobuf messages)"),
    ("frontend/peers.py", "who-asked relay (splice)"),
    ("frontend/server.py", "front-end call handlers"),
    ("service/convert.py", "channel messages (typed answers)"),
    ("bridge/", "front-end channel (msgspec, sendmsg/recvmsg)"),
    ("hostcapd/process/limits.py", "limits and config models"),
    ("pydantic", "limits and config models"),
    ("hostcapd/process/environment.py", "environment"),
    ("hostcapd/process/", "spawn lifecycle (process/)"),
    ("hostcapd/tenant.py", "spawn lifecycle (process/)"),
    ("service/process_service.py", "service (process_service.py)"),
    ("google/protobuf", "protobuf"),
    ("grpc/", "gRPC (grpc.aio, cygrpc)"),
    ("cygrpc", "gRPC (grpc.aio, cygrpc)"),
    ("asyncio/", "asyncio event loop"),
    ("selectors.py", "asyncio event loop"),
)


#: Leaf functions of a thread that waits rather than runs (py-spy's --native
#: samples show them; they are not CPU).
IDLE_LEAVES = (
    "epoll_wait",
    "epoll_pwait",  # uvloop's (libuv)
    "poll ",
    "ppoll",
    "select ",
    "pselect",
    "pthread_cond_",
    "sem_wait",
    "sem_timedwait",
    "nanosleep",
    "clock_nanosleep",
    "futex",
)
#: Native frames under which a thread sleeps on a lock or condition; and
#: the spawner's C set-up asleep until the forker cloned an init (a futex,
#: through libc's syscall()) and until the init's set-up record came (a
#: read of its pipe, until the command exec'd).
IDLE_NATIVE_WAITS = (
    "PyThread_acquire_lock_timed",
    "pthread_cond_timedwait",
    "pthread_cond_wait",
    "forker_wait (",
    "wait_init_child (",
)
#: Python frames that mean "this thread is parked waiting for work".
IDLE_FRAMES = ("_worker (concurrent/futures/thread.py:81)", "Thread.run (threading.py:982)")


def idle(stack: list[str]) -> bool:
    if not stack:
        return True
    leaf = stack[-1]
    if any(leaf.startswith(name) for name in IDLE_LEAVES):
        return True
    python = [i for i, f in enumerate(stack) if ".py:" in f]
    if not python:
        return False
    # A native leaf under a parked worker's Python frame is its futex wait.
    if stack[python[-1]] in IDLE_FRAMES and ".py:" not in leaf:
        return True
    # Below the last Python frame, a lock's or a condition's wait (a queue's
    # get, the GIL's take-back after a blocking call) is a thread asleep in
    # a futex, whatever libc address py-spy names as its leaf.
    native = stack[python[-1] + 1 :]
    return any(f.startswith(IDLE_NATIVE_WAITS) for f in native)


def category(stack: list[str]) -> str:
    for frame in reversed(stack):
        for needle, name in CATEGORIES:
            if needle in frame:
                return name
    return "other"


def _function(frame: str) -> str:
    # "name (path/to/file.py:123)" -> "name (file.py)"
    name, _, where = frame.partition(" (")
    path = where.rstrip(")").rsplit(":", 1)[0]
    return f"{name} ({'/'.join(Path(path).parts[-2:])})" if path else name


class Profile:
    """py-spy's raw stacks ("frame;frame;... count" lines) of one process."""

    def __init__(self, raw: str) -> None:
        self.stacks: list[tuple[list[str], int]] = []
        #: Samples of waiting threads, left out of every share.
        self.idle = 0
        for line in raw.splitlines():
            stack_text, _, count = line.rpartition(" ")
            if stack_text and count.isdigit():
                frames = [f for f in stack_text.split(";") if not f.startswith("process ")]
                if idle(frames):
                    self.idle += int(count)
                else:
                    self.stacks.append((frames, int(count)))

    @property
    def samples(self) -> int:
        return sum(n for _, n in self.stacks)

    def categories(self) -> list[tuple[str, int]]:
        counts: collections.Counter[str] = collections.Counter()
        for frames, n in self.stacks:
            counts[category(frames)] += n
        return counts.most_common()

    def top_self(self, k: int) -> list[tuple[str, int]]:
        counts: collections.Counter[str] = collections.Counter()
        for frames, n in self.stacks:
            if frames:
                counts[_function(frames[-1])] += n
        return counts.most_common(k)


async def _phase(
    name: str,
    daemon: BenchDaemon,
    out: Path,
    rate: int,
    load: Callable[[], Awaitable[float]],
    unit: str,
) -> str:
    helpers = daemon.helper_pids()
    # One py-spy per process: --subprocesses does not pick up the spawner.
    # ("front-end" is the root process, as named before the split.)
    roles = {"front-end": daemon.pid, "spawner": helpers["spawner"]}
    roles["tenant fe"] = frontend_of(daemon, "stream" if name == "stream" else "full")
    if "pools" in helpers:  # the spawner's pool maker (spawner/maker.py)
        roles["pools"] = helpers["pools"]
    cpu0 = {role: procfs.cpu_seconds(pid) for role, pid in roles.items()}
    spies = {
        role: subprocess.Popen(
            [
                str(Path(sys.executable).parent / "py-spy"),
                "record",
                "--pid",
                str(pid),
                "--native",
                "--rate",
                str(rate),
                "--format",
                "raw",
                "--output",
                str(out / f"{name}-{role}.txt"),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        for role, pid in roles.items()
    }
    await asyncio.sleep(1.0)  # py-spy attaches
    units = await load()
    cpu = {role: procfs.cpu_seconds(pid) - cpu0[role] for role, pid in roles.items()}
    for spy in spies.values():
        spy.send_signal(signal.SIGINT)
    profiles: dict[str, Profile] = {}
    for role, spy in spies.items():
        _, err = spy.communicate(timeout=60)
        raw = out / f"{name}-{role}.txt"
        if not raw.exists():
            raise BenchError(
                f"py-spy wrote nothing for the {role}: {err.decode(errors='replace')[-2000:]}"
            )
        profiles[role] = Profile(raw.read_text())
    per = unit.rstrip("s")
    lines = [f"== {name}: {units:g} {unit} =="]
    for role in roles:
        lines.append(
            f"  {role:<10} CPU {cpu[role] * 1e3 / units:8.3f} ms per {per}"
            f"  (py-spy samples: {profiles[role].samples} running, {profiles[role].idle} waiting)"
        )
    for role, profile in profiles.items():
        total = profile.samples
        if not total:
            continue
        lines.append(f"  {role}: where its CPU goes")
        for cat, n in profile.categories():
            share = n / total
            lines.append(
                f"    {share * 100:5.1f} %  {cpu[role] * 1e3 * share / units:7.3f} ms/{per}  {cat}"
            )
        lines.append(f"  {role}: top functions by own time")
        for fn, n in profile.top_self(12):
            lines.append(f"    {n / total * 100:5.1f} %  {fn}")
    return "\n".join(lines)


async def run(seconds: float, rate: int) -> int:
    stamp = datetime.datetime.now(datetime.UTC).strftime("%Y%m%dT%H%M%SZ")
    out = REPO / "bench" / "results" / f"profile-{stamp}"
    out.mkdir(parents=True)
    state = Path(tempfile.mkdtemp(prefix="state-", dir=state_parent()))
    daemon = BenchDaemon(state / "prof", ("full", "stream"))
    try:
        daemon.start()
        client = TenantClient(daemon.socket("full"))
        stream_client = TenantClient(daemon.socket("stream"))
        for _ in range(20):
            await client.true()

        async def sequential() -> float:
            n, deadline = 0, time.perf_counter() + seconds
            while time.perf_counter() < deadline:
                await client.true()
                n += 1
            return n

        async def concurrent() -> float:
            return (await daemon_rate(daemon.socket("full"), seconds))[0]

        async def stream() -> float:
            nbytes = STREAM_OUTPUT_BYTES // 2  # all of it streamed live
            for _ in range(GiB // nbytes):
                await daemon_stream(stream_client, daemon, nbytes)
            return 1.0

        reports = [
            await _phase("spawn", daemon, out, rate, sequential, "spawns"),
            await _phase("throughput", daemon, out, rate, concurrent, "spawns"),
            await _phase("stream", daemon, out, rate, stream, "GiBs"),
        ]
        await client.close()
        await stream_client.close()
    finally:
        daemon.stop()
        shutil.rmtree(state, ignore_errors=True)
    text = "\n\n".join(reports)
    (out / "summary.txt").write_text(text + "\n")
    print(text)
    print(f"\nraw py-spy stacks: {out.relative_to(REPO)}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.profile")
    parser.add_argument("--seconds", type=float, default=10.0, help="length of the spawn phases")
    parser.add_argument("--rate", type=int, default=100, help="py-spy samples per second")
    args = parser.parse_args(argv)
    if shutil.which("py-spy", path=str(Path(sys.executable).parent)) is None:
        print("bench.profile: py-spy is not installed (pip install -e '.[dev]')", file=sys.stderr)
        return 2
    prctl.set_child_subreaper(True)
    return asyncio.run(run(args.seconds, args.rate))


if __name__ == "__main__":
    sys.exit(main())
