"""What the reliability tests measure about a running hostcapd, from /proc and
cgroupfs: its descendants, fds, threads, RSS, zombies, the spawn cgroups in
its subtree and the temp files it may leave; plus the small helpers the
fault tests share (a spawn's Started, raw sockets, a tmpfs to fill)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
from hostcap_proto.audit import parse_line, verify_files
from hostcap_proto.v1 import common_pb2, process_pb2, process_pb2_grpc
from hostcapd.process.cgroup_pool import KEEP
from support.daemon import Daemon, children_of, open_fds, waiting_warm_child, zombies_under
from support.process import Client

CGROUP_ROOT = Path("/sys/fs/cgroup")
SPAWN_PREFIX = "spawn-"
WARM_PREFIX = "warm-"
#: Made ahead for fresh spawns (hostcapd.process.cgroup_pool): a runtime
#: keeps up to POOL_SIZE of them, empty, in its tenant's cgroup.
READY_PREFIX = "ready-"
POOL_SIZE = 2
SPAWN_PREFIXES = (SPAWN_PREFIX, WARM_PREFIX, READY_PREFIX)
TENANT_PREFIX = "tenant-"
#: Where the test daemons' temp files go (TMPDIR), so leaks are attributable.
TMP_DIR_NAME = "tmp"


def daemon_env(daemon_state: Path, marker: str = "") -> dict[str, str]:
    """The daemon's environment for these tests: a private TMPDIR (so any temp
    file it makes is found), and the marker when the test wants to find it."""
    tmp = daemon_state / TMP_DIR_NAME
    tmp.mkdir(exist_ok=True)
    env = {"TMPDIR": str(tmp)}
    if marker:
        env["TEST_MARKER"] = marker
    return env


# ---- processes ---------------------------------------------------------------


def descendants(pid: int) -> set[int]:
    """Every live descendant of `pid` (children, grandchildren, ...)."""
    found: set[int] = set()
    stack = [pid]
    while stack:
        current = stack.pop()
        try:
            kids = children_of(current)
        except OSError:
            continue
        for child in kids:
            if child not in found:
                found.add(child)
                stack.append(child)
    return found


def alive(pid: int) -> bool:
    """True while `pid` exists and is not a zombie."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


def wait_dead(pids: set[int], timeout: float) -> set[int]:
    """Wait until none of `pids` is alive (or `timeout`); the survivors."""
    deadline = time.monotonic() + timeout
    while True:
        survivors = {p for p in pids if alive(p)}
        if not survivors or time.monotonic() > deadline:
            return survivors
        time.sleep(0.02)


