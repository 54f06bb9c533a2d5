"""The root side only counts a call's output (decision 0032): a
`StreamTally` must say exactly what a `StreamBuffer` of the same budget fed
the same reads says (Exited's total, kept and dropped, and the exit
record's), and a tenant's reads take turns on the loop (`OutputTurns`)."""

from __future__ import annotations

import asyncio
import os
import random

import pytest
from hostcapd.process.output import OutputTurns, StreamBuffer, StreamTally


@pytest.mark.parametrize("keep", [0, 1, 2, 7, 4096, 65_537, 1 << 20])
def test_a_tally_counts_what_a_buffer_keeps(keep: int) -> None:
    rng = random.Random(keep)
    tally, buf = StreamTally(keep), StreamBuffer(keep)
    for _ in range(300):
        data = bytes(rng.choice([0, 1, 3, 100, 4096, 70_000]))
        tally.feed(len(data))
        buf.feed(data)
        assert (tally.total, tally.kept, tally.dropped) == (buf.total, buf.kept, buf.dropped)


async def test_a_tenants_reads_take_turns_in_the_order_they_came() -> None:
    loop = asyncio.get_running_loop()
    turns = OutputTurns(per_turn=2)
    pipes = [os.pipe() for _ in range(5)]
    passes: list[list[int]] = []

    def reader(fd: int) -> None:
        if turns.admit(owner, fd, reader):
            loop.remove_reader(fd)
            passes[-1].append(fd)

    owner = object()
    try:
        for r, w in pipes:
            os.write(w, b"x")
            loop.add_reader(r, reader, r)
        for _ in range(8):
            passes.append([])
            await asyncio.sleep(0)
        # Each pipe is read once, never more than two in one pass of the loop.
        assert sorted(fd for reads in passes for fd in reads) == sorted(r for r, _ in pipes)
        assert max(len(reads) for reads in passes) == 2
        assert turns.waiting == 0
        turns.forget(owner)
    finally:
        for r, w in pipes:
            loop.remove_reader(r)
            os.close(r)
            os.close(w)


async def test_an_end_of_file_does_not_use_up_a_pass_but_a_read_of_output_does() -> None:
    loop = asyncio.get_running_loop()
    turns = OutputTurns(per_turn=1)
    owner = object()

    async def passes_to_read(write: bytes) -> list[list[int]]:
        pipes = [os.pipe() for _ in range(2)]
        passes: list[list[int]] = []

        def reader(fd: int) -> None:
            if turns.admit(owner, fd, reader):
                loop.remove_reader(fd)
                if not os.read(fd, 100):
                    turns.refund(owner, fd)
                passes[-1].append(fd)

        try:
            for _, w in pipes:
                if write:
                    os.write(w, write)
                else:
                    os.close(w)  # its end: as when the child exits
            for r, _ in pipes:
                loop.add_reader(r, reader, r)
            for _ in range(4):
                passes.append([])
                await asyncio.sleep(0)
            turns.forget(owner)
            return [p for p in passes if p]
        finally:
            for r, w in pipes:
                loop.remove_reader(r)
                os.close(r)
                if write:
                    os.close(w)

    # Two ends of file: one pass. Two reads of output: one a pass.
    assert [len(p) for p in await passes_to_read(b"")] == [2]
    assert [len(p) for p in await passes_to_read(b"x")] == [1, 1]
