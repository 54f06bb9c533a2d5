"""The frames between the front-end and its fs worker, over a socketpair.

A frame is `>II` (header length, data length), a JSON object, raw bytes:

    write_frame(sock, {"op": "read", "path": "a.txt", ...})
    header, data = read_frame(sock, max_data=16 << 20)

JSON carries the small structured part and the raw bytes carry file content,
so content is never base64'd or copied through a codec. Both ends bound what
they accept; a frame over the bound is a protocol error, and the reader
closes the link rather than buffering it.

Requests (`op`) and what they answer, each `{"ok": true, ...}` or
`{"ok": false, "reason", "message"}`:

- `hello` (first frame, front-end to worker): the worker's settings;
  answered by `ready` with the protections applied;
- `read` {path, offset, max_bytes} -> content in the data part;
- `write_prepare` {path, create_parents, exclusive, expected_sha256} + data
  -> the prepared write (paths, hashes); then exactly one of
  `write_commit` / `write_abort`;
- `list` {path, max_entries, depth, include_hidden};
- `stat` {path}.
"""

from __future__ import annotations

import asyncio
import json
import socket
import struct
from typing import Any

_HEAD = struct.Struct(">II")
#: Bound on the JSON part (a listing of 10 000 deep entries fits easily).
MAX_HEADER = 64 << 20


class ProtocolError(Exception):
    """A malformed or oversized frame, or the link closed mid-frame."""


def encode(header: dict[str, Any], data: bytes | bytearray = b"") -> list[bytes | bytearray]:
    body = json.dumps(header, separators=(",", ":")).encode()
    return [_HEAD.pack(len(body), len(data)), body, data]


def _decode_header(body: bytes | bytearray) -> dict[str, Any]:
    try:
        header = json.loads(body)
    except ValueError:
        raise ProtocolError("frame header is not JSON") from None
    if not isinstance(header, dict):
        raise ProtocolError("frame header is not an object")
    return header


def _check(header_len: int, data_len: int, max_data: int) -> None:
    if header_len > MAX_HEADER or data_len > max_data:
        raise ProtocolError(f"frame too large ({header_len} + {data_len} bytes)")


# --- blocking side (the worker) ---


def _recv_exactly(sock: socket.socket, size: int) -> bytearray:
    buffer = bytearray(size)
    view = memoryview(buffer)
    got = 0
    while got < size:
        n = sock.recv_into(view[got:], size - got)
        if n == 0:
            raise EOFError
        got += n
    return buffer


def read_frame(sock: socket.socket, max_data: int) -> tuple[dict[str, Any], bytearray]:
    """One frame; EOFError when the link closed cleanly before it. The data
    is a bytearray: a 64 MiB write is not copied once more to make it bytes."""
    head = _recv_exactly(sock, _HEAD.size)
    header_len, data_len = _HEAD.unpack(head)
    _check(header_len, data_len, max_data)
    try:
        body = _recv_exactly(sock, header_len)
        data = _recv_exactly(sock, data_len)
    except EOFError:
        raise ProtocolError("link closed mid-frame") from None
    return _decode_header(body), data


def write_frame(sock: socket.socket, header: dict[str, Any], data: bytes | bytearray = b"") -> None:
    for part in encode(header, data):
        if part:
            sock.sendall(part)


# --- asyncio side (the front-end) ---


async def read_frame_async(
    reader: asyncio.StreamReader, max_data: int
) -> tuple[dict[str, Any], bytes]:
    """One frame; asyncio.IncompleteReadError when the link closed."""
    header_len, data_len = _HEAD.unpack(await reader.readexactly(_HEAD.size))
    _check(header_len, data_len, max_data)
    body = await reader.readexactly(header_len)
    data = await reader.readexactly(data_len) if data_len else b""
    return _decode_header(body), data


async def write_frame_async(
    writer: asyncio.StreamWriter, header: dict[str, Any], data: bytes = b""
) -> None:
    writer.writelines(encode(header, data))
    await writer.drain()