def status_field(pid: int, name: str) -> int:
    """A numeric field of /proc/<pid>/status (VmRSS in bytes, Threads as a count)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key == name:
            parts = value.split()
            number = int(parts[0])
            return number * 1024 if len(parts) > 1 and parts[1] == "kB" else number
    raise KeyError(f"{name} not in /proc/{pid}/status")


def vm_rss(pid: int) -> int:
    return status_field(pid, "VmRSS")


def thread_count(pid: int) -> int:
    return status_field(pid, "Threads")


# ---- cgroups -----------------------------------------------------------------


def cgroup_subtrees(daemon: Daemon) -> list[Path]:
    """The daemon's spawn subtree in every cgroup hierarchy it uses: its own
    cgroup (from /proc/<pid>/cgroup) joined with the config's cgroup_parent,
    wherever that directory exists under /sys/fs/cgroup. Call while it runs."""
    parent = daemon.config["daemon"]["cgroup_parent"]
    own = [
        line.split(":", 2)[2]
        for line in Path(f"/proc/{daemon.pid}/cgroup").read_text().splitlines()
        if line.count(":") >= 2
    ]
    found: dict[Path, None] = {}
    for mount in sorted(CGROUP_ROOT.iterdir()):
        if not mount.is_dir() or mount.is_symlink():
            continue
        for path in own:
            # On v2 the daemon moves itself into <subtree>/daemon; strip that leaf.
            for base in {path, path.removesuffix(f"/{parent}/daemon")}:
                candidate = mount / base.lstrip("/") / parent
                if candidate.is_dir():
                    found[candidate.resolve()] = None
    return list(found)


def _cgroups_in(subtree: Path) -> list[os.DirEntry[str]]:
    """The cgroups in `subtree` and in its tenant cgroups (tenant-<name>,
    which hold each tenant's spawns)."""
    found: list[os.DirEntry[str]] = []
    with contextlib.suppress(FileNotFoundError):
        for entry in os.scandir(subtree):
            if not entry.is_dir(follow_symlinks=False):
                continue
            found.append(entry)
            if entry.name.startswith(TENANT_PREFIX):
                with contextlib.suppress(FileNotFoundError):
                    found.extend(
                        e for e in os.scandir(entry.path) if e.is_dir(follow_symlinks=False)
                    )
    return found


def cgroup_ids(subtrees: list[Path], *prefixes: str) -> set[str]:
    """The ids of every cgroup named <prefix><id> in `subtrees`, whatever it
    holds (after a crash a spawn's ready-<id> is as empty as the pool's)."""
    return {
        entry.name[len(prefix) :]
        for subtree in subtrees
        for entry in _cgroups_in(subtree)
        for prefix in prefixes
        if entry.name.startswith(prefix)
    }


def spawn_cgroups(subtrees: list[Path]) -> set[str]:
    """Spawn ids that still have a cgroup in any of `subtrees` beyond what the
    daemon keeps: any spawn-, warm- or ready-<id> with members but those a
    warm child waits in (a recycled cgroup, whatever its name, may hold the
    next warm child: hostcapd.process.cgroup_pool), and the empty ones past
    what a runtime keeps in its directory (POOL_SIZE made ahead, KEEP
    recycled: more are a leak)."""
    names: set[str] = set()
    for subtree in subtrees:
        empty: dict[str, list[str]] = {}
        for entry in _cgroups_in(subtree):
            prefix = next((p for p in SPAWN_PREFIXES if entry.name.startswith(p)), None)
            if prefix is None:
                continue
            name, path = entry.name[len(prefix) :], Path(entry.path)
            if _members(path):
                if not _waiting(path):
                    names.add(name)
            else:
                empty.setdefault(str(path.parent), []).append(name)
        for kept in empty.values():
            names.update(sorted(kept)[POOL_SIZE + KEEP :])
    return names


def waiting_warm_cgroups(subtrees: list[Path]) -> set[str]:
    """Ids of the warm-<id> cgroups a warm child waits in."""
    names: set[str] = set()
    for subtree in subtrees:
        names.update(
            entry.name[len(WARM_PREFIX) :]
            for entry in _cgroups_in(subtree)
            if entry.name.startswith(WARM_PREFIX) and _waiting(Path(entry.path))
        )
    return names


def _members(cgroup: Path) -> list[str]:
    try:
        return (cgroup / "cgroup.procs").read_text().split()
    except OSError:
        return []


def _waiting(cgroup: Path) -> bool:
    """A warm child waits in it: its members (its init and the command's
    process cloned ahead, or the child alone)."""
    try:
        members = (cgroup / "cgroup.procs").read_text().split()
    except OSError:
        return False
    return 1 <= len(members) <= 2 and all(waiting_warm_child(int(m)) for m in members)


def wait_cgroups_gone(subtrees: list[Path], timeout: float) -> set[str]:
    deadline = time.monotonic() + timeout
    while True:
        left = spawn_cgroups(subtrees)
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.05)


# ---- the daemon's footprint --------------------------------------------------


def temp_files(daemon: Daemon) -> set[str]:
    """Files the daemon may leave half done: anything in its private TMPDIR,
    `.hostcap-*` write temps in the tenant roots, temp sockets in the run dir."""
    found: set[str] = set()
    tmp = daemon.state / TMP_DIR_NAME
    if tmp.is_dir():
        found.update(str(p) for p in tmp.rglob("*"))
    for tenant in daemon.config["tenants"].values():
        for root in tenant["roots"]:
            found.update(str(p) for p in Path(root["path"]).rglob(".hostcap-*"))
    run = Path(daemon.config["daemon"]["runtime_dir"])
    if run.is_dir():
        found.update(str(p) for p in run.glob(".*.tmp"))
    return found


@dataclass(frozen=True)
class Footprint:
    """What a daemon holds at one moment, to compare before and after a load."""

    fds: frozenset[str]
    threads: int
    rss: int
    zombies: tuple[int, ...]
    cgroups: frozenset[str]
    temp_files: frozenset[str]
    helpers: frozenset[int]

    @classmethod
    def of(cls, daemon: Daemon, subtrees: list[Path]) -> Footprint:
        return cls(
            fds=frozenset(open_fds(daemon.pid)),
            threads=thread_count(daemon.pid),
            rss=vm_rss(daemon.pid),
            zombies=tuple(zombies_under(daemon.pid)),
            cgroups=frozenset(spawn_cgroups(subtrees)),
            temp_files=frozenset(temp_files(daemon)),
            helpers=frozenset(children_of(daemon.pid)),
        )


def fd_kinds(fds: frozenset[str] | set[str]) -> dict[str, int]:
    """Count fds by what they point at (pipe, socket, anon_inode:[eventfd], a path)."""
    kinds: dict[str, int] = {}
    for entry in fds:
        target = entry.split(":", 1)[1]
        kind = target.split(":", 1)[0] if ":" in target and not target.startswith("/") else target
        kinds[kind] = kinds.get(kind, 0) + 1
    return kinds


# ---- spawns over the wire ----------------------------------------------------

