"""The cost of recording each spawn's file changes (decision 0030), in one
process: one daemon, two tenants with the same profile and disk budget, one
with `fs_changes` required (`rec`), one with it off (`norec`).

    python -m bench.fs_changes [--quick] [--rounds N] [--files N] [--churn N]

- **unpack**: `tar -xf` of 10,000 small files (100 bytes each) into an empty
  directory of the tenant's workspace, one spawn, timed by the client from
  Run to result (the fs.changes record is written before the exit record,
  so before the result). Rounds alternate between the tenants; the
  directory is removed by an untimed spawn before each. Target: rec/norec
  p50 <= 1.15.
- **bare group** (the floor of the mechanism): a third tenant, `bare`, with
  `fs_changes` off, whose file system the bench itself marks with a group of
  the same flags and mask as the daemon's, read by a trivial reader (a
  process of its own that reads the queue `BATCH_SECONDS` after each
  wake-up and walks only the event headers), in the same rotation. bare/norec is what the kernel charges the
  unpack for making the events the issue needs, before any attribution: if
  it is above the target, no reader can meet it.
- **kernel floor** (`--kernel-floor`, no daemon): the same unpack by a
  plain `tar` on an image of the daemon's making (mkfs.ext4 and mount
  options), its CPU (rusage) with no group and with a bare group whose
  reader runs in another memory cgroup than the tar (as the daemon's does:
  the kernel charges each event to the group's creator's memory cgroup,
  in the writer's context), in the tar's own memory cgroup, two at once,
  read at each wake-up, with less reported (no target handle; the
  directory's handle and name alone; the file's handle alone) and with
  other masks (FAN_CLOSE_WRITE for FAN_MODIFY; no FAN_MODIFY). Needs root
  and memory cgroups the bench may make beneath its own.
- **memory bound**: one spawn of `rec` that creates and removes `--churn`
  distinct files (1,000,000 by default): the daemon's peak RSS (VmHWM)
  before and after, and what its fs.changes record says (paths listed,
  events beyond the cap, queue overflows).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from hostcap_proto.v1 import common_pb2, process_pb2
from hostcapd.sandbox.fschanges import BATCH_SECONDS, fanotify

from bench.client import TenantClient, check_exited
from bench.daemon import PROFILES, BenchDaemon, state_parent, tenant_config

MiB = 1 << 20
TENANTS = ("norec", "rec", "bare")

#: The bare group's reader (the bench's bare line and --kernel-floor's): a
#: group of argv[2] flags and argv[3] mask on argv[1]'s file system, made
#: after joining the memory cgroup argv[5] when one is named (its events are
#: charged there); it reads the queue empty argv[4] seconds after each
#: wake-up and only walks the event headers, to print how many and how many
#: bytes it read.
READER = """
import ctypes, os, select, signal, sys, time
if sys.argv[5]:
    with open(os.path.join(sys.argv[5], "cgroup.procs"), "w") as f:
        f.write("0")
from hostcapd.sandbox.fschanges import fanotify as f
fd = f._libc.fanotify_init(int(sys.argv[2]) | f.FAN_NONBLOCK, os.O_RDONLY | os.O_CLOEXEC)
assert fd >= 0 and f._libc.fanotify_mark(
    fd, f.FAN_MARK_ADD | f.FAN_MARK_FILESYSTEM, int(sys.argv[3]), -100, sys.argv[1].encode()
) == 0, os.strerror(ctypes.get_errno())
stop = []
signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
print("ready", flush=True)
poller = select.poll()
poller.register(fd, select.POLLIN)
gather, events, nbytes = float(sys.argv[4]), 0, 0
while True:
    if poller.poll(100):
        if gather:
            time.sleep(gather)
        while True:
            try:
                data = os.read(fd, f.READ_SIZE)
            except BlockingIOError:
                break
            at, nbytes = 0, nbytes + len(data)
            while at < len(data):
                at += f.META.unpack_from(data, at)[0]
                events += 1
    elif stop:
        break
print(events, nbytes, flush=True)
"""

MAKE_TAR = """
import os, sys, tarfile
root, n = sys.argv[1], int(sys.argv[2])
src = os.path.join(root, "src")
os.makedirs(src, exist_ok=True)
for i in range(n):
    d = os.path.join(src, f"d{i // 500:03d}")
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, f"f{i:05d}.txt"), "w") as f:
        f.write("x" * 100)
with tarfile.open(os.path.join(root, "files.tar"), "w") as t:
    t.add(src, arcname="src")
"""

CHURN = """
import os, sys
d = os.path.join(sys.argv[1], "churn")
os.makedirs(d, exist_ok=True)
for i in range(int(sys.argv[2])):
    p = os.path.join(d, f"f{i:07d}")
    os.close(os.open(p, os.O_CREAT | os.O_WRONLY, 0o600))
    os.unlink(p)
