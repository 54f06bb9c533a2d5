"""Summaries of samples: percentiles and the interleaving order."""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass


def per_call_us(fn: Callable[[], object], calls: int) -> float:
    """Mean µs of one of `calls` calls of `fn` in a row (an in-process A/B's
    one window: the old and the new way alternate by window)."""
    began = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - began) / calls * 1e6


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0..100), linearly interpolated."""
    if not values:
        raise ValueError("no samples")
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100
    low = int(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


@dataclass(frozen=True)
class Summary:
    """Latency samples in seconds, summarised in microseconds."""

    n: int
    p50_us: float
    p95_us: float
    min_us: float

    @classmethod
    def of(cls, seconds: Sequence[float]) -> Summary:
        us = [s * 1e6 for s in seconds]
        return cls(len(us), percentile(us, 50), percentile(us, 95), min(us))


def rotation(names: Sequence[str], round_index: int) -> list[str]:
    """The order of one interleaved round: each contender goes first in turn,
    and the others follow it in an order shuffled for that round (seeded by
    it: the same in every run), so none always follows the same neighbour
    (caches, CPU frequency, and what the call before left to do: a warm
    spawn's refill, bwrap's namespaces torn down). A fixed circle, as before
    2026-12-07 (`circle`), kept every contender's neighbours: row 1's warm
    `full` always came right after `bwrap` and `full_fresh` after `minimal`,
    which moved warm / fresh by 0.05-0.1 (bench/README.md, `rotation_ab`)."""
    k = round_index % len(names)
    rest = [name for i, name in enumerate(names) if i != k]
    random.Random(round_index).shuffle(rest)
    return [names[k], *rest]


def circle(names: Sequence[str], round_index: int) -> list[str]:
    """The old order of a round: `names` as a circle, each first in turn."""
    k = round_index % len(names)
    return [*names[k:], *names[:k]]