#: A client in its own process: starts a streaming spawn, prints its id, reads on.
STREAMING_CLIENT = r"""
import asyncio, sys
import grpc
from hostcap_proto.v1 import process_pb2, process_pb2_grpc

async def main() -> None:
    channel = grpc.aio.insecure_channel("unix:" + sys.argv[1])
    stub = process_pb2_grpc.ProcessServiceStub(channel)
    call = stub.Spawn(process_pb2.SpawnRequest(
        argv=["sh", "-c", sys.argv[2]], env={"TEST_MARKER": sys.argv[3]}))
    async for event in call:
        if event.WhichOneof("event") == "started":
            print(event.started.spawn_id, flush=True)

asyncio.run(main())
"""

#: What the hostcap client library accepts (client/hostcap/grpc_host.py).
CLIENT_MAX_MESSAGE = 512 * 1024 * 1024


class WideClient(Client):
    """The test client with the hostcap client library's message ceiling
    instead of gRPC's 4 MiB default (for spawns with big output windows)."""

    def __init__(self, socket: Path) -> None:
        self.channel = grpc.aio.insecure_channel(
            f"unix:{socket}",
            options=[
                ("grpc.max_receive_message_length", CLIENT_MAX_MESSAGE),
                ("grpc.max_send_message_length", CLIENT_MAX_MESSAGE),
            ],
        )
        self.stub = process_pb2_grpc.ProcessServiceStub(self.channel)  # type: ignore[no-untyped-call]


async def first_started(call: Any) -> process_pb2.Started:
    """Read a streaming Spawn call up to its Started event."""
    async for event in call:
        if event.WhichOneof("event") == "started":
            started: process_pb2.Started = event.started
            return started
        raise AssertionError(f"expected Started first, got {event}")
    raise AssertionError("the call ended before Started")


async def wait_for(predicate: Any, timeout: float, what: str) -> None:
    """Poll `predicate()` until it is true; fail naming `what` after `timeout`."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.02)


async def health_problem(daemon: Daemon, tenant: str | None = None) -> str:
    """'' when the daemon runs and a fresh client can run a command through
    it; otherwise what went wrong."""
    if daemon.proc is None or daemon.proc.poll() is not None:
        return f"the daemon is not running (exit status {daemon.proc and daemon.proc.returncode})"
    client = Client(daemon.socket_of(tenant) if tenant else daemon.socket)
    try:
        result = await client.run("echo", "alive")
    except grpc.aio.AioRpcError as error:
        return f"echo was refused: {error.code().name}: {error.details()}"
    finally:
        await client.close()
    if result.exited.outcome != common_pb2.EXITED or result.stdout != b"alive\n":
        return f"echo did not run: {result.exited}"
    return ""


async def wait_healthy(daemon: Daemon, timeout: float, tenant: str | None = None) -> str:
    """Retry health_problem until the daemon is healthy ('') or `timeout`
    passes (then the last problem). For recoveries that take a moment."""
    deadline = time.monotonic() + timeout
    while True:
        problem = await health_problem(daemon, tenant)
        if not problem or time.monotonic() > deadline:
            return problem
        await asyncio.sleep(0.1)


def audit_log(daemon: Daemon) -> list[dict[str, Any]]:
    """Every complete record of the daemon's current audit file, strictly
    parsed. Lines end at b"\\n" only: the writer stores non-ASCII raw, so a
    record may hold U+2028 or U+0085, which str.splitlines() would cut."""
    lines = daemon.audit_path.read_bytes().split(b"\n")[:-1]
    return [parse_line(line) for line in lines]


def exit_records(daemon: Daemon) -> dict[str, dict[str, Any]]:
    """The process.exit record of each spawn id in the audit log."""
    return {r["spawn_id"]: r for r in audit_log(daemon) if r["event"] == "process.exit"}


def exec_records(daemon: Daemon) -> dict[str, dict[str, Any]]:
    """The process.exec record of each spawn id in the audit log."""
    return {r["spawn_id"]: r for r in audit_log(daemon) if r["event"] == "process.exec"}


def audit_chain_intact(daemon: Daemon) -> str:
    """'' when the audit chain verifies, else the first failure."""
    report = verify_files([daemon.audit_path])
    return "" if report.ok else str(report.failure)


# ---- a small tmpfs to fill ---------------------------------------------------


@contextlib.contextmanager
def small_tmpfs(path: Path, size: str) -> Iterator[Path]:
    """Mount a tmpfs of `size` (e.g. "1m") at `path`; lazily unmounted after."""
    path.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size},mode=0755", "tmpfs", str(path)], check=True
    )
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


def fill(directory: Path, name: str = "filler") -> Path:
    """Fill the file system of `directory` until ENOSPC; returns the filler file."""
    filler = directory / name
    block = b"\0" * (64 * 1024)
    with open(filler, "wb", buffering=0) as out:
        while True:
            try:
                out.write(block)
            except OSError:
                break
        # The last partial pages too, byte by byte in small steps.
        for step in (4096, 512, 1):
            while True:
                try:
                    out.write(b"\0" * step)
                except OSError:
                    break
    return filler
