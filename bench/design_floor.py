"""The sandbox side of the design floors (issue 35): the least any
implementation of hostcapd's design must pay between the request's arrival
on the privileged side and the command's reaping, measured in the bench
process. bench/README.md, "The floors of the design", says why each part is
required; row 1 adds the relay's round trip (bench/floor_servers.py `relay`).

    floor = DesignFloor(daemon)
    floor.calibrate()  # the exec record's size, from the daemon's own log
    floor.fresh()     # durable append overlapped with the C set-up, until reaped
    floor.warm()      # a child set up ahead: given its request, append, go, reaped
    floor.environment()  # the set-up joining an open environment's namespaces
    floor.minimal()   # the `minimal` profile's set-up, with the same append
    floor.append()    # the durable append alone (O_APPEND write + fdatasync)

Each returns seconds. The write-ahead exec record must be durable before the
command runs, not before its set-up: every spawn here gives the child a go
fd, as the daemon does, and writes the go once its fdatasync returned, so
the append and the set-up overlap as far as the design lets them (a thread
appends and writes the go while the caller waits in the C set-up, which
releases the GIL; a warm child is given its request first, then the append
and the go). `cpu_ms(kind)` is the calling thread's CPU per spawn (the
spawner's share of a floor; the child's own set-up and the forker are the
sandbox's, as in row 2's split) or, for "append", per durable append.

The sandbox preparation (profile, pools, identity) is bench/sandbox_floor.py's
`SandboxFloor`, used through its attributes; nothing of a daemon runs here.
"""

from __future__ import annotations

import json
import os
import socket
import statistics
import threading
import time
from collections.abc import Callable
from pathlib import Path

from hostcapd import childsetup
from hostcapd.spawner import environments, init_report
from hostcapd.spawner.netns import CLONE_NEWNET

from bench.daemon import BenchDaemon
from bench.native import BenchError
from bench.sandbox_floor import TRUE, SandboxFloor

CLONE_NEWNS = 0x00020000
#: The exec record's size when the daemon's log has none yet (issue 35's brief).
RECORD_BYTES = 700
#: The floor's own audit file, beside the daemon's log (the same filesystem).
FLOOR_LOG = "design-floor.jsonl"


def exec_record_bytes(audit: Path) -> int:
    """The median size of the `process.exec` records in a daemon's audit log
    (with its newline), or RECORD_BYTES if it has none."""
    sizes = []
    try:
        with audit.open("rb") as log:
            for line in log:
                if b'"process.exec"' in line:
                    try:
                        if json.loads(line).get("event") == "process.exec":
                            sizes.append(len(line))
                    except ValueError:
                        continue
    except OSError:
        return RECORD_BYTES
    return int(statistics.median(sizes)) if sizes else RECORD_BYTES


class _Appender:
    """A thread that appends the record and then writes a spawn's go, while
    the caller waits in the set-up (the C releases the GIL there): the
    root's append running beside the spawner's set-up, as in the daemon."""

    def __init__(self, append: Callable[[], None]) -> None:
        self._append = append
        self._kick_read, self._kick_write = os.pipe2(os.O_CLOEXEC)
        self.go = -1
        self.done = threading.Event()
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="floor-append", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while os.read(self._kick_read, 1):
            try:
                self._append()
            except BaseException as error:  # reported by the caller
                self.error = error
            finally:
                os.write(self.go, b"g")
                self.done.set()

    def kick(self, go: int) -> None:
        self.done.clear()
        self.go = go
        os.write(self._kick_write, b"k")

    def close(self) -> None:
        os.close(self._kick_write)
        self._thread.join(5)
        os.close(self._kick_read)


