"""Summaries of samples: percentiles and the interleaving order."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


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
    so none always follows the same neighbour (caches, CPU frequency)."""
    k = round_index % len(names)
    return [*names[k:], *names[:k]]
