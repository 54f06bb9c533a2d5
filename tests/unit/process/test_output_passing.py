"""The root side only counts a call's output (decision 0032): a
`StreamTally` must say exactly what a `StreamBuffer` of the same budget fed
the same reads says (Exited's total, kept and dropped, and the exit
record's), and a tenant's reads take turns on the loop (`OutputTurns`)."""

from __future__ import annotations

import asyncio
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
    turns = OutputTurns(per_turn=2)
    assert turns.take() and turns.take()
    assert not turns.take()  # a third read in the same pass waits
    resumed: list[str] = []
    for name in ("a", "b", "c"):
        turns.wait(name, lambda name=name: resumed.append(name))
    turns.forget("b")
    await asyncio.sleep(0)  # the next pass: two reads, to those that waited longest
    assert resumed == ["a", "c"]
    assert not turns.take()  # they were given this pass's reads
    await asyncio.sleep(0)
    assert turns.take()
