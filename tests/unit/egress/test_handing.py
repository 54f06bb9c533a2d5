"""The daemon hands a new proxy every running spawn's ends, all of them,
even when there are more than its channel holds at once."""

from __future__ import annotations

import asyncio
import os
import socket
from typing import Any

import pytest
from hostcapd.egress import messages
from hostcapd.egress.supervisor import EgressProxy, Handed


async def test_every_spawns_ends_reach_a_new_proxy_through_a_full_channel(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    full = [0]
    send = messages.send_with_fds

    def counted(sock: socket.socket, data: bytes, fds: list[int]) -> None:
        try:
            send(sock, data, fds)
        except BlockingIOError:
            full[0] += 1
            raise

    monkeypatch.setattr(messages, "send_with_fds", counted)
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    ours.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
    ours.setblocking(False)
    proxy: Any = EgressProxy.__new__(EgressProxy)  # only its handing is under test
    proxy.channel = ours
    proxy.handed = {}
    for n in range(300):
        read, write = os.pipe()
        proxy.handed[f"spawn-{n}"] = Handed({}, [("tcp", read), ("tun", write)])
    received: dict[str, int] = {}

    async def slow_reader() -> None:
        loop = asyncio.get_running_loop()
        while len(received) < 300:
            data, fds = await loop.run_in_executor(None, messages.receive, theirs)
            listen = messages.decode_to_proxy(data)
            assert isinstance(listen, messages.Listen)
            received[listen.spawn_id] = len(fds)
            for fd in fds:
                os.close(fd)

    reader = asyncio.ensure_future(slow_reader())
    await asyncio.wait_for(proxy._hand_all(), 30)
    await asyncio.wait_for(reader, 30)
    assert received == {f"spawn-{n}": 2 for n in range(300)}
    assert full[0] > 0  # not vacuous: the channel was full on the way
    for handed in proxy.handed.values():
        for _kind, fd in handed.ends:
            os.close(fd)
    ours.close()
    theirs.close()
