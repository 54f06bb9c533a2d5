"""How a spawn's tree is ended: final before it is reported.

A cancel, a timeout, a limit or an admin kill runs `kill_sequence`: SIGTERM
to the command (with an init as pid 1 it is delivered: the init forwards
it), the grace only while the tree is still alive, then SIGKILL: to the
cgroup first (a setsid cannot leave it; cgroup.kill is one write in the
root), then to the pid namespace's init and the process group, through the
spawner that owns the children (what kills where there is no cgroup). With
no grace, `begin` kills in the caller's own callback (the timer's, the
cancel's), not a loop turn later.

The spawn reports its end (Run returns, Spawn's last event, the admin
Kill's reply) only once its main process is reaped and its pipes are at
EOF: with a pid namespace the reaped init means every process of it is gone
(the kernel kills and reaps them before the init's exit completes); without
one the spawner kills the main process's group as it reaps it (before its
exit is reported), and the cgroup kill after that waits until the cgroup
is empty. The kill of a running tree does not wait (cgroup.kill is written
at once; the loop is not blocked while the tree dies).
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import Callable, Coroutine
from typing import Any

from hostcap_proto.names import Rusage

from hostcapd.spawner.client import SpawnerLost

#: How long a Signal(SIGKILL) waits for the tree to be gone before it answers,
#: beyond the kill grace.
SIGKILL_WAIT_MARGIN_S = 10.0


def begin(
    sequence: Callable[[], Coroutine[Any, Any, None]],
    kill_tree: Callable[[int], None],
    grace: float,
) -> asyncio.Task[None] | None:
    """With a grace, `sequence` (which calls `kill_sequence`) as a task; with
    none, SIGKILL now, in the caller's own callback (the timer's, the
    cancel's), not a loop turn later."""
    if grace > 0:
        return asyncio.ensure_future(sequence())
    kill_tree(signal.SIGKILL)
    return None


async def kill_sequence(
    kill_tree: Callable[[int], None], exited: asyncio.Future[Any], grace: float
) -> None:
    """SIGTERM, then the grace while the main process lives, then SIGKILL."""
    if grace > 0 and not exited.done():
        kill_tree(signal.SIGTERM)
        with contextlib.suppress(TimeoutError, SpawnerLost, asyncio.CancelledError):
            await asyncio.wait_for(asyncio.shield(exited), grace)
    kill_tree(signal.SIGKILL)


async def wait_ended(done: asyncio.Future[Any], timeout: float) -> bool:
    """Wait (bounded) for a spawn's end to be reported; False if it was not."""
    try:
        await asyncio.wait_for(asyncio.shield(done), timeout)
    except TimeoutError:
        return False
    except Exception:  # a refusal also ends it: nothing ran
        return True
    return True


def tree_rusage(rusage: Rusage, peak_memory_bytes: int | None) -> Rusage:
    """The rusage reported for a spawn, max_rss the tree's own peak.

    A process's ru_maxrss starts from the memory it had before its exec, and
    the command's process is cloned from the spawner (through the init): it
    would report the spawner's size for every small command. The cgroup's
    peak is the tree's own, where there is a cgroup; otherwise the wait4
    figure is what there is.
    """
    if peak_memory_bytes is None:
        return rusage
    return rusage._replace(max_rss_bytes=peak_memory_bytes)
