"""The front-end's own accept (`hostcapd.frontend.peers`, decision 0033)
with a real grpc.aio server behind it: each call finds its caller, the bytes
arrive whole both ways, and a client that goes away is a cancelled call
there, its caller forgotten."""

from __future__ import annotations

import asyncio
import os
import secrets
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
from hostcapd.bridge.values import Caller
from hostcapd.frontend.peers import PEER_PREFIX, Peers


def _identity(raw: bytes) -> bytes:
    return raw


class Served:
    def __init__(self, peers: Peers, server: grpc.aio.Server, path: Path) -> None:
        self.peers = peers
        self.server = server
        self.path = path
        self.seen: list[Caller | None] = []
        self.cancelled = asyncio.Event()


async def _serve(tmp_path: Path) -> Served:
    name = f"hostcap-test-peers-{secrets.token_hex(8)}"
    peers = Peers("\0" + name)
    server = grpc.aio.server(options=[("grpc.max_receive_message_length", 16 << 20)])
    served = Served(peers, server, tmp_path / "s")

    async def echo(raw: bytes, context: Any) -> bytes:
        served.seen.append(peers.caller_of(context))
        return raw

    async def hang(raw: bytes, context: Any) -> AsyncIterator[bytes]:
        served.seen.append(peers.caller_of(context))
        try:
            yield b"started"
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            served.cancelled.set()
            raise

    server.add_generic_rpc_handlers(
        [
            grpc.method_handlers_generic_handler(
                "test.Peers",
                {
                    "Echo": grpc.unary_unary_rpc_method_handler(echo, _identity, _identity),
                    "Hang": grpc.unary_stream_rpc_method_handler(hang, _identity, _identity),
                },
            )
        ]
    )
    assert server.add_insecure_port(f"unix-abstract:{name}") != 0
    await server.start()
    await peers.listen(str(served.path), 0o600)
    return served


async def _until(check: Any, timeout: float = 10.0, what: Any = None) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not check():
        assert asyncio.get_running_loop().time() < deadline, f"timed out: {what and what()}"
        await asyncio.sleep(0.02)


async def test_each_call_finds_its_caller_and_its_bytes_arrive_whole(tmp_path: Path) -> None:
    served = await _serve(tmp_path)
    try:
        assert oct(served.path.stat().st_mode & 0o777) == oct(0o600)  # from the umask
        big = os.urandom(5 * 1024 * 1024)
        options = [("grpc.max_receive_message_length", 16 << 20)]
        async with grpc.aio.insecure_channel(f"unix:{served.path}", options=options) as channel:
            echo = channel.unary_unary("/test.Peers/Echo", _identity, _identity)
            assert await echo(b"hello") == b"hello"
            assert await echo(big) == big
        me = Caller(uid=os.getuid(), gid=os.getgid(), pid=os.getpid())
        assert served.seen == [me, me]
        # Another process, on its own connection: its own pid.
        script = (
            "import grpc, sys\n"
            "with grpc.insecure_channel('unix:' + sys.argv[1]) as ch:\n"
            "    f = ch.unary_unary('/test.Peers/Echo', lambda b: b, lambda b: b)\n"
            "    assert f(b'x', timeout=20) == b'x'\n"
        )
        other = await asyncio.create_subprocess_exec(
            sys.executable, "-c", script, str(served.path), stderr=subprocess.PIPE
        )
        _, err = await other.communicate()
        assert other.returncode == 0, err
        assert served.seen[-1] == Caller(uid=os.getuid(), gid=os.getgid(), pid=other.pid)
    finally:
        await served.peers.close()
        await served.server.stop(0)


async def test_a_client_that_goes_away_cancels_its_call_and_is_forgotten(tmp_path: Path) -> None:
    served = await _serve(tmp_path)
    # A client process killed mid-call: its connection closes with it.
    script = (
        "import grpc, sys\n"
        "ch = grpc.insecure_channel('unix:' + sys.argv[1])\n"
        "call = ch.unary_stream('/test.Peers/Hang', lambda b: b, lambda b: b)(b'')\n"
        "print(next(call).decode(), flush=True)\n"
        "sys.stdin.read()\n"
    )
    client = await asyncio.create_subprocess_exec(
        sys.executable, "-c", script, str(served.path),
        stdin=subprocess.PIPE, stdout=subprocess.PIPE,
    )  # fmt: skip
    try:
        assert client.stdout is not None
        assert await asyncio.wait_for(client.stdout.readline(), 20) == b"started\n"
        (peer,) = served.peers.callers
        assert peer.startswith(PEER_PREFIX)
        assert served.peers.callers[peer].pid == client.pid
        client.kill()
        await client.wait()
        await asyncio.wait_for(served.cancelled.wait(), 10)
        await _until(lambda: not served.peers.callers, what=lambda: served.peers.callers)
    finally:
        if client.returncode is None:
            client.kill()
            await client.wait()
        await served.peers.close()
        await served.server.stop(0)


