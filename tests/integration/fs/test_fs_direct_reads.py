"""Reads the front-end asks of the fs worker directly (decision 0034), on a
real hostcapd: what must hold when the root process is no longer on a
read's path.

- a read is answered with the root process stopped (SIGSTOP), and is not
  with `daemon.fs_direct_reads = false` (the control: relayed, it waits
  for the root);
- a refused read of a secret or of a path outside the roots is in the
  audit log as `policy.deny` with its caller when the refusal reaches the
  caller (the root writes it from the worker's report);
- `max_bytes` above the tenant's ceiling is refused LIMIT_INVALID and
  audited; a read larger than a datagram is relayed and whole;
- a worker killed during a read: the caller gets its answer or a typed
  UNAVAILABLE, the root starts a new worker at once, and the next read works;
- a front-end killed and restarted gets a working link (a new one: the
  worker is started again with its end), direct again.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import shutil
import signal
import tempfile
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import grpc
import pytest
from hostcap_proto.errors import from_rpc_error
from hostcap_proto.v1 import fs_pb2, fs_pb2_grpc
from support.daemon import (
    NOBODY,
    Daemon,
    MiB,
    audit_records,
    children_of,
    cmdline,
    daemon_config,
    frontend_pids,
    tenant_config,
)

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the daemon runs as root")


def _start(direct: bool) -> Daemon:
    # A directory of its own above the state: its name is the daemon's
    # cgroup subtree's (two of these daemons may run at once).
    top = Path(tempfile.mkdtemp(prefix="hostcap-fs-direct-"))
    top.chmod(0o711)
    state = top / "state"
    config = daemon_config(
        state,
        {"dev": tenant_config(state, "dev")},
        daemon={"fs_direct_reads": direct},
    )
    return Daemon(state, config).start(timeout=60)


@contextlib.contextmanager
def _daemon(direct: bool) -> Iterator[Daemon]:
    daemon = _start(direct)
    try:
        yield daemon
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(daemon.pid, signal.SIGCONT)
        daemon.stop()
        shutil.rmtree(daemon.state.parent, ignore_errors=True)


@pytest.fixture(scope="module")
def direct_daemon() -> Iterator[Daemon]:
    with _daemon(True) as daemon:
        yield daemon


@contextlib.asynccontextmanager
async def _fs(daemon: Daemon) -> AsyncIterator[fs_pb2_grpc.FsServiceStub]:
    async with grpc.aio.insecure_channel(f"unix:{daemon.socket}") as channel:
        yield fs_pb2_grpc.FsServiceStub(channel)  # type: ignore[no-untyped-call]


def _plant(daemon: Daemon, name: str, data: bytes) -> None:
    path = daemon.root() / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    os.chown(path, NOBODY, NOBODY)


def _worker(daemon: Daemon) -> int | None:
    for pid in children_of(daemon.pid):
        if b"hostcapd.fs.worker" in cmdline(pid):
            return pid
    return None


def _tenant_frontend(daemon: Daemon) -> int:
    """The tenant's front-end: the one given a read link (a second fd)."""
    [pid] = [p for p in frontend_pids(daemon) if len(cmdline(p).split()) == 6]
    return pid


async def _until(check: object, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not check():  # type: ignore[operator]
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.05)


