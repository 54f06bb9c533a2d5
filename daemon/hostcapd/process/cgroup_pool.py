"""Spawn cgroups made ahead of need, for a runtime's fresh spawns (issue 35).

A fresh spawn with the cgroup protection made its cgroup on its path (a
directory in each hierarchy, then its limits). The pool makes a few while
the runtime is idle: empty, unlimited (nothing can enter one but by the
daemon's own write), in the tenant's cgroup, so whatever later runs in one
is under the tenant's ceilings like any spawn's. Each is `ready-<id>` (cgroups
cannot be renamed: the name says how it was made). A spawn takes one, adopts
its id as its own, and sets its request's limits on it before its child is
placed in it. A spawn that finds the pool empty makes its own, as before.

A spawn's cgroup, once the spawn has ended (its answer has left), is
recycled for the runtime's next spawns (`Recycled`, the runtime's, in its
`SpawnDeps`) rather than removed, when that keeps every guarantee (bench/
README.md, "Issue 35 row 2, a spawn's cgroup recycled"): a runtime is one
tenant's with one profile, so only that tenant's spawns of that profile
use it; only once no process is left in it (the kill sweep done, checked in
every hierarchy), with at most `LEFTOVER_MAX` bytes of memory still charged
to it, its memory peak reset and its counters' values taken as the next
spawn's base (`SpawnCgroup.recycle`); the next spawn sets its own limits
(`CgroupHost.set_limits`) and takes a new id of its own. Not where the
tenant's file changes are attributed (their cgroup fallback names a spawn
by its cgroup). At most `KEEP` are kept a runtime; the rest are removed,
and so are the kept ones when the runtime closes (a reload, a tenant's
removal, shutdown).

    pool = CgroupPool(deps, size=2)    # one per runtime (its WarmPool's)
    pool.fill()                        # makes the missing ones
    cgroup = pool.take()               # None: make one
    pool.refill()                      # soon (after the taker's answer)
    pool.refill(REFILL_AFTER_START)    # or a while after it started
    pool.close()                       # removes the untaken ones (and the recycled)
    deps.recycled.give(cgroup)         # a spawn's, once it ended: False, remove it
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from hostcapd.audit.stamps import event_id as random_id
from hostcapd.kept_loop import KeptLoop
from hostcapd.logsetup import fields
from hostcapd.process import limits as limits_mod
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
#: Spawn cgroups a runtime keeps recycled: as many as the spawns it runs at
#: once, up to this. Each is an empty directory in each hierarchy, and at
#: most LEFTOVER_MAX of memory charged to its tenant's cgroup (its ceiling).
KEEP = 8
#: The most memory still charged to a spawn's cgroup after its spawn for it
#: to be recycled: the kernel objects and page cache a small command leaves,
#: and the charge batches the kernel keeps per CPU (64 pages each): 12-400
#: KiB after /bin/true, cat or python3 here, 2.4 MiB after an `ls -l
#: /usr/bin` (bench/README.md). The next spawn's memory peak starts from
#: that leftover (the kernel's reset), and the kernel counts it against its
#: limit: both at most this much above a new cgroup's, less what the kernel
#: reclaims of it (page cache, kernel objects) when the spawn needs room.
LEFTOVER_MAX = 1024 * 1024


class Recycled:
    """A runtime's spawn cgroups kept for its next spawns (see the module's
    doc). `keep` 0: none is (no cgroup protection, the file changes
    attributed, or `daemon.recycle_spawn_cgroups` off)."""

    def __init__(self, keep: int = 0) -> None:
        self.keep = keep
        self._kept: list[SpawnCgroup] = []
        self._closed = False
        #: For the bench and the tests: cgroups given back and kept, given
        #: back and refused (removed), taken again.
        self.kept = 0
        self.refused = 0
        self.reused = 0

    def __len__(self) -> int:
        return len(self._kept)

    def give(self, cgroup: SpawnCgroup) -> bool:
        """Keep `cgroup`, its spawn ended, for a next spawn; False: the
        caller removes it (none are kept, enough are, or it cannot be made
        the next spawn's: `SpawnCgroup.recycle`)."""
        if self._closed or len(self._kept) >= self.keep:
            return False
        if not cgroup.recycle(LEFTOVER_MAX):
            self.refused += 1
            return False
        self.kept += 1
        self._kept.append(cgroup)
        return True

    def take(self) -> SpawnCgroup | None:
        """A recycled cgroup, now the caller's: empty, its last spawn's
        limits on it (the caller sets its own); None if none is kept."""
        if not self._kept:
            return None
        self.reused += 1
        return self._kept.pop()

    def close(self) -> None:
        """Remove the kept ones; none is kept from now on."""
        self._closed = True
        kept, self._kept = self._kept, []
        for cgroup in kept:
            with contextlib.suppress(CgroupError):
                cgroup.kill()
                cgroup.remove()


def default_limits(deps: SpawnDeps) -> tuple[int | None, int | None]:
    """The memory and pids limits of a spawn that asks for none: its
    tenant's defaults. A recycled cgroup that has them keeps them while a
    warm child waits in it (`WarmPool`): the spawn that takes the child
    most often asks for them too, and then no limit is written at either
    end (six open, write and close of cgroup files a spawn, and the v1
    memory controller's resize twice). A waiting child under them is under
    what its spawn runs under."""
    limits = limits_mod.apply({}, deps.tenant.limits)
    return limits.memory_bytes, limits.pids


class PendingFill:
    """A pool's one pending fill: run `fill` in a later turn of the loop, or
    `delay` seconds from now; a fill asked sooner replaces a later one, a
    later one leaves a sooner one be. Shared by the cgroup and warm pools."""

    def __init__(self, fill: Callable[[], None]) -> None:
        self._fill = fill
        self._handle: asyncio.Handle | None = None
        self._running_loop = KeptLoop()

    def ask(self, delay: float = 0.0) -> None:
        if self._handle is not None:
            if delay:
                return  # one comes as soon
            self._handle.cancel()
        loop = self._running_loop()
        self._handle = loop.call_later(delay, self._fill) if delay else loop.call_soon(self._fill)

    def cancel(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None


class CgroupPool:
    def __init__(self, deps: SpawnDeps, size: int = DEFAULT_SIZE) -> None:
        self.deps = deps
        self.size = size if deps.profile.has("cgroup") else 0
        recycle = deps.recycle_cgroups and deps.profile.fs_changes is None
        deps.recycled.keep = KEEP if self.size and recycle else 0
        self._ready: list[SpawnCgroup] = []
        self._closed = False
        self._pending = PendingFill(self.fill)
        #: For the bench and the tests: cgroups taken, and takes that found none.
        self.taken = 0
        self.missed = 0

    def __len__(self) -> int:
        return len(self._ready)

    def take(self) -> SpawnCgroup | None:
        """An empty cgroup, now the caller's to limit, use and remove (or
        give back: `Recycled.give`): a recycled one first, else one made
        ahead (unlimited); None: make one."""
        if self.size == 0 or self._closed:
            return None
        recycled = self.deps.recycled.take()
        if recycled is not None:
            return recycled
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
                cgroup = self.deps.cgroups.create(random_id(), None, None, ahead=True)
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
        """Remove the untaken cgroups and the recycled ones; no more are
        made or kept."""
        self._closed = True
        self._pending.cancel()
        self.deps.recycled.close()
        ready, self._ready = self._ready, []
        for cgroup in ready:
            with contextlib.suppress(CgroupError):
                cgroup.remove()
