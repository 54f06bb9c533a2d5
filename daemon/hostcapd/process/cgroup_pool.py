"""Spawn cgroups made ahead of need, for a runtime's fresh spawns (issue 35).

A fresh spawn with the cgroup protection made its cgroup on its path (a
directory in each hierarchy, then its limits). The pool makes a few while
the runtime is idle: empty, unlimited (nothing can enter one but by the
daemon's own write), in the tenant's cgroup, so whatever later runs in one
is under the tenant's ceilings like any spawn's. Each is `ready-<id>` (cgroups
cannot be renamed: the name says how it was made). A spawn takes one, adopts
its id as its own, and sets its request's limits on it before its child is
placed in it; it is removed when that spawn ends, never used again. A
spawn that finds the pool empty makes its own, as before.

    pool = CgroupPool(deps, size=2)    # one per runtime (its WarmPool's)
    pool.fill()                        # makes the missing ones
    cgroup = pool.take()               # None: make one
    pool.refill()                      # soon (after the taker's answer)
    pool.refill(REFILL_AFTER_START)    # or a while after it started
    pool.close()                       # removes the untaken ones
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING

from hostcapd.logsetup import fields
from hostcapd.sandbox.cgroups import CgroupError, SpawnCgroup

if TYPE_CHECKING:
    from hostcapd.process.deps import SpawnDeps

log = logging.getLogger("hostcapd.spawn")

#: Cgroups kept ready per runtime: two fresh spawns back to back, or a few
#: at once, find theirs made.
DEFAULT_SIZE = 2
#: A taker that runs on (detached, or a long command) has its cgroup made
#: again this long after it started; one that ends sooner, once its answer
#: has left.
REFILL_AFTER_START = 0.05


class PendingFill:
    """A pool's one pending fill: run `fill` in a later turn of the loop, or
    `delay` seconds from now; a fill asked sooner replaces a later one, a
    later one leaves a sooner one be. Shared by the cgroup and warm pools."""

    def __init__(self, fill: Callable[[], None]) -> None:
        self._fill = fill
        self._handle: asyncio.Handle | None = None

    def ask(self, delay: float = 0.0) -> None:
        if self._handle is not None:
            if delay:
                return  # one comes as soon
            self._handle.cancel()
        loop = asyncio.get_running_loop()
        self._handle = loop.call_later(delay, self._fill) if delay else loop.call_soon(self._fill)

    def cancel(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None


class CgroupPool:
    def __init__(self, deps: SpawnDeps, size: int = DEFAULT_SIZE) -> None:
        self.deps = deps
        self.size = size if deps.profile.has("cgroup") else 0
        self._ready: list[SpawnCgroup] = []
        self._closed = False
        self._pending = PendingFill(self.fill)
        #: For the bench and the tests: cgroups taken, and takes that found none.
        self.taken = 0
        self.missed = 0

    def __len__(self) -> int:
        return len(self._ready)

    def take(self) -> SpawnCgroup | None:
        """An empty, unlimited cgroup, now the caller's to limit, use once
        and remove; None: make one."""
        if self.size == 0 or self._closed:
            return None
        if not self._ready:
            self.missed += 1
            return None
        self.taken += 1
        return self._ready.pop()

    def refill(self, delay: float = 0.0) -> None:
        """Make what is missing in a later turn of the loop, `delay` seconds
        from now (a refill sooner replaces a later one)."""
        if self._closed or len(self._ready) >= self.size:
            return
        self._pending.ask(delay)

    def fill(self) -> None:
        """Make the missing cgroups; a failure leaves the pool short (logged,
        never raised: a spawn then makes its own, and says why if it cannot)."""
        self._pending.cancel()
        while not self._closed and len(self._ready) < self.size:
            try:
                cgroup = self.deps.cgroups.create(uuid.uuid4().hex, None, None, ahead=True)
            except CgroupError as error:
                name = self.deps.tenant.name
                log.warning(
                    "tenant %s: no spawn cgroup made ahead: %s",
                    name,
                    error,
                    extra=fields(tenant=name),
                )
                return
            cgroup.open_stats()  # its stats at the spawn's end: a pread each
            self._ready.append(cgroup)

    def close(self) -> None:
        """Remove the untaken cgroups; no more are made."""
        self._closed = True
        self._pending.cancel()
        ready, self._ready = self._ready, []
        for cgroup in ready:
            with contextlib.suppress(CgroupError):
                cgroup.remove()
