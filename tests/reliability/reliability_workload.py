"""The mixed workload the load and soak tests drive: spawns (buffered and
streamed) and file writes read back, each checked, through real clients."""

from __future__ import annotations

import asyncio
import hashlib
import os
import time
from pathlib import Path

import grpc
import pytest
from hostcap_proto.v1 import common_pb2, fs_pb2, fs_pb2_grpc
from reliability_probes import Footprint, wait_cgroups_gone, wait_for
from support.daemon import NOBODY, Daemon
from support.process import Client, outcome, request

LOAD_DIR = "load"


class FsClient:
    """FsService on a tenant socket (the process client's sibling)."""

    def __init__(self, socket: Path) -> None:
        self.channel = grpc.aio.insecure_channel(f"unix:{socket}")
        self.stub = fs_pb2_grpc.FsServiceStub(self.channel)  # type: ignore[no-untyped-call]

    async def close(self) -> None:
        await self.channel.close(grace=None)


async def require_fs(daemon: Daemon) -> None:
    """Skip (saying why) while the daemon does not serve FsService yet."""
    fs = FsClient(daemon.socket)
    try:
        await fs.stub.Stat(fs_pb2.StatRequest(path="."))
    except grpc.aio.AioRpcError as error:
        if error.code() == grpc.StatusCode.UNIMPLEMENTED:
            pytest.skip("hostcapd does not serve FsService yet")
        raise
    finally:
        await fs.close()


def prepare_load_dir(daemon: Daemon) -> None:
    """The workspace directory the file half of the workload writes under."""
    load = daemon.root() / LOAD_DIR
    load.mkdir(exist_ok=True)
    os.chown(load, NOBODY, NOBODY)


async def client_session(
    daemon: Daemon,
    n: int,
    calls: int,
    with_fs: bool,
    tolerated: frozenset[str] = frozenset(),
) -> list[str]:
    """One client's mixed workload, in order: of every 8 calls, two file
    writes each read back (with_fs), one streamed `seq`, five buffered `sh`
    runs with their exit codes. Returns a line per call that went wrong; an
    outcome in `tolerated` (injected faults) is not wrong."""
    process = Client(daemon.socket)
    fs = FsClient(daemon.socket)
    problems: list[str] = []
    try:
        for i in range(calls):
            kind = i % 8
            if with_fs and kind in (3, 7):
                data = f"client {n} write {i}\n".encode() * (1 + i % 50)
                path = f"{LOAD_DIR}/c{n}/f{i % 10}.txt"
                written = await fs.stub.WriteFile(
                    fs_pb2.WriteFileRequest(path=path, data=data, create_parents=True)
                )
                read = await fs.stub.ReadFile(fs_pb2.ReadFileRequest(path=path))
                if read.data != data or written.sha256 != hashlib.sha256(data).hexdigest():
                    problems.append(f"{path}: read back other content than written")
            elif kind == 5:
                events = [e async for e in process.stub.Spawn(request(["seq", "1", str(i)]))]
                end = common_pb2.Outcome.Name(events[-1].exited.outcome)
                if end in tolerated:
                    continue
                out = b"".join(e.output.data for e in events if e.WhichOneof("event") == "output")
                if out != "".join(f"{k}\n" for k in range(1, i + 1)).encode():
                    problems.append(f"streamed seq {i}: wrong output")
                if end != "EXITED":
                    problems.append(f"streamed seq {i}: {events[-1].exited}")
            else:
                result = await process.run("sh", "-c", f"echo {n}-{i}; exit {i % 3}")
                if outcome(result) in tolerated:
                    continue
                got = (outcome(result), result.exited.exit_code, result.stdout)
                if got != ("EXITED", i % 3, f"{n}-{i}\n".encode()):
                    problems.append(f"run {n}-{i}: {got}")
    finally:
        await process.close()
        await fs.close()
    return problems


def spawns_in(calls: int, with_fs: bool) -> int:
    """How many spawns client_session makes in `calls` calls."""
    return sum(1 for i in range(calls) if not (with_fs and i % 8 in (3, 7)))


async def settle(daemon: Daemon, subtrees: list[Path], before: Footprint) -> Footprint:
    """Wait until the daemon's footprint stops changing (connections closing,
    cgroups removed), then return it."""
    await wait_for(lambda: not wait_cgroups_gone(subtrees, 0), 10, "spawn cgroups to go")
    deadline = time.monotonic() + 10
    after = Footprint.of(daemon, subtrees)
    while time.monotonic() < deadline and (
        after.fds != before.fds or after.threads > before.threads
    ):
        await asyncio.sleep(0.2)
        after = Footprint.of(daemon, subtrees)
    return after
