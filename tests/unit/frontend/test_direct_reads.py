"""The front-end's end of its read link to the fs worker (decision 0034):
`hostcapd.frontend.reads.DirectReads` on a real SOCK_SEQPACKET pair, the
test playing the worker at the other end.

What it must do when the worker cannot be trusted to answer: relay until
the link is known up, ask again (once) what a dead worker had taken when
the new one says `Started`, fail a read lost twice UNAVAILABLE, and put the
link in doubt (relay, and probe) when an answer is late or malformed.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator

import msgspec
import pytest
from hostcap_proto.v1 import fs_pb2
from hostcapd.bridge import messages
from hostcapd.errors import Refusal
from hostcapd.frontend import reads
from hostcapd.fs import direct


class Worker:
    """The test's end of the link."""

    def __init__(self, sock: socket.socket) -> None:
        sock.setblocking(False)
        self.sock = sock

    async def receive(self) -> direct.Request:
        loop = asyncio.get_running_loop()
        raw = await asyncio.wait_for(loop.sock_recv(self.sock, direct.MAX_REQUEST), 5)
        header, data = direct.split(raw)
        assert not len(data)
        return direct.REQUESTS.decode(header)

    def send(self, answer: msgspec.Struct, data: bytes = b"") -> None:
        self.sock.send(direct.encode(answer) + data)

    async def sync(self) -> None:
        probe = await self.receive()
        assert isinstance(probe, direct.Sync)
        self.send(direct.Synced(nonce=probe.nonce))


@pytest.fixture
async def link() -> AsyncIterator[tuple[reads.DirectReads, Worker]]:
    front, worker = direct.pair()
    frontend = reads.DirectReads(front)
    yield frontend, Worker(worker)
    frontend.close()
    worker.close()


def _data(outcome: reads.Outcome) -> bytes:
    """The content of a read's answer (its wire bytes, as the client parses them)."""
    assert isinstance(outcome, bytes)
    return fs_pb2.ReadFileResponse.FromString(outcome).data


def _content(ident: int, data: bytes) -> direct.Content:
    return direct.Content(
        id=ident,
        path="a.txt",
        size=len(data),
        offset=0,
        truncated=False,
        is_binary=False,
        media_type="text/plain",
        sha256="0" * 64,
        file_sha256="0" * 64,
    )


REQUEST = messages.ReadFileCall(path="a.txt")


async def _up(frontend: reads.DirectReads, worker: Worker) -> None:
    assert not frontend.up
    assert await frontend.read(REQUEST, None) is None  # relayed until the link is up
    await worker.sync()
    for _ in range(50):
        if frontend.up:
            return
        await asyncio.sleep(0.01)
    raise AssertionError("the link did not come up")


async def test_it_relays_until_the_worker_answered_its_probe(
    link: tuple[reads.DirectReads, Worker],
) -> None:
    frontend, worker = link
    await _up(frontend, worker)
    call = asyncio.ensure_future(frontend.read(REQUEST, messages.Caller(uid=1, gid=2, pid=3)))
    asked = await worker.receive()
    assert isinstance(asked, direct.Read) and asked.path == "a.txt"
    assert asked.caller == messages.Caller(uid=1, gid=2, pid=3)
    worker.send(_content(asked.id, b"hi\n"), b"hi\n")
    outcome = await call
    assert _data(outcome) == b"hi\n"


async def test_a_read_a_dead_worker_took_is_asked_again_once_then_unavailable(
    link: tuple[reads.DirectReads, Worker],
) -> None:
    frontend, worker = link
    await _up(frontend, worker)
    call = asyncio.ensure_future(frontend.read(REQUEST, None))
    first = await worker.receive()
    worker.send(direct.Started(pid=2))  # the worker that took it died
    again = await worker.receive()
    assert again == first  # the same read, the same id
    worker.send(direct.Started(pid=3))  # lost a second time
    outcome = await call
    assert isinstance(outcome, Refusal) and outcome.reason == "UNAVAILABLE"


async def test_an_answer_to_a_read_asked_twice_is_taken_once(
    link: tuple[reads.DirectReads, Worker],
) -> None:
    frontend, worker = link
    await _up(frontend, worker)
    call = asyncio.ensure_future(frontend.read(REQUEST, None))
    first = await worker.receive()
    assert isinstance(first, direct.Read)
    worker.send(direct.Started(pid=2))
    await worker.receive()
    worker.send(_content(first.id, b"x"), b"x")
    worker.send(_content(first.id, b"y"), b"y")  # the duplicate, dropped
    outcome = await call
    assert _data(outcome) == b"x"
    assert not frontend.pending