"""


def _cpu(pid: int) -> float:
    """The daemon's user + system CPU seconds so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _vm(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    return 0


async def _run(client: TenantClient, argv: list[str]) -> tuple[float, process_pb2.RunResult]:
    request = process_pb2.SpawnRequest(
        argv=argv, limits=common_pb2.Limits(wall_seconds=600, cpu_seconds=600)
    )
    started = time.perf_counter()
    result: process_pb2.RunResult = await client.process.Run(request)
    took = time.perf_counter() - started
    check_exited(result.exited, " ".join(argv[:3]))
    return took, result


def _record(daemon: BenchDaemon, spawn_id: str) -> dict[str, object] | None:
    path = Path(daemon.config["audit"]["path"])
    for line in path.read_text().splitlines():
        record = json.loads(line)
        if record.get("event") == "fs.changes" and record.get("spawn_id") == spawn_id:
            return dict(record)
    return None


async def main(rounds: int, files: int, churn: int) -> int:
    state = Path(tempfile.mkdtemp(prefix="fs-changes-", dir=state_parent()))
    daemon = BenchDaemon(state / "d", ())
    for name, level in (("norec", "off"), ("rec", "required"), ("bare", "off")):
        config = tenant_config(state / "d", name, {**PROFILES["full"], "fs_changes": level})
        config["disk"] = {"budget_bytes": 1024 * MiB, "inodes": 262144}
        daemon.config["tenants"][name] = config
    daemon.tenants = TENANTS
    daemon.start(timeout=120)
    clients = {name: TenantClient(daemon.socket(name)) for name in TENANTS}
    bare = subprocess.Popen(
        [sys.executable, "-c", READER, str(daemon.workspace("bare")), str(fanotify.INIT_FLAGS), str(fanotify.MASK), str(BATCH_SECONDS), ""],
        stdout=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    try:
        assert bare.stdout is not None
        if bare.stdout.readline().strip() != "ready":
            raise RuntimeError("the bare group's reader did not start")
        for name in TENANTS:
            ws = str(daemon.workspace(name))
            await _run(clients[name], ["python3", "-I", "-c", MAKE_TAR, ws, str(files)])
        samples: dict[str, list[float]] = {name: [] for name in TENANTS}
        cpu: dict[str, list[float]] = {name: [] for name in TENANTS}
        #: The unpack's own CPU (its rusage: user + system, the tree's), which
        #: the machine's load does not inflate as it does wall time.
        spawn_cpu: dict[str, list[float]] = {name: [] for name in TENANTS}
        listed: list[int] = []
        for index in range(rounds):
            turn = index % len(TENANTS)
            order = TENANTS[turn:] + TENANTS[:turn]
            for name in order:
                ws = str(daemon.workspace(name))
                await _run(clients[name], ["rm", "-rf", f"{ws}/out"])
                before = _cpu(daemon.pid)
                took, result = await _run(
                    clients[name], ["sh", "-c", f'mkdir "{ws}/out" && tar -xf "{ws}/files.tar" -C "{ws}/out"']
                )  # fmt: skip
                samples[name].append(took)
                cpu[name].append(_cpu(daemon.pid) - before)
                used = result.exited.rusage
                spawn_cpu[name].append(used.user_seconds + used.system_seconds)
                if name == "rec":
                    record = _record(daemon, result.started.spawn_id)
                    assert record is not None, "no fs.changes record"
                    listed.append(int(str(record["paths_listed"])))
        bare.send_signal(signal.SIGTERM)
        bare_events = int(bare.communicate(timeout=30)[0].split()[0])
        p50 = {name: statistics.median(v) for name, v in samples.items()}
        print(
            f"unpack {files} files ({rounds} rounds each, rotating): "
            f"norec p50 {p50['norec'] * 1000:.0f} ms, rec p50 {p50['rec'] * 1000:.0f} ms, "
            f"rec/norec {p50['rec'] / p50['norec']:.2f} (target <= 1.15); "
            f"rec lists {min(listed)}-{max(listed)} paths per record"
        )
        print(
            f"  bare group (the daemon's flags and mask, a trivial reader, no attribution): "
            f"p50 {p50['bare'] * 1000:.0f} ms, bare/norec {p50['bare'] / p50['norec']:.2f}, "
            f"rec/bare {p50['rec'] / p50['bare']:.2f}; "
            f"{bare_events / rounds:.0f} events read per round (its unpack and clean-up)"
        )
        own = {name: statistics.median(v) for name, v in spawn_cpu.items()}
        print(
            f"the unpack's own CPU (rusage, p50): norec {own['norec'] * 1000:.0f} ms, "
            f"rec {own['rec'] * 1000:.0f} ms, bare {own['bare'] * 1000:.0f} ms; "
            f"rec/norec {own['rec'] / own['norec']:.2f}, bare/norec "
            f"{own['bare'] / own['norec']:.2f} (the kernel's fanotify events are charged "
            "to the process that makes them)"
        )
        print(
            "daemon CPU per unpack (root process, p50): "
            f"norec {statistics.median(cpu['norec']) * 1000:.0f} ms, "
            f"rec {statistics.median(cpu['rec']) * 1000:.0f} ms, "
            f"bare {statistics.median(cpu['bare']) * 1000:.0f} ms"
        )
        pid = daemon.pid
        before_rss, before_hwm = _vm(pid, "VmRSS"), _vm(pid, "VmHWM")
        ws = str(daemon.workspace("rec"))
        took, result = await _run(clients["rec"], ["python3", "-I", "-c", CHURN, ws, str(churn)])
        record = _record(daemon, result.started.spawn_id)
        assert record is not None, "no fs.changes record"
        after_rss, after_hwm = _vm(pid, "VmRSS"), _vm(pid, "VmHWM")
        print(
            f"memory bound: a spawn creating and removing {churn} files ({took:.1f} s): daemon "
            f"RSS {before_rss / MiB:.1f} -> {after_rss / MiB:.1f} MiB, peak {before_hwm / MiB:.1f} "
            f"-> {after_hwm / MiB:.1f} MiB; its record lists {record['paths_listed']} paths, "
            f"beyond {record['events_beyond']}, queue overflows {record['queue_overflows']}, "
            f"complete {record['complete']}"
        )
    finally:
        if bare.poll() is None:
            bare.kill()
            bare.wait()
        for c in clients.values():
            await c.close()
        daemon.stop()
        shutil.rmtree(state, ignore_errors=True)
    return 0


#: --kernel-floor's lines: (name, its groups: each its init flags, mask, the
#: memory cgroup its reader makes it in, "other" or the tar's, "writer", and
#: how long its reader lets events gather after a wake-up).
_FAN = fanotify
FAN_CLOSE_WRITE = 0x8
_DAEMONS = (_FAN.INIT_FLAGS, _FAN.MASK)
_GATHER = BATCH_SECONDS
_FLAGS = _FAN.FAN_CLASS_NOTIF | _FAN.FAN_CLOEXEC | _FAN.FAN_NONBLOCK
_DFID_NAME = _FLAGS | _FAN.FAN_REPORT_DIR_FID | _FAN.FAN_REPORT_NAME
_FID_ONLY = _FLAGS | _FAN.FAN_REPORT_FID
FLOOR_LINES: tuple[tuple[str, tuple[tuple[int, int, str, float], ...]], ...] = (
    ("no group", ()),
    (
        "the daemon's group, made in another memcg (as the daemon's)",
        ((*_DAEMONS, "other", _GATHER),),
    ),
    ("the daemon's group, made in the tar's memcg", ((*_DAEMONS, "writer", _GATHER),)),
    (
        "two such groups, one in each (a group per spawn, two spawns)",
        ((*_DAEMONS, "writer", _GATHER), (*_DAEMONS, "other", _GATHER)),
    ),
    ("the daemon's group, read at each wake-up (no gathering)", ((*_DAEMONS, "other", 0.0),)),
    (
        "without FAN_REPORT_TARGET_FID, another memcg",
        ((_FAN.INIT_FLAGS & ~_FAN.FAN_REPORT_TARGET_FID, _FAN.MASK, "other", _GATHER),),
    ),
    (
        "the directory's handle and the name only (FAN_REPORT_DFID_NAME), another memcg",
        ((_DFID_NAME, _FAN.MASK, "other", _GATHER),),
    ),
    (
        "the file's handle only, no name (FAN_REPORT_FID), another memcg",
        ((_FID_ONLY, _FAN.MASK, "other", _GATHER),),
    ),
    (
        "FAN_CLOSE_WRITE for FAN_MODIFY, another memcg",
        ((_FAN.INIT_FLAGS, (_FAN.MASK & ~_FAN.FAN_MODIFY) | FAN_CLOSE_WRITE, "other", _GATHER),),
    ),
    (
        "no FAN_MODIFY (dirent events only), another memcg",
        ((_FAN.INIT_FLAGS, _FAN.MASK & ~_FAN.FAN_MODIFY, "other", _GATHER),),
    ),
)


def _memory_cgroup() -> Path:
    """This process's memory cgroup directory (v1 memory hierarchy or v2)."""
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        if "memory" in controllers.split(","):
            return Path("/sys/fs/cgroup/memory") / path.lstrip("/")
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        if line.startswith("0::"):
            return Path("/sys/fs/cgroup") / line[3:].lstrip("/")
    raise RuntimeError("no memory cgroup")


def kernel_floor(rounds: int, files: int) -> int:
    """The unpack's CPU under each FLOOR_LINES group, rounds rotating."""
    state = Path(tempfile.mkdtemp(prefix="fs-floor-", dir=state_parent()))
    image, mount = state / "img", state / "mnt"
    base = _memory_cgroup() / f"fs-floor-{os.getpid()}"
    made: list[Path] = []
    mounted = False
    try:
        for part in ("", "writer", "other"):
            (base / part).mkdir()
            made.insert(0, base / part)
            if part == "" and (base / "cgroup.subtree_control").exists():  # v2
                with contextlib.suppress(OSError):
                    (base / "cgroup.subtree_control").write_text("+memory")
        if not any((base / "writer" / f).exists() for f in ("memory.current", "memory.usage_in_bytes")):  # fmt: skip
            raise RuntimeError(
                f"{base}: its children get no memory controller of their own "
                "(a v1 memory hierarchy, or a v2 cgroup that may delegate memory, is needed)"
            )
        with open(image, "wb") as f:
            f.truncate(1024 * MiB)
        extended = "nodiscard,lazy_itable_init=0,lazy_journal_init=0"
        subprocess.run(["mkfs.ext4", "-q", "-F", "-m", "0", "-E", extended, "-N", "262144", str(image)], check=True)  # fmt: skip
        mount.mkdir()
        subprocess.run(["mount", "-t", "ext4", "-o", "loop,nodev,nosuid,noatime", str(image), str(mount)], check=True)  # fmt: skip
        mounted = True
        subprocess.run([sys.executable, "-I", "-c", MAKE_TAR, str(mount), str(files)], check=True)
        unpack = f'echo $$ > "{base}/writer/cgroup.procs" && mkdir "{mount}/out" && exec tar -xf "{mount}/files.tar" -C "{mount}/out"'  # fmt: skip
        used: dict[str, list[float]] = {name: [] for name, _ in FLOOR_LINES}
        read: dict[str, list[tuple[int, int]]] = {name: [] for name, _ in FLOOR_LINES}
        for index in range(rounds):
            turn = index % len(FLOOR_LINES)
            for name, groups in FLOOR_LINES[turn:] + FLOOR_LINES[:turn]:
                shutil.rmtree(mount / "out", ignore_errors=True)
                os.sync()
                readers = []
                for flags, mask, memcg, gather in groups:
                    reader = subprocess.Popen(
                        [sys.executable, "-c", READER, str(mount), str(flags), str(mask), str(gather), str(base / memcg)],
                        stdout=subprocess.PIPE, text=True,
                    )  # fmt: skip
                    readers.append(reader)
                    assert reader.stdout is not None and reader.stdout.readline() == "ready\n"
                tar = subprocess.Popen(["sh", "-c", unpack])
                _, status, rusage = os.wait4(tar.pid, 0)
                tar.returncode = os.waitstatus_to_exitcode(status)
                time.sleep(2 * BATCH_SECONDS if readers else 0)
                for reader in readers[:1]:
                    reader.terminate()
                    events, nbytes = reader.communicate(timeout=10)[0].split()
                    read[name].append((int(events), int(nbytes)))
                for reader in readers[1:]:
                    reader.terminate()
                    reader.wait(10)
                if status != 0:
                    raise RuntimeError(f"the unpack failed ({status})")
                used[name].append(rusage.ru_utime + rusage.ru_stime)
        none = statistics.median(used["no group"])
        print(
            f"kernel floor: a plain tar of {files} files ({rounds} rounds each, rotating), its own CPU (rusage, p50):"
        )
        for name, _ in FLOOR_LINES:
            p50 = statistics.median(used[name])
            events = ""
            if read[name]:
                n = statistics.median(e for e, _ in read[name])
                size = statistics.median(b / e for e, b in read[name] if e)
                events = f", {n:.0f} events read, {size:.0f} bytes each"
            print(f"  {name}: {p50 * 1000:.0f} ms, x{p50 / none:.3f}{events}")
    finally:
        if mounted:
            subprocess.run(["umount", str(mount)], check=False)
        for path in made:
            with contextlib.suppress(OSError):
                path.rmdir()
        shutil.rmtree(state, ignore_errors=True)
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="5 rounds, 100,000 churned files")
    parser.add_argument("--rounds", type=int, default=None)
    parser.add_argument("--files", type=int, default=10_000)
    parser.add_argument("--churn", type=int, default=None)
    parser.add_argument(
        "--kernel-floor", action="store_true", help="the kernel's cost alone (no daemon)"
    )
    args = parser.parse_args()
    rounds = args.rounds or (5 if args.quick else 15)
    churn = args.churn or (100_000 if args.quick else 1_000_000)
    if args.kernel_floor:
        sys.exit(kernel_floor(rounds, args.files))
    sys.exit(asyncio.run(main(rounds, args.files, churn)))
