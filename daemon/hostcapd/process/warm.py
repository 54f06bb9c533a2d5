"""The warm path: sandboxes made ahead of need, one runtime's (decision 0026).

A warm entry is a child the spawner cloned before any request, born in the
spawn cgroup made for it here (no migration on the request path; none
without the cgroup protection), set up to
its identity and filters, and waiting for the request's part: the spawn that
takes it adopts its id and cgroup, sets the request's limits on the cgroup
and sends only the executable, argv, env, cwd, rlimits and stdio. It is used
once, and never outlives its runtime (a reload's new config makes a new
runtime and pool; the old pool's children are killed when it closes).

    pool = WarmPool(deps, size=None)   # one per TenantRuntime (None: the default)
    pool.fill()                        # orders the missing entries
    entry = pool.take(prepared, rlimits)  # None: spawn fresh
    pool.close()                       # kills what waits

A proxy-mode tenant's warm child waits in a network namespace made for it
by the egress proxy (`EgressProxy.open` under its id, which its spawn
adopts: the proxy's records name that spawn, with its labels once taken).

A request the warm child could not apply as a fresh child would (a hard
rlimit above what the unprivileged child may set, RLIMIT_NPROC, whose check
depends on the order of setuid and setrlimit, or a request too large for its
buffer) spawns fresh; so does every request while the pool is empty.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import resource
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from hostcapd.audit.stamps import event_id as random_id
from hostcapd.childsetup import WARM_BUFFER, RLimit
from hostcapd.egress.supervisor import EgressUnavailable
from hostcapd.logsetup import fields
from hostcapd.process.cgroup_pool import CgroupPool, PendingFill, default_limits
from hostcapd.sandbox import identity
from hostcapd.sandbox.cgroups import CgroupError, SpawnCgroup
from hostcapd.spawner.client import SetupFailed, SpawnerLost
from hostcapd.spawner.messages import WarmOrder

if TYPE_CHECKING:
    from hostcapd.process.deps import SpawnDeps
    from hostcapd.process.request import Prepared

log = logging.getLogger("hostcapd.warm")

#: Entries kept when the config does not say (`warm_spawns` unset) and the
#: profile has a pid namespace: without one a warm child is the command
#: itself, whose exec then tears down its copy of the spawner, and the A/B
#: (bench/warm_ab.py) measured no gain.
DEFAULT_SIZE = 2
#: Room left in a warm child's buffer for the layout's words (see pack_request).
_BUFFER_MARGIN = 64 * 1024


@dataclass
class WarmEntry:
    """One warm child: the id its spawn takes, its cgroup, its readiness."""

    id: str
    cgroup: SpawnCgroup | None
    #: Its pid once it waits; SetupFailed / SpawnerLost if it never will.
    ready: asyncio.Future[int]

    @property
    def usable(self) -> bool:
        r = self.ready
        return r.done() and not r.cancelled() and r.exception() is None


class WarmPool:
    def __init__(self, deps: SpawnDeps, size: int | None) -> None:
        self.deps = deps
        if size is None:
            size = DEFAULT_SIZE if deps.profile.has("pid_namespace") else 0
        #: Entries kept waiting.
        self.size = size
        self._entries: dict[str, WarmEntry] = {}
        self._closed = False
        self._pending = PendingFill(self.fill)
        #: Entries whose egress namespace is being made (a proxy-mode tenant's).
        self._opening = 0
        self._tasks: set[asyncio.Future[None]] = set()
        #: The tenant's roots as the child sees them (a cwd is beneath one).
        self.roots = tuple(str(r.path).encode() for r in deps.tenant.roots)
        #: RLIMIT_NPROC, set before the identity (its check is the uid
        #: switch's): the tenant's default, so a spawn with another runs fresh.
        pids = deps.tenant.limits.effective_default("pids")
        by_rlimit = deps.profile.has("rlimits") and not deps.profile.has("cgroup")
        self.early: tuple[RLimit, ...] = (
            ((resource.RLIMIT_NPROC, int(pids), int(pids)),) if by_rlimit and pids else ()
        )
        #: Hard limits of ours, which the child inherits and may only lower.
        self._hard = {
            res: resource.getrlimit(res)[1]
            for res in (
                resource.RLIMIT_CORE,
                resource.RLIMIT_CPU,
                resource.RLIMIT_AS,
                resource.RLIMIT_FSIZE,
                resource.RLIMIT_NOFILE,
            )
        }
        #: Counts, for the bench and the tests: spawns that took a warm child,
        #: and ones that found none ready.
        self.taken = 0
        self.missed = 0
        #: Spawn cgroups made ahead for the fresh spawns (process/cgroup_pool.py).
        self.cgroups = CgroupPool(deps)

    def __len__(self) -> int:
        return len(self._entries)

    def fits(self, prepared: Prepared, rlimits: Sequence[RLimit]) -> bool:
        """Would a warm child run this request exactly as a fresh one?"""
        nproc = tuple(r for r in rlimits if r[0] == resource.RLIMIT_NPROC)
        if nproc != self.early:
            return False
        for res, soft, hard in rlimits:
            if res == resource.RLIMIT_NPROC:
                continue  # set before the identity already
            limit = self._hard.get(res)
            if limit is None or soft > hard:
                return False  # one we never checked
            if limit != resource.RLIM_INFINITY and (hard == resource.RLIM_INFINITY or hard > limit):
                return False
        room = WARM_BUFFER - _BUFFER_MARGIN
        strings = [
            *prepared.argv,
            *prepared.env,
            *prepared.env.values(),
            prepared.cwd.relative,
            prepared.exe.path,
        ]
        words = 8 * (len(prepared.argv) + len(prepared.env) + 2)
        if words + sum(4 * len(s) + 2 for s in strings) < room:  # UTF-8: <= 4 bytes a char
            return True
        return words + sum(len(s.encode()) + 2 for s in strings) < room

    def take(self, prepared: Prepared, rlimits: Sequence[RLimit]) -> WarmEntry | None:
        """A ready entry for this request, now the caller's; None: spawn fresh."""
        if self.size == 0 or self._closed:
            return None
        entry = None
        if self.fits(prepared, rlimits):
            for warm_id, candidate in self._entries.items():
                if candidate.usable:
                    entry = self._entries.pop(warm_id)
                    self.deps.spawner.warm_taken(warm_id)
                    break
        if entry is None:
            self.missed += 1
        else:
            self.taken += 1
        return entry

    def refill(self, delay: float = 0.0) -> None:
        """Order what is missing in a later turn of the loop, `delay` seconds
        from now (a refill sooner replaces a later one). The taker calls it
        once its answer has left, or REFILL_AFTER_START after its command
        started if it runs on: the next child's cgroup, ruleset and order
        (0.5-0.8 ms of the loop) are off its path, and so is the spawner's
        clone of it (bench/README.md, "Issue 35 item 2, a warm path that pays")."""
        if not self._closed:
            self._pending.ask(delay)

    def fill(self) -> None:
        """Order the entries missing; a failure leaves the pool short until
        the next take (logged, never raised: the fresh path still works)."""
        self._pending.cancel()
        if self.deps.egress is not None:
            while not self._closed and len(self._entries) + self._opening < self.size:
                self._opening += 1
                task = asyncio.ensure_future(self._order_with_egress())
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)
            return
        while not self._closed and len(self._entries) < self.size:
            try:
                self._order_one()
            except (CgroupError, SpawnerLost, OSError) as error:
                self._not_made(error)
                return

    def _not_made(self, error: BaseException) -> None:
        name = self.deps.tenant.name
        log.warning("tenant %s: no warm child made: %s", name, error, extra=fields(tenant=name))

    async def _order_with_egress(self) -> None:
        """A warm child in a namespace the egress proxy serves, made first."""
        egress = self.deps.egress
        assert egress is not None
        warm_id = random_id()
        try:
            netns_fd = await egress.open(warm_id)
        except (EgressUnavailable, OSError) as error:
            self._opening -= 1
            self._not_made(error)
            return
        self._opening -= 1
        try:
            if self._closed:
                raise OSError("the pool is closed")
            self._order_one(warm_id, netns_fd)
        except (CgroupError, SpawnerLost, OSError) as error:
            egress.close(warm_id)
            if not self._closed:
                self._not_made(error)
        finally:
            os.close(netns_fd)

    def _order_one(self, warm_id: str | None = None, netns_fd: int = -1) -> None:
        deps = self.deps
        warm_id = warm_id or random_id()
        # Unlimited while it waits (it is ours); the spawn sets its limits.
        # A recycled cgroup (process/cgroup_pool.py) is made unlimited again,
        # unless it has the tenant's defaults (most spawns': none written).
        cgroup = None
        if deps.profile.has("cgroup"):
            cgroup = deps.recycled.take()
            if cgroup is not None and cgroup.limits != default_limits(deps):
                try:
                    deps.cgroups.set_limits(cgroup, None, None)
                except CgroupError:
                    _remove(cgroup)
                    cgroup = None
            if cgroup is None:
                cgroup = deps.cgroups.create(warm_id, None, None, warm=True)
            cgroup.open_stats()  # its spawn's stats at the end: a pread each
        fds: list[int] = []
        # The cgroup.procs fds are lent, not dup'd (the cgroup's and the cpu
        # share's own: never closed here): the order is sent in this step,
        # and sendmsg takes its own references (four dups and four closes a
        # spawn fewer). `owned` are ours to close.
        owned: list[int] = []
        try:
            ruleset = deps.profile.new_ruleset()
            if ruleset >= 0:
                fds.append(ruleset)
                owned.append(ruleset)
            if cgroup is not None:
                fds += cgroup.lent_procs_fds()
                fds += deps.profile.cpu_procs_fds(lent=True)
            if netns_fd >= 0:
                owned.append(os.dup(netns_fd))
                fds.append(owned[-1])  # the last (WarmOrder.netns)
            ident = identity.plan(deps.tenant.uid, deps.tenant.gid, set(deps.profile.applied))
            order = WarmOrder(
                id=warm_id,
                profile=deps.profile_key,
                ids=ident.ids,
                loginuid=ident.loginuid,
                landlock=ruleset >= 0,
                roots=self.roots,
                rlimits=self.early,
                netns=netns_fd >= 0,
            )
            ready = deps.spawner.warm(order, fds, self._lost)
        except BaseException:
            if cgroup is not None:
                _remove(cgroup)
            raise
        finally:
            for fd in owned:
                os.close(fd)
        self._entries[warm_id] = WarmEntry(warm_id, cgroup, ready)
        ready.add_done_callback(lambda f: self._settled(warm_id, f))

    def _settled(self, warm_id: str, ready: asyncio.Future[int]) -> None:
        if ready.cancelled() or ready.exception() is None:
            return
        error = ready.exception()
        entry = self._entries.pop(warm_id, None)
        if entry is not None:
            self.discard(entry)
        if isinstance(error, SetupFailed):
            # Not retried at once (it would fail the same way): the next
            # take orders again.
            log.warning(
                "tenant %s: a warm child failed: %s",
                self.deps.tenant.name,
                error,
                extra=fields(tenant=self.deps.tenant.name),
            )

    def _lost(self, warm_id: str) -> None:
        """It died waiting (or the spawner did): its cgroup goes, another comes."""
        entry = self._entries.pop(warm_id, None)
        if entry is not None:
            self.discard(entry)
            self.refill()

    def close(self) -> None:
        """Kill every waiting child and remove its cgroup; no more are made."""
        self._closed = True
        self._pending.cancel()
        self.cgroups.close()
        entries, self._entries = self._entries, {}
        for entry in entries.values():
            self.discard(entry)

    def discard(self, entry: WarmEntry) -> None:
        """An entry no spawn will run: its child is killed, its cgroup removed."""
        self.deps.spawner.drop_warm(entry.id)
        if self.deps.egress is not None:
            self.deps.egress.close(entry.id)
        if entry.cgroup is not None:
            _remove(entry.cgroup)


def _remove(cgroup: SpawnCgroup) -> None:
    """Kill what is in a warm entry's cgroup and remove it."""
    with contextlib.suppress(CgroupError):
        cgroup.kill()
        cgroup.remove()