async def test_a_late_answer_puts_the_link_in_doubt(
    link: tuple[reads.DirectReads, Worker], monkeypatch: pytest.MonkeyPatch
) -> None:
    frontend, worker = link
    await _up(frontend, worker)
    monkeypatch.setattr(direct, "ANSWER_TIMEOUT_S", 0.2)
    call = asyncio.ensure_future(frontend.read(REQUEST, None))
    late = await worker.receive()
    assert isinstance(late, direct.Read)
    assert await call is None  # relayed
    assert not frontend.up
    worker.send(_content(late.id, b"late"), b"late")  # given up: dropped
    await worker.sync()  # its probe, answered: up again
    await asyncio.sleep(0.05)
    assert frontend.up


async def test_a_malformed_answer_puts_the_link_in_doubt(
    link: tuple[reads.DirectReads, Worker],
) -> None:
    frontend, worker = link
    await _up(frontend, worker)
    body = msgspec.msgpack.encode({"op": "content", "id": 1, "surprise": True})
    worker.sock.send(len(body).to_bytes(4, "big") + body)
    probe = await worker.receive()
    assert isinstance(probe, direct.Sync) and not frontend.up


async def test_what_the_link_does_not_carry_is_relayed(
    link: tuple[reads.DirectReads, Worker],
) -> None:
    frontend, worker = link
    await _up(frontend, worker)
    long_path = messages.ReadFileCall(path="a" * (direct.MAX_PATH + 1))
    assert await frontend.read(long_path, None) is None
    call = asyncio.ensure_future(frontend.read(REQUEST, None))
    asked = await worker.receive()
    assert isinstance(asked, direct.Read)
    worker.send(direct.Relay(id=asked.id))  # too large for a datagram
    assert await call is None
    assert frontend.up  # a Relay is no doubt about the link


async def test_one_answer_is_read_a_wake_up_and_the_next_on_the_next(
    link: tuple[reads.DirectReads, Worker],
) -> None:
    """No read a wake-up is spent finding nothing: each takes one answer,
    and the one left waits for the next pass (the reader is level-triggered)."""
    frontend, worker = link
    await _up(frontend, worker)
    first = asyncio.ensure_future(frontend.read(REQUEST, None))
    second = asyncio.ensure_future(frontend.read(REQUEST, None))
    asked = [await worker.receive(), await worker.receive()]
    asyncio.get_running_loop().remove_reader(frontend.sock.fileno())  # this test is the loop
    for request, data in zip(asked, (b"h1", b"h2"), strict=True):
        assert isinstance(request, direct.Read)
        worker.send(_content(request.id, data), data)
    frontend._readable()
    await asyncio.sleep(0)
    assert first.done() and not second.done()
    frontend._readable()
    await asyncio.sleep(0)
    assert second.done()
    # Each answer's bytes are its own (taken out of the receive buffer, which
    # the next answer overwrites, before its call resumes).
    assert (_data(first.result()), _data(second.result())) == (b"h1", b"h2")


async def test_a_cancelled_read_leaves_no_trace_and_no_doubt(
    link: tuple[reads.DirectReads, Worker], monkeypatch: pytest.MonkeyPatch
) -> None:
    frontend, worker = link
    await _up(frontend, worker)
    monkeypatch.setattr(direct, "ANSWER_TIMEOUT_S", 0.2)
    answered = asyncio.ensure_future(frontend.read(REQUEST, None))
    never = asyncio.ensure_future(frontend.read(REQUEST, None))
    asked = [await worker.receive(), await worker.receive()]
    answered.cancel()
    never.cancel()
    assert isinstance(asked[0], direct.Read)
    worker.send(_content(asked[0].id, b"x"), b"x")  # its call is gone: dropped
    await asyncio.sleep(0.3)  # the other's deadline passes: given up
    assert not frontend.pending and frontend.up  # no call waited: no doubt


async def test_a_read_is_given_up_at_its_own_deadline_when_the_timeout_shrinks(
    link: tuple[reads.DirectReads, Worker], monkeypatch: pytest.MonkeyPatch
) -> None:
    frontend, worker = link
    await _up(frontend, worker)
    first = asyncio.ensure_future(frontend.read(REQUEST, None))  # the timer armed for 5 s
    await worker.receive()
    monkeypatch.setattr(direct, "ANSWER_TIMEOUT_S", 0.2)
    second = asyncio.ensure_future(frontend.read(REQUEST, None))
    await worker.receive()
    assert await asyncio.wait_for(second, 2) is None  # given up at 0.2 s, not at 5
    assert not first.done()
    first.cancel()
