"""OutputLog: a detached spawn's output, head and rolling tail, read by offset."""

from __future__ import annotations

import asyncio
import contextlib
import random

from hostcapd.process.output import OutputLog


def test_small_output_is_read_whole_and_by_offset() -> None:
    log = OutputLog(1024)
    log.feed(1, b"hello ")
    log.feed(2, b"oops\n")
    log.feed(1, b"world\n")
    assert log.read(0) == (b"hello world\n", b"oops\n", 17, 0)
    assert log.read(6) == (b"world\n", b"oops\n", 17, 0)
    assert log.read(11) == (b"world\n", b"", 17, 0)
    assert log.read(17) == (b"", b"", 17, 0)


def test_the_middle_is_dropped_and_counted_exactly_per_stream() -> None:
    rng = random.Random(7)
    log = OutputLog(1000)
    stream_of: list[int] = []
    data = bytearray()
    for _ in range(400):
        stream = rng.choice((1, 2))
        piece = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 40)))
        log.feed(stream, piece)
        stream_of += [stream] * len(piece)
        data += piece
    total = len(data)
    assert log.total == total and log.held == 1000
    kept = set(range(500)) | set(range(total - 500, total))
    for stream in (1, 2):
        count = log.counts[stream]
        assert count.total == stream_of.count(stream)
        assert count.dropped == sum(
            1 for i, s in enumerate(stream_of) if s == stream and i not in kept
        )
        assert count.kept + count.dropped == count.total
    for offset in (0, 250, 500, 700, total - 500, total - 10, total):
        out, err, next_offset, skipped = log.read(offset)
        expected = {1: bytearray(), 2: bytearray()}
        for i in range(offset, total):
            if i in kept:
                expected[stream_of[i]].append(data[i])
        assert (out, err) == (bytes(expected[1]), bytes(expected[2])), offset
        assert next_offset == total
        assert skipped == len([i for i in range(offset, total) if i not in kept])


def test_a_trickle_does_not_cost_an_object_a_byte() -> None:
    log = OutputLog(1 << 20)
    for _ in range(100_000):
        log.feed(1, b"x")
    assert len(log._tail) + len(log._head) < 10


async def test_wait_is_woken_by_output_and_timed_out_waits_do_not_pile_up() -> None:
    log = OutputLog(100)
    for _ in range(1000):
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(log.wait(), 0)
    assert len(log._waiters) <= 1
    waiter = log.wait()
    log.feed(1, b"x")
    await asyncio.wait_for(waiter, 1)
