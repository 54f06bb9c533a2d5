"""The bare servers the daemon is compared with, each run as its own process
(as the daemon is): `python -m bench.floor_servers grpc|echo SOCKET`.

- `grpc`: a bare grpc.aio server with no services but two raw-bytes methods:
  `/bench.Floor/Echo` (unary, returns the request) and `/bench.Floor/Stream`
  (the request is a decimal byte count; answers that many bytes as 64 KiB
  messages). It is the floor for RPC overhead, streaming and idle RSS.
- `echo`: a plain asyncio Unix-socket echo server (line in, line out).
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

import grpc

CHUNK = 64 * 1024
ECHO = "/bench.Floor/Echo"
STREAM = "/bench.Floor/Stream"
OPTIONS = [
    ("grpc.max_receive_message_length", 80 << 20),
    ("grpc.max_send_message_length", 80 << 20),
    ("grpc.so_reuseport", 0),
]


async def _echo(request: bytes, context: grpc.aio.ServicerContext[bytes, bytes]) -> bytes:
    return request


async def _stream(
    request: bytes, context: grpc.aio.ServicerContext[bytes, bytes]
) -> AsyncIterator[bytes]:
    remaining = int(request)
    chunk = bytes(CHUNK)
    while remaining > 0:
        piece = chunk if remaining >= CHUNK else chunk[:remaining]
        remaining -= len(piece)
        yield piece


if TYPE_CHECKING:  # the stubs make it generic; the runtime class is not
    _HandlerBase = grpc.GenericRpcHandler[bytes, bytes]
else:
    _HandlerBase = grpc.GenericRpcHandler


class _Handler(_HandlerBase):
    def service(
        self, details: grpc.HandlerCallDetails
    ) -> grpc.RpcMethodHandler[bytes, bytes] | None:
        if details.method == ECHO:
            return grpc.unary_unary_rpc_method_handler(_echo)
        if details.method == STREAM:
            return grpc.unary_stream_rpc_method_handler(_stream)
        return None


async def serve_grpc(path: str) -> None:
    server = grpc.aio.server(options=OPTIONS)
    server.add_generic_rpc_handlers((_Handler(),))
    if server.add_insecure_port(f"unix:{path}") == 0:
        raise SystemExit(f"cannot bind {path}")
    await server.start()
    await server.wait_for_termination()


async def _echo_client(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while line := await reader.readline():
            writer.write(line)
            await writer.drain()
    finally:
        writer.close()


async def serve_echo(path: str) -> None:
    server = await asyncio.start_unix_server(_echo_client, path)
    async with server:
        await server.serve_forever()


def main(argv: list[str]) -> int:
    kind, path = argv
    asyncio.run(serve_grpc(path) if kind == "grpc" else serve_echo(path))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
