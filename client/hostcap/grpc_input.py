"""A session's input and terminal over hostcapd (issue 31): the request
fields of an interactive spawn, WriteStdin in pieces the daemon takes, and
Resize. `GrpcProcessArm` uses these; `hostcapctl` uses the same chunking.

A write is cut into pieces of at most `MAX_INPUT_CHUNK` bytes (the daemon
refuses a larger one, TOO_LARGE), sent one after the other: each call
returns once its bytes are in the pipe or the terminal, so the program's
pace reaches the writer and nothing piles up in the daemon or here.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from hostcap_proto.v1 import process_pb2

from hostcap.host import MAX_INPUT_CHUNK, InputWritten, SpawnOptions, TerminalSize


def interactive_fields(request: process_pb2.SpawnRequest, opts: SpawnOptions) -> None:
    """Set `stdin_open` and `tty` of a spawn request from `opts`."""
    if opts.tty is not None:
        request.tty.rows = opts.tty.rows
        request.tty.cols = opts.tty.cols
        request.stdin_open = True
    elif opts.stdin_open:
        request.stdin_open = True


def terminal_of(message: Any) -> TerminalSize | None:
    """The TerminalSize a wire message's `tty` field carries, if it is set."""
    if not message.HasField("tty") or not message.tty.rows or not message.tty.cols:
        return None
    return TerminalSize(int(message.tty.rows), int(message.tty.cols))


def chunks(data: bytes, size: int = MAX_INPUT_CHUNK) -> Iterator[bytes]:
    """`data` in pieces of at most `size` bytes (one empty piece for no data)."""
    if not data:
        yield b""
        return
    view = memoryview(data)
    for start in range(0, len(data), size):
        yield bytes(view[start : start + size])


def write_requests(
    spawn_id: str, data: bytes, close: bool
) -> Iterator[process_pb2.WriteStdinRequest]:
    """The WriteStdin requests that write `data` and, when asked, close: the
    close rides on the last piece. No data and no close is no request."""
    if not data and not close:
        return
    pieces = list(chunks(data))
    for index, piece in enumerate(pieces):
        last = index == len(pieces) - 1
        yield process_pb2.WriteStdinRequest(spawn_id=spawn_id, data=piece, close=close and last)


async def write_stdin(stub: Any, spawn_id: str, data: bytes, close: bool) -> InputWritten:
    """Write `data` into a spawn's input (and close it), piece by piece.
    A refusal raises the grpc error; the pieces before it were written."""
    written = 0
    total = writes = 0
    for request in write_requests(spawn_id, data, close):
        answer: Any = await stub.WriteStdin(request)
        written += int(answer.bytes_written)
        total, writes = int(answer.total_bytes), int(answer.writes)
    return InputWritten(
        session_id=spawn_id, bytes_written=written, total_bytes=total, writes=writes, closed=close
    )


async def resize(stub: Any, spawn_id: str, size: TerminalSize) -> None:
    await stub.Resize(process_pb2.ResizeRequest(spawn_id=spawn_id, rows=size.rows, cols=size.cols))


__all__ = ["chunks", "interactive_fields", "resize", "terminal_of", "write_requests", "write_stdin"]