async def test_bytes_sent_at_once_and_a_half_close_are_relayed(tmp_path: Path) -> None:
    """A client writes its first bytes (gRPC's preface) at once and closes
    its sending side: nothing is lost, and the half-close reaches the inner
    side, which answers after it. (The unit's daemon, on Debian's Python
    3.11.2, once lost every connection's preface: the accepted side read
    before the inner side was up. The relay reads a client's socket only
    once its inner connection is made.)"""
    name = f"hostcap-test-peers-{secrets.token_hex(8)}"

    async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(await reader.read())  # to its EOF
        await writer.drain()
        writer.close()

    inner = await asyncio.start_unix_server(echo, "\0" + name)
    peers = Peers("\0" + name)
    await peers.listen(str(tmp_path / "s"), 0o600)
    try:
        reader, writer = await asyncio.open_unix_connection(str(tmp_path / "s"))
        writer.write(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"x" * 100_000)
        writer.write_eof()
        got = await asyncio.wait_for(reader.read(), 10)
        writer.close()
        assert got == b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"x" * 100_000
        await _until(lambda: not peers.callers, what=lambda: peers.callers)
        assert not peers.relays
    finally:
        await peers.close()
        inner.close()


async def test_a_stream_to_a_slow_reader_arrives_whole(tmp_path: Path) -> None:
    """The server side writes far more than every buffer between holds to a
    client that reads slowly: the relay stops reading it meanwhile (its pipe
    holds what waits), and every byte arrives, in order."""
    name = f"hostcap-test-peers-{secrets.token_hex(8)}"
    payload = os.urandom(24 * 1024 * 1024)

    async def flood(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(payload)
        await writer.drain()
        writer.close()

    inner = await asyncio.start_unix_server(flood, "\0" + name)
    peers = Peers("\0" + name)
    await peers.listen(str(tmp_path / "s"), 0o600)
    try:
        reader, writer = await asyncio.open_unix_connection(str(tmp_path / "s"))
        got = bytearray()
        while chunk := await asyncio.wait_for(reader.read(256 * 1024), 10):
            got += chunk
            if len(got) < 4 * 1024 * 1024:
                await asyncio.sleep(0.01)  # slow at first: the relay's pipe fills
        writer.close()
        assert len(got) == len(payload) and got == payload
        await _until(lambda: not peers.relays, what=lambda: peers.relays)
    finally:
        await peers.close()
        inner.close()


async def test_a_connection_without_fds_for_its_pipes_is_closed_and_the_next_served(
    tmp_path: Path, monkeypatch: Any
) -> None:
    """No fd left for a connection's pipes (EMFILE): that client sees its
    connection closed, nothing of it is left behind, and the next one is
    relayed."""
    import errno

    from hostcapd.frontend import peers as peers_module

    name = f"hostcap-test-peers-{secrets.token_hex(8)}"

    async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(await reader.read())
        await writer.drain()
        writer.close()

    inner = await asyncio.start_unix_server(echo, "\0" + name)
    peers = Peers("\0" + name)
    await peers.listen(str(tmp_path / "s"), 0o600)
    real_pipe2 = os.pipe2
    calls = 0

    def pipe2(flags: int) -> tuple[int, int]:
        nonlocal calls
        calls += 1
        if calls == 2:  # the first connection's second pipe
            raise OSError(errno.EMFILE, "Too many open files")
        return real_pipe2(flags)

    monkeypatch.setattr(peers_module.os, "pipe2", pipe2)
    fds_before = len(os.listdir("/proc/self/fd"))
    try:
        reader, writer = await asyncio.open_unix_connection(str(tmp_path / "s"))
        assert await asyncio.wait_for(reader.read(), 10) == b""  # closed at once
        writer.close()
        assert not peers.callers and not peers.relays
        reader, writer = await asyncio.open_unix_connection(str(tmp_path / "s"))
        writer.write(b"again")
        writer.write_eof()
        assert await asyncio.wait_for(reader.read(), 10) == b"again"
        writer.close()
        await _until(lambda: not peers.relays, what=lambda: peers.relays)
        await asyncio.sleep(0.05)
        assert len(os.listdir("/proc/self/fd")) <= fds_before  # no pipe or socket leaked
    finally:
        await peers.close()
        inner.close()
