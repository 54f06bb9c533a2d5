"""The bench's interleaving order (`bench.stats.rotation`): each contender
goes first in turn, and none always follows the same neighbour (a fixed
circle did, and moved row 1's warm / fresh: bench/README.md, 2026-12-07)."""

from __future__ import annotations

from collections import Counter

from bench.stats import circle, rotation

NAMES = ("floor", "bwrap", "full", "nocg", "minimal", "full_fresh", "nocg_fresh")


def _before(order: list[str], name: str) -> str | None:
    at = order.index(name)
    return order[at - 1] if at else None


def test_each_round_holds_every_contender_once_and_each_goes_first_in_turn() -> None:
    for index in range(3 * len(NAMES)):
        order = rotation(NAMES, index)
        assert sorted(order) == sorted(NAMES)
        assert order[0] == NAMES[index % len(NAMES)]


def test_no_contender_always_follows_the_same_neighbour() -> None:
    rounds = 40 * len(NAMES)
    for name in NAMES:
        before = Counter(_before(rotation(NAMES, i), name) for i in range(rounds))
        before.pop(None, None)
        # Every other contender came just before it, none in most rounds.
        assert set(before) == set(NAMES) - {name}, (name, before)
        assert max(before.values()) < rounds / 3, (name, before)
    # The old circle: the same neighbour whenever it was not first.
    before = Counter(_before(circle(NAMES, i), "full") for i in range(rounds))
    before.pop(None, None)
    assert list(before) == ["bwrap"]


def test_the_order_is_the_same_in_every_run() -> None:
    assert [rotation(NAMES, i) for i in range(20)] == [rotation(NAMES, i) for i in range(20)]
