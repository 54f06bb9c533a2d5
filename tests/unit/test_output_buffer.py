"""StreamBuffer: whatever the child's writes look like, a stream keeps the
first half of output_bytes, the last half, and counts exactly what it dropped
between them (the marker says how much)."""

from __future__ import annotations

import itertools
import tracemalloc

from hostcapd.process.output import TAIL_PIECE, StreamBuffer, marker
from hypothesis import given, settings
from hypothesis import strategies as st

KiB = 1024

read_sizes = st.lists(
    st.one_of(
        st.integers(1, 16),
        st.integers(1, 3 * TAIL_PIECE),
        st.sampled_from([TAIL_PIECE - 1, TAIL_PIECE, TAIL_PIECE + 1]),
    ),
    max_size=40,
)


def output_of(sizes: list[int]) -> bytes:
    """Distinct bytes, so a misplaced or repeated piece shows."""
    total = sum(sizes)
    return bytes(itertools.islice(itertools.cycle(range(251)), total))


def chunks(data: bytes, sizes: list[int]) -> list[bytes]:
    offsets = list(itertools.accumulate(sizes, initial=0))
    return [data[a:b] for a, b in itertools.pairwise(offsets)]


def expected(data: bytes, keep: int) -> tuple[bytes, int]:
    """Head + marker + tail as a Run returns them, and the dropped count."""
    head, tail = keep - keep // 2, keep // 2
    dropped = max(0, len(data) - keep)
    if not dropped:
        return data, 0
    if keep == 0:
        return b"", dropped
    return data[:head] + marker(dropped) + data[len(data) - tail :], dropped


@settings(max_examples=300, deadline=None)
@given(
    sizes=read_sizes, keep=st.sampled_from([0, 1, 2, 7, 100, TAIL_PIECE, 3 * TAIL_PIECE, 256 * KiB])
)
def test_head_marker_and_tail_are_exact_for_any_reads(sizes: list[int], keep: int) -> None:
    data = output_of(sizes)
    run = StreamBuffer(keep)
    streamed = StreamBuffer(keep, retain_head=False)
    sent = b""
    for chunk in chunks(data, sizes):
        run.feed(chunk)
        sent += streamed.feed(chunk)

    kept, dropped = expected(data, keep)
    assert run.result() == kept
    assert (run.total, run.dropped, run.kept) == (len(data), dropped, len(data) - dropped)
    # A stream sends the head as it comes, then the marker and the tail.
    assert sent + streamed.tail() == kept
    assert streamed.head == bytearray()  # the streamed head is not kept twice
    assert (streamed.total, streamed.dropped) == (len(data), dropped)


def test_a_trickle_of_tiny_reads_keeps_the_tail_in_bounded_memory() -> None:
    buf = StreamBuffer(256 * KiB)
    tracemalloc.start()
    try:
        for _ in range(300_000):
            buf.feed(b"x")
        held, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert (buf.kept, buf.dropped) == (256 * KiB, 300_000 - 256 * KiB)
    # An object per read would hold about 5 MiB for this 128 KiB tail.
    assert held < 512 * KiB, f"{held} bytes held for a 128 KiB tail"
