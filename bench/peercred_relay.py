"""What it would cost a front-end to take over the accept (issue 33, item 3):
a relay that accepts on the public socket, reads the client's SO_PEERCRED,
and relays the connection to the gRPC server over a connection bound to an
abstract name encoding a nonce, which the servicer finds in context.peer()
and maps back to the credentials. Measured in one process against the same
grpc.aio server reached directly.

    python -m bench.peercred_relay [--rounds N] [--stream-mib N]

Prints the unary round trip (p50, p95) direct and through the relay, and a
streamed transfer's throughput both ways; and checks that the servicer sees
the caller's pid and uid through the nonce.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import secrets
import socket
import statistics
import struct
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc

CHUNK = b"x" * 65536
_PEERCRED = struct.Struct("3i")


def _identity(raw: bytes) -> bytes:
    return raw


class Relay:
    """Accept on `path`; for each connection, its peer's credentials under a
    fresh nonce, and a pump to the inner server over a socket bound to
    `\\0<prefix><nonce>` (the name the servicer sees as its peer)."""

    def __init__(self, inner: str, prefix: str) -> None:
        self.inner = inner
        self.prefix = prefix
        self.creds: dict[str, tuple[int, int, int]] = {}

    async def serve(self, path: str) -> asyncio.AbstractServer:
        return await asyncio.start_unix_server(self._client, path=path)

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        sock: socket.socket = writer.get_extra_info("socket")
        pid, uid, gid = _PEERCRED.unpack(
            sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _PEERCRED.size)
        )
        nonce = secrets.token_hex(16)
        self.creds[nonce] = (pid, uid, gid)
        out = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        out.bind(f"\0{self.prefix}{nonce}")
        out.setblocking(False)
        await asyncio.get_running_loop().sock_connect(out, f"\0{self.inner}")
        inner_reader, inner_writer = await asyncio.open_unix_connection(sock=out)
        try:
            await asyncio.gather(_pump(reader, inner_writer), _pump(inner_reader, writer))
        finally:
            self.creds.pop(nonce, None)
            inner_writer.close()
            writer.close()


async def _pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(1 << 18):
            writer.write(data)
            await writer.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        if writer.can_write_eof():
            with contextlib.suppress(OSError):
                writer.write_eof()


async def main(rounds: int, stream_mib: int) -> int:
    inner = f"hostcap-bench-inner-{os.getpid()}"
    prefix = f"hostcap-bench-c-{os.getpid()}-"
    relay = Relay(inner, prefix)
    seen: list[tuple[int, int, int] | None] = []

    async def echo(raw: bytes, context: Any) -> bytes:
        peer = context.peer()
        nonce = peer.removeprefix(f"unix-abstract:{prefix}")
        seen.append(relay.creds.get(nonce) if nonce != peer else None)
        return raw

    async def stream(raw: bytes, context: Any) -> AsyncIterator[bytes]:
        for _ in range(int(raw)):
            yield CHUNK

    server = grpc.aio.server()
    server.add_generic_rpc_handlers(
        [
            grpc.method_handlers_generic_handler(
                "bench.Relay",
                {
                    "Echo": grpc.unary_unary_rpc_method_handler(echo, _identity, _identity),
                    "Stream": grpc.unary_stream_rpc_method_handler(stream, _identity, _identity),
                },
            )
        ]
    )
    server.add_insecure_port(f"unix-abstract:{inner}")
    await server.start()
    tmp = Path(tempfile.mkdtemp(prefix="relay-"))
    public = str(tmp / "public.sock")
    relay_server = await relay.serve(public)
    targets = {"direct": f"unix-abstract:{inner}", "relay": f"unix:{public}"}
    channels = {name: grpc.aio.insecure_channel(t) for name, t in targets.items()}
    try:
        calls = {
            name: ch.unary_unary("/bench.Relay/Echo", _identity, _identity)
            for name, ch in channels.items()
        }
        streams = {
            name: ch.unary_stream("/bench.Relay/Stream", _identity, _identity)
            for name, ch in channels.items()
        }
        for name in targets:
            for _ in range(20):
                await calls[name](b"warm")
        seen.clear()
        samples: dict[str, list[float]] = {name: [] for name in targets}
        for index in range(rounds):
            order = list(targets) if index % 2 == 0 else list(targets)[::-1]
            for name in order:
                started = time.perf_counter()
                await calls[name](b"ping")
                samples[name].append(time.perf_counter() - started)
        relayed = [s for s in seen if s is not None]
        assert relayed and all(s == (os.getpid(), os.getuid(), os.getgid()) for s in relayed), seen
        for name, values in samples.items():
            values.sort()
            print(
                f"unary {name:6}: p50 {statistics.median(values) * 1e6:7.0f} us, "
                f"p95 {values[int(len(values) * 0.95)] * 1e6:7.0f} us"
            )
        direct, relayed_p50 = (statistics.median(samples[n]) for n in ("direct", "relay"))
        print(f"unary relay/direct p50: {relayed_p50 / direct:.2f}")
        n = stream_mib * 16
        for name in targets:
            started = time.perf_counter()
            got = 0
            async for chunk in streams[name](str(n).encode()):
                got += len(chunk)
            took = time.perf_counter() - started
            print(f"stream {name:6}: {got / took / (1 << 20):7.0f} MiB/s ({got >> 20} MiB)")
        print(f"the servicer saw the caller (pid, uid, gid) through the nonce: {relayed[0]}")
    finally:
        for ch in channels.values():
            await ch.close(None)
        relay_server.close()
        await server.stop(0)
        Path(public).unlink(missing_ok=True)
        tmp.rmdir()
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=2000)
    parser.add_argument("--stream-mib", type=int, default=256)
    args = parser.parse_args()
    sys.exit(asyncio.run(main(args.rounds, args.stream_mib)))