@contextlib.contextmanager
def _root_stopped(daemon: Daemon) -> Iterator[None]:
    os.kill(daemon.pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(daemon.pid, signal.SIGCONT)


async def _read_with_root_stopped(daemon: Daemon, name: str) -> bytes:
    async with _fs(daemon) as fs:
        await fs.Stat(fs_pb2.StatRequest(path="."))  # connected before the stop
        with _root_stopped(daemon):
            reply = await fs.ReadFile(fs_pb2.ReadFileRequest(path=name), timeout=3)
    return reply.data


async def test_a_read_is_answered_without_the_root_process(direct_daemon: Daemon) -> None:
    data = os.urandom(4096)
    _plant(direct_daemon, "four.bin", data)
    assert await _read_with_root_stopped(direct_daemon, "four.bin") == data


async def test_the_control_relayed_reads_wait_for_the_root() -> None:
    with _daemon(False) as daemon:
        _plant(daemon, "four.bin", b"x" * 4096)
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await _read_with_root_stopped(daemon, "four.bin")
        assert caught.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED


@pytest.mark.parametrize(
    ("path", "reason"),
    [(".env", "SECRET_PATH"), ("../../../etc/passwd", "PATH_ESCAPES_ROOT")],
)
async def test_a_refused_read_is_audited_with_its_caller_before_the_caller_hears(
    direct_daemon: Daemon, path: str, reason: str
) -> None:
    _plant(direct_daemon, ".env", b"TOKEN=secret\n")
    async with _fs(direct_daemon) as fs:
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await fs.ReadFile(fs_pb2.ReadFileRequest(path=path))
    found = from_rpc_error(caught.value)
    assert found is not None and found.reason == reason
    # Read at once: the record came before the refusal.
    denied = [
        r
        for r in audit_records(direct_daemon.audit_path)
        if r["event"] == "policy.deny" and r.get("method") == "ReadFile" and r.get("path") == path
    ]
    assert denied, f"no policy.deny for {path}"
    record = denied[-1]
    assert record["reason"] == reason and record["tenant"] == "dev"
    assert record["caller"]["pid"] == os.getpid() and record["caller"]["uid"] == os.getuid()


async def test_max_bytes_above_the_ceiling_is_refused_and_audited(direct_daemon: Daemon) -> None:
    _plant(direct_daemon, "small.txt", b"hello\n")
    async with _fs(direct_daemon) as fs:
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await fs.ReadFile(fs_pb2.ReadFileRequest(path="small.txt", max_bytes=1 << 40))
        found = from_rpc_error(caught.value)
        assert found is not None and found.reason == "LIMIT_INVALID"
        reply = await fs.ReadFile(fs_pb2.ReadFileRequest(path="small.txt", max_bytes=3))
    assert (reply.data, reply.truncated) == (b"hel", True)
    assert any(
        r["event"] == "policy.deny" and r.get("reason") == "LIMIT_INVALID"
        for r in audit_records(direct_daemon.audit_path)
    )


async def test_a_read_larger_than_a_datagram_is_relayed_whole(direct_daemon: Daemon) -> None:
    data = os.urandom(3 * MiB)
    _plant(direct_daemon, "big.bin", data)
    async with _fs(direct_daemon) as fs:
        reply = await fs.ReadFile(fs_pb2.ReadFileRequest(path="big.bin"))
        assert reply.data == data and reply.file_sha256 == hashlib.sha256(data).hexdigest()
        part = await fs.ReadFile(fs_pb2.ReadFileRequest(path="big.bin", offset=MiB, max_bytes=10))
        assert part.data == data[MiB : MiB + 10]
    # Relayed, it needs the root: with the root stopped it waits.
    with _root_stopped(direct_daemon):
        async with _fs(direct_daemon) as fs:
            with pytest.raises(grpc.aio.AioRpcError) as caught:
                await fs.ReadFile(fs_pb2.ReadFileRequest(path="big.bin"), timeout=1.5)
    assert caught.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED


async def test_a_worker_killed_during_a_read_is_replaced_at_once(direct_daemon: Daemon) -> None:
    data = os.urandom(4096)
    _plant(direct_daemon, "k.bin", data)
    worker = _worker(direct_daemon)
    assert worker is not None
    async with _fs(direct_daemon) as fs:
        assert (await fs.ReadFile(fs_pb2.ReadFileRequest(path="k.bin"))).data == data
        os.kill(worker, signal.SIGSTOP)  # the read waits in its link
        call = asyncio.ensure_future(fs.ReadFile(fs_pb2.ReadFileRequest(path="k.bin")))
        await asyncio.sleep(0.3)
        assert not call.done()
        os.kill(worker, signal.SIGKILL)
        try:
            reply = await asyncio.wait_for(call, 15)
            assert reply.data == data  # asked again of the new worker
        except grpc.aio.AioRpcError as error:
            assert error.code() == grpc.StatusCode.UNAVAILABLE
        # The root started a new one without being asked (no relayed call).
        await _until(lambda: _worker(direct_daemon) not in (None, worker), 10, "a new worker")
        assert await _read_with_root_stopped(direct_daemon, "k.bin") == data


async def test_a_restarted_front_end_gets_a_working_link(direct_daemon: Daemon) -> None:
    data = os.urandom(4096)
    _plant(direct_daemon, "f.bin", data)
    frontend = _tenant_frontend(direct_daemon)
    worker = _worker(direct_daemon)
    before = set(frontend_pids(direct_daemon))
    os.kill(frontend, signal.SIGKILL)

    def serving_again() -> bool:
        return bool(set(frontend_pids(direct_daemon)) - before)

    await _until(serving_again, 20, "a new front-end")

    async def readable() -> bool:
        try:
            async with _fs(direct_daemon) as fs:
                await fs.ReadFile(fs_pb2.ReadFileRequest(path="f.bin"), timeout=2)
        except grpc.aio.AioRpcError:
            return False
        return True

    deadline = time.monotonic() + 20
    while not await readable():
        assert time.monotonic() < deadline, "the restarted front-end does not serve"
        await asyncio.sleep(0.1)
    # Its new link: the worker was started again with the other end.
    await _until(lambda: _worker(direct_daemon) not in (None, worker), 10, "a relinked worker")
    await asyncio.sleep(0.5)
    assert await _read_with_root_stopped(direct_daemon, "f.bin") == data
