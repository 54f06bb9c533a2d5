"""Helpers of the interactive-spawn tests (issue 31): raw ProcessService
stubs against a real daemon."""

from __future__ import annotations

import re
import time
from typing import Any

import grpc
from hostcap_proto.errors import from_rpc_error
from hostcap_proto.v1 import process_pb2

from support.process import Client, request


async def start(client: Client, *argv: str, tty: tuple[int, int] | None = None, **kw: Any) -> str:
    """A detached spawn with its input open (and a terminal of this size)."""
    if tty is not None:
        kw["tty"] = process_pb2.TerminalSize(rows=tty[0], cols=tty[1])
    else:
        kw.setdefault("stdin_open", True)
    result = await client.stub.Run(request(list(argv), detached=True, **kw))
    assert result.started.spawn_id and not result.HasField("exited"), result
    return str(result.started.spawn_id)


async def write(
    client: Client, spawn_id: str, data: bytes, close: bool = False
) -> process_pb2.WriteStdinResponse:
    answer: process_pb2.WriteStdinResponse = await client.stub.WriteStdin(
        process_pb2.WriteStdinRequest(spawn_id=spawn_id, data=data, close=close)
    )
    return answer


async def resize(client: Client, spawn_id: str, rows: int, cols: int) -> None:
    await client.stub.Resize(process_pb2.ResizeRequest(spawn_id=spawn_id, rows=rows, cols=cols))


def reason(error: grpc.aio.AioRpcError) -> str:
    wire = from_rpc_error(error)
    assert wire is not None, error
    return wire.reason


async def refusal(call: Any) -> str:
    """The ErrorInfo reason of a call expected to be refused."""
    try:
        await call
    except grpc.aio.AioRpcError as error:
        return reason(error)
    raise AssertionError("the daemon did not refuse")


class Output:
    """A detached spawn's output, read by offset as it comes."""

    def __init__(self, client: Client, spawn_id: str) -> None:
        self.client, self.spawn_id = client, spawn_id
        self.data = b""
        self.offset = 0
        self.last: process_pb2.ReadOutputResponse | None = None

    async def read(self, wait_ms: int = 1000) -> bool:
        """Read what came; False once the spawn has ended and all was read."""
        answer: process_pb2.ReadOutputResponse = await self.client.stub.ReadOutput(
            process_pb2.ReadOutputRequest(
                spawn_id=self.spawn_id, offset=self.offset, wait_ms=wait_ms
            )
        )
        self.data += answer.stdout + answer.stderr
        self.offset = answer.next_offset
        self.last = answer
        return answer.running or bool(answer.stdout or answer.stderr)

    async def until(self, pattern: bytes, timeout: float = 30.0, start: int = 0) -> bytes:
        """All output so far once `pattern` (a regex) is in it past `start`."""
        deadline = time.monotonic() + timeout
        while not re.search(pattern, self.data[start:]):
            if time.monotonic() > deadline:
                raise AssertionError(f"no {pattern!r} in {self.data[start:]!r}")
            if not await self.read() and not re.search(pattern, self.data[start:]):
                raise AssertionError(f"ended without {pattern!r}: {self.data[start:]!r}")
        return self.data

    async def ended(self, timeout: float = 30.0) -> process_pb2.ReadOutputResponse:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            running = await self.read(wait_ms=2000)
            if not running and self.last is not None and not self.last.running:
                return self.last
        raise AssertionError(f"the spawn did not end: {self.data!r}")
