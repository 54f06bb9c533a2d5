"""The timerfd deadlines behind spawns' wall-clock limits: each fires once, at
or after its time (never before), in order; a cancelled one never fires."""

from __future__ import annotations

import asyncio
import gc
import os
import time

from hostcapd.process import deadlines


async def test_deadlines_fire_in_order_never_early_and_cancelled_ones_never() -> None:
    loop = asyncio.get_running_loop()
    fired: list[tuple[str, float, float]] = []
    done = loop.create_future()

    def note(name: str, due: float) -> None:
        fired.append((name, due, time.monotonic()))
        if name == "last":
            done.set_result(None)

    now = time.monotonic()
    # Out of order, one cancelled, one cancelled that was the earliest (armed).
    deadlines.call_later(0.03, note, "c", now + 0.03)
    deadlines.call_later(0.01, note, "a", now + 0.01)
    deadlines.call_later(0.005, note, "never", 0.0).cancel()
    deadlines.call_later(0.02, note, "b", now + 0.02)
    dropped = deadlines.call_later(0.025, note, "never", 0.0)
    deadlines.call_later(0.04, note, "last", now + 0.04)
    dropped.cancel()
    await asyncio.wait_for(done, 5)
    assert [name for name, _, _ in fired] == ["a", "b", "c", "last"]
    for name, due, at in fired:
        assert at >= due, f"{name} fired {due - at:.6f} s early"


async def test_a_deadline_added_from_a_callback_and_a_past_one_fire() -> None:
    loop = asyncio.get_running_loop()
    done = loop.create_future()
    deadlines.call_later(0.001, lambda: deadlines.call_later(-1.0, done.set_result, "again"))
    assert await asyncio.wait_for(done, 5) == "again"


async def test_many_cancelled_deadlines_are_pruned() -> None:
    handles = [deadlines.call_later(600.0, lambda: None) for _ in range(200)]
    for handle in handles:
        handle.cancel()
    deadlines.call_later(600.0, lambda: None).cancel()
    table = deadlines._per_loop[asyncio.get_running_loop()]
    assert len(table._heap) < 100


def test_a_closed_loops_timerfd_is_closed_with_it() -> None:
    async def arm() -> int:
        deadlines.call_later(600.0, lambda: None)
        return deadlines._per_loop[asyncio.get_running_loop()]._fd

    loop = asyncio.new_event_loop()
    fd = loop.run_until_complete(arm())
    assert os.readlink(f"/proc/self/fd/{fd}") == "anon_inode:[timerfd]"
    loop.close()
    del loop
    gc.collect()
    assert not os.path.exists(f"/proc/self/fd/{fd}") or "timerfd" not in os.readlink(
        f"/proc/self/fd/{fd}"
    )
