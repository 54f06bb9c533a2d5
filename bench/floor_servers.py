"""The bare servers the daemon is compared with, each run as its own process
(as the daemon is): `python -m bench.floor_servers grpc|echo SOCKET`.

- `grpc`: a bare grpc.aio server with no services but two raw-bytes methods:
  `/bench.Floor/Echo` (unary, returns the request) and `/bench.Floor/Stream`
  (the request is a decimal byte count; answers that many bytes as 64 KiB
  messages). It is the floor for RPC overhead, streaming and idle RSS.
- `echo`: a plain asyncio Unix-socket echo server (line in, line out).
- `relay`: the front-end's shape at its least (decisions 0027, 0033): one
  process that accepts on the socket itself, reads the caller's SO_PEERCRED
  and relays the connection to its grpc.aio server (bench/peercred_relay.py's
  `Relay`), whose handlers find the caller by `context.peer()`. Behind it, a
  `hop` process over a SOCK_SEQPACKET pair (the root side, or the fs worker).
  Methods: `Echo` (the relay alone), `Hop` (the caller and the request sent
  to the hop process and its answer back: a call that reaches the
  privileged side), `Read` (the hop process opens and reads the file the
  request names and sends its bytes: a ReadFile's least), `Stream` (the
  request is a byte count; the hop process sends that many bytes in 1 MiB
  messages, relayed as 1 MiB gRPC messages: a streamed spawn's output path
  at its least).
"""

from __future__ import annotations

import asyncio
import os
import socket
import struct
import subprocess
import sys
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

import grpc

CHUNK = 64 * 1024
ECHO = "/bench.Floor/Echo"
STREAM = "/bench.Floor/Stream"
HOP = "/bench.Floor/Hop"
READ = "/bench.Floor/Read"
#: The hop channel's largest message (a spawn's output chunk in the daemon).
HOP_CHUNK = 1 << 20
_CALLER = struct.Struct("3i")
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


def _big_buffers(sock: socket.socket) -> None:
    for option in (32, 33):  # SO_SNDBUFFORCE, SO_RCVBUFFORCE (as root)
        try:
            sock.setsockopt(socket.SOL_SOCKET, option, 4 * HOP_CHUNK)
        except OSError:
            sock.setsockopt(socket.SOL_SOCKET, option - 25, 4 * HOP_CHUNK)


def serve_hop(fd: int) -> None:
    """The hop process: one request at a time, blocking, on its seqpacket
    end: b"e" + caller + body: answered with the body; b"r" + caller + path:
    the file's bytes; b"s" + caller + count: that many bytes in messages of
    at most HOP_CHUNK."""
    sock = socket.socket(fileno=fd)
    _big_buffers(sock)
    chunk = bytes(HOP_CHUNK)
    head = 1 + _CALLER.size
    while message := sock.recv(HOP_CHUNK):
        kind, body = message[:1], message[head:]
        if kind == b"r":
            file = os.open(body, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
            try:
                sock.send(os.read(file, HOP_CHUNK))
            finally:
                os.close(file)
        elif kind == b"s":
            remaining = int(body)
            while remaining > 0:
                piece = chunk if remaining >= HOP_CHUNK else chunk[:remaining]
                sock.send(piece)
                remaining -= len(piece)
        else:
            sock.send(body)


class _Hop:
    """The relay process's end of the hop: one exchange at a time."""

    def __init__(self) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        _big_buffers(ours)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "bench.floor_servers", "hop", str(theirs.fileno())],
            pass_fds=(theirs.fileno(),),
        )
        theirs.close()
        ours.setblocking(False)
        self.sock = ours
        self.lock = asyncio.Lock()

    async def ask(self, kind: bytes, caller: tuple[int, int, int], body: bytes) -> bytes:
        loop = asyncio.get_running_loop()
        async with self.lock:
            await loop.sock_sendall(self.sock, kind + _CALLER.pack(*caller) + body)
            return await loop.sock_recv(self.sock, HOP_CHUNK)

    async def stream(self, caller: tuple[int, int, int], count: int) -> AsyncIterator[bytes]:
        loop = asyncio.get_running_loop()
        async with self.lock:
            await loop.sock_sendall(self.sock, b"s" + _CALLER.pack(*caller) + str(count).encode())
            while count > 0:
                data = await loop.sock_recv(self.sock, HOP_CHUNK)
                count -= len(data)
                yield data


async def serve_relay(path: str) -> None:
    from bench.peercred_relay import Relay  # only this server needs it

    inner = f"hostcap-bench-floor-{os.getpid()}"
    prefix = f"hostcap-bench-floor-c-{os.getpid()}-"
    relay = Relay(inner, prefix)
    hop = _Hop()

    def caller(context: grpc.aio.ServicerContext[bytes, bytes]) -> tuple[int, int, int]:
        # Every call records its caller (decision 0033): found by the name
        # of the relay's inner connection, as the front-end finds it.
        found = relay.creds.get(context.peer().removeprefix(f"unix-abstract:{prefix}"))
        if found is None:
            raise RuntimeError(f"no caller for {context.peer()}")
        return found

    async def hop_call(request: bytes, context: grpc.aio.ServicerContext[bytes, bytes]) -> bytes:
        return await hop.ask(b"e", caller(context), request)

    async def read(request: bytes, context: grpc.aio.ServicerContext[bytes, bytes]) -> bytes:
        return await hop.ask(b"r", caller(context), request)

    async def echo(request: bytes, context: grpc.aio.ServicerContext[bytes, bytes]) -> bytes:
        caller(context)
        return request

    async def stream(
        request: bytes, context: grpc.aio.ServicerContext[bytes, bytes]
    ) -> AsyncIterator[bytes]:
        async for data in hop.stream(caller(context), int(request)):
            yield data

    handlers = {
        ECHO: grpc.unary_unary_rpc_method_handler(echo),
        HOP: grpc.unary_unary_rpc_method_handler(hop_call),
        READ: grpc.unary_unary_rpc_method_handler(read),
        STREAM: grpc.unary_stream_rpc_method_handler(stream),
    }
    server = grpc.aio.server(options=OPTIONS)
    server.add_generic_rpc_handlers(
        [
            grpc.method_handlers_generic_handler(
                "bench.Floor", {k.rsplit("/", 1)[1]: v for k, v in handlers.items()}
            )
        ]
    )
    if server.add_insecure_port(f"unix-abstract:{inner}") == 0:
        raise SystemExit(f"cannot bind the abstract name {inner}")
    await server.start()
    public = await relay.serve(path)
    try:
        await server.wait_for_termination()
    finally:
        public.close()
        hop.proc.terminate()


def main(argv: list[str]) -> int:
    kind, path = argv
    if kind == "hop":
        serve_hop(int(path))
    elif kind == "relay":
        asyncio.run(serve_relay(path))
    else:
        asyncio.run(serve_grpc(path) if kind == "grpc" else serve_echo(path))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