class DesignFloor:
    def __init__(self, daemon: BenchDaemon) -> None:
        self.sandbox = SandboxFloor(daemon, "nocg")
        self.minimal_sandbox = SandboxFloor(daemon, "minimal")
        log_dir = daemon.state / "log"
        log_dir.mkdir(parents=True, exist_ok=True)
        self.log_path = log_dir / FLOOR_LOG
        #: The daemon's own audit log (its exec records' size: `calibrate`).
        self.audit = log_dir / "audit.jsonl"
        self.log = os.open(
            self.log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o600
        )
        self.record = self._record(RECORD_BYTES)
        self.env = environments.make(self.sandbox.message)
        if self.env.failed:
            raise BenchError(f"design floor: {self.env.failed}")
        #: The calling thread's CPU seconds of each spawn, by kind.
        self.cpu: dict[str, list[float]] = {}
        self._warm: tuple[int, int, int, tuple[int, int]] | None = None
        self._appender = _Appender(self._append)

    @staticmethod
    def _record(size: int) -> bytes:
        return b"{" + b"x" * max(size - 3, 0) + b"}\n"

    def calibrate(self) -> int:
        """Size the floor's record as the daemon's exec records are."""
        size = exec_record_bytes(self.audit)
        self.record = self._record(size)
        return size

    # --- the parts --------------------------------------------------------

    def _append(self) -> None:
        os.write(self.log, self.record)
        os.fdatasync(self.log)

    def append(self) -> float:
        """One durable append alone (the exec record's write-ahead cost)."""
        cpu = time.thread_time()
        start = time.perf_counter()
        self._append()
        seconds = time.perf_counter() - start
        self.cpu.setdefault("append", []).append(time.thread_time() - cpu)
        return seconds

    def _gated(self, kind: str, sf: SandboxFloor, *, environment: bool = False) -> float:
        """A fresh child whose set-up runs while the caller appends the
        record; the go once it is durable; until the child is reaped."""
        pooled = sf.profile.ns.pooled_mounts
        mntns_fd = netns_fd = ipcns_fd = -1
        if environment:  # its namespaces exist; its mount copy was made while idle
            netns_fd, ipcns_fd = self.env.netns, self.env.ipcns
            if self.env.mntns >= 0:
                mntns_fd = childsetup.mount_namespace(pooled, self.env.mntns)
        elif sf.message.clone_flags & (CLONE_NEWNS | CLONE_NEWNET):
            sf.mntns.fill_one("floor", list(pooled))
            sf.netns.fill_one()
            mntns_fd, netns_fd = sf.mntns.take("floor"), sf.netns.take()
        owned_netns = -1 if environment else netns_fd
        exe = os.open(TRUE, os.O_RDONLY | os.O_CLOEXEC)
        null = os.open("/dev/null", os.O_RDWR | os.O_CLOEXEC)
        go_read, go_write = os.pipe2(os.O_CLOEXEC)
        ruleset = sf.profile.new_ruleset() if sf.profile.has("landlock") else -1
        report = -1
        try:
            plan = sf.plan(
                go_fd=go_read,
                exe=exe,
                null=null,
                ruleset=ruleset,
                netns_fd=netns_fd,
                mntns_fd=mntns_fd,
                ipcns_fd=ipcns_fd,
            )
            cpu = time.thread_time()
            start = time.perf_counter()
            self._appender.kick(go_write)
            pid, report = childsetup.spawn(plan)
            _, status = os.waitpid(pid, 0)
            seconds = time.perf_counter() - start
            self.cpu.setdefault(kind, []).append(time.thread_time() - cpu)
        finally:
            self._appender.done.wait(10)
            for fd in (exe, null, go_read, go_write, mntns_fd, owned_netns, ruleset, report):
                if fd >= 0:
                    os.close(fd)
        if self._appender.error is not None:
            raise BenchError(f"design floor: the append failed: {self._appender.error}")
        if os.waitstatus_to_exitcode(status) != 0:
            raise BenchError(f"design floor ({kind}): /bin/true ended with status {status:#x}")
        return seconds

    def fresh(self) -> float:
        """The default profile's set-up (pooled namespaces, as the spawner's)."""
        return self._gated("fresh", self.sandbox)

    def environment(self) -> float:
        """The same, joining an open environment's net, IPC and mount namespaces."""
        return self._gated("environment", self.sandbox, environment=True)

    def minimal(self) -> float:
        """The `minimal` profile's set-up (rlimits, uid drop, exec by fd)."""
        return self._gated("minimal", self.minimal_sandbox)

    def _make_warm(self) -> None:
        """A warm child of the default profile, made and ready (off the clock,
        as the spawner makes one while idle)."""
        sf = self.sandbox
        pooled = sf.profile.ns.pooled_mounts
        sf.mntns.fill_one("floor", list(pooled))
        sf.netns.fill_one()
        mntns_fd, netns_fd = sf.mntns.take("floor"), sf.netns.take()
        here, there = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        ruleset = sf.profile.new_ruleset() if sf.profile.has("landlock") else -1
        try:
            plan = sf.plan(
                go_fd=-1,
                exe=-1,
                null=-1,
                ruleset=ruleset,
                netns_fd=netns_fd,
                mntns_fd=mntns_fd,
                warm_channel=there.fileno(),
            )
            pid, report = childsetup.spawn(plan)
        except BaseException:
            here.close()
            for fd in (mntns_fd, netns_fd):
                if fd >= 0:
                    os.close(fd)
            raise
        finally:
            there.close()
            if ruleset >= 0:
                os.close(ruleset)
        failure = init_report.parse_ready(os.read(report, 24))
        if failure is not None:
            here.close()
            raise BenchError(f"design floor: the warm child failed at {failure}")
        self._warm = (pid, report, here.detach(), (mntns_fd, netns_fd))

    def warm(self) -> float:
        """A child whose set-up was done ahead, given its request (with a go
        fd), the record appended, the go written, until it is reaped."""
        if self._warm is None:
            self._make_warm()
        assert self._warm is not None
        pid, report, channel, held = self._warm
        self._warm = None
        sf = self.sandbox
        exe = os.open(TRUE, os.O_RDONLY | os.O_CLOEXEC)
        null = os.open("/dev/null", os.O_RDWR | os.O_CLOEXEC)
        cancel_read, cancel_write = os.pipe2(os.O_CLOEXEC)
        go_read, go_write = os.pipe2(os.O_CLOEXEC)
        try:
            payload = childsetup.pack_request(
                by_fd=True,
                root=0,
                cwd=b".",
                exe_path=None,
                rlimits=sf.rlimits,
                argv=[TRUE.encode()],
                envp=sf.envp,
            )
            cpu = time.thread_time()
            start = time.perf_counter()
            childsetup.go(channel, payload, [null, null, null, cancel_read, go_read, exe])
            self._append()
            os.write(go_write, b"g")
            _, status = os.waitpid(pid, 0)
            seconds = time.perf_counter() - start
            self.cpu.setdefault("warm", []).append(time.thread_time() - cpu)
        finally:
            for fd in (exe, null, cancel_read, cancel_write, go_read, go_write, report, channel):
                os.close(fd)
            for fd in held:
                if fd >= 0:
                    os.close(fd)
        if os.waitstatus_to_exitcode(status) != 0:
            raise BenchError(f"design floor (warm): /bin/true ended with status {status:#x}")
        self._make_warm()  # the next one, off the clock (as the refill)
        return seconds

    def cpu_ms(self, kind: str) -> float:
        """Median CPU of the calling thread per spawn of `kind`, in ms."""
        values = self.cpu.get(kind)
        return statistics.median(values) * 1e3 if values else 0.0

    def close(self) -> None:
        if self._warm is not None:
            pid, report, channel, held = self._warm
            os.close(channel)  # a closed channel ends a waiting warm child
            os.waitpid(pid, 0)
            for fd in (report, *held):
                if fd >= 0:
                    os.close(fd)
            self._warm = None
        self._appender.close()
        self.env.close()
        os.close(self.log)
        self.log_path.unlink(missing_ok=True)
        self.sandbox.close()
        self.minimal_sandbox.close()
