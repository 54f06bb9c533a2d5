"""How one spawn's child comes to be: a fresh child cloned for it, or a warm
child set up ahead of need (decision 0026). Both are a `Launch`: it makes or
adopts the spawn's cgroup, owns the child's fds until the spawner has them,
sends its order in its own order of fds, and gives the pid once the command
exec'd; `Spawn.run` does not know which it has.

    launch = launch_for(deps, warm_entry)      # FreshLaunch if None
    cgroup = launch.make_cgroup(limits)        # with the cgroup protection
    launch.child_fds += [stdin_r, stdout_w, stderr_w]
    await launch.send(order_for, [exe, stdin_r, stdout_w, stderr_w, cancel, go])
    pid = await launch.started()               # SetupFailed, SpawnerLost
    cgroup = launch.release(ran=bool(pid)) or cgroup

A warm child that died while it waited (killed from outside) is replaced by
a fresh one in `started`, in the same cgroup and with the same fds: the
request runs once either way.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

import msgspec

from hostcapd.audit.stamps import event_id as random_id
from hostcapd.egress.supervisor import EgressUnavailable
from hostcapd.logsetup import fields
from hostcapd.sandbox.cgroups import CgroupError, SpawnCgroup
from hostcapd.spawner.client import ExitStatus, SetupFailed, SpawnerLost
from hostcapd.spawner.messages import SpawnOrder

if TYPE_CHECKING:
    from hostcapd.process.deps import SpawnDeps
    from hostcapd.process.warm import WarmEntry

log = logging.getLogger("hostcapd.spawn")


#: Each tenant's /dev/null for its spawns' stdin (read-only), opened once
#: and never closed, lent to every order (sendmsg takes its own reference):
#: an open and a close a spawn fewer. One per tenant: the children of one
#: share its open file description (its status flags, which one can set
#: and another read), never another tenant's.
_NULLS: dict[str, int] = {}


def null_stdin(tenant: str) -> int:
    """`tenant`'s kept /dev/null, lent: the caller never closes it."""
    fd = _NULLS.get(tenant)
    if fd is None:
        fd = _NULLS[tenant] = os.open("/dev/null", os.O_RDONLY | os.O_CLOEXEC)
    return fd


class OrderFor(Protocol):
    """The spawn's order, given what the launch sends beside it."""

    def __call__(self, *, landlock: bool, warm: bool) -> SpawnOrder: ...


class Launch:
    """One spawn's way to a running child (see the module's docstring)."""

    def __init__(self, deps: SpawnDeps, spawn_id: str, cgroup: SpawnCgroup | None = None) -> None:
        self.deps = deps
        #: The spawn's id (a warm child's is its entry's).
        self.id = spawn_id
        #: The spawn's cgroup once made (or adopted); its child joins it.
        self.cgroup = cgroup
        #: The child's ends of its pipes and what else goes with its order:
        #: ours (closed here) until the spawner has cloned the child.
        self.child_fds: list[int] = []
        #: The child's exit status, once `send` has sent the order.
        self.exit: asyncio.Future[ExitStatus] | None = None
        #: The request's correlation labels (its network.connect records carry them).
        self.labels: dict[str, str] = {}
        self._started: asyncio.Future[int] | None = None

    def make_cgroup(self, memory_bytes: int | None, pids: int | None) -> SpawnCgroup:
        """The spawn's cgroup, with its limits; CgroupError if it cannot be."""
        self.cgroup = self.deps.cgroups.create(self.id, memory_bytes, pids)
        return self.cgroup

    async def send(self, order_for: OrderFor, fds: list[int]) -> None:
        """Send the order with `fds` (the executable, stdin, stdout, stderr,
        cancel, go) and what this launch adds; SpawnerLost if it cannot."""
        raise NotImplementedError

    async def started(self) -> int:
        """The pid once the command exec'd; SetupFailed, SpawnerLost."""
        assert self._started is not None
        try:
            return await self._started
        finally:
            self._close_child_fds()

    def release(self, ran: bool) -> SpawnCgroup | None:
        """Every way out: close what is still ours. A cgroup the spawn did not
        make but must remove, if any (a warm child's that never ran)."""
        self._close_child_fds()
        return None

    async def _send(
        self, order: SpawnOrder, fds: list[int], lent: Callable[[], list[int]] | None = None
    ) -> None:
        """Send `order` with `fds`, then what `lent` gives (fds still their
        owners', taken in the step the order is sent: valid then, and
        sendmsg takes its own references), once the spawner is ready."""
        spawner = self.deps.spawner
        for attempt in (1, 2):
            await spawner.ready()
            try:
                self._started, self.exit = spawner.spawn(
                    order, fds if lent is None else fds + lent()
                )
                return
            except SpawnerLost:
                # Found dead on sending: nothing was sent, so nothing ran.
                if attempt == 2:
                    raise

    def _close_child_fds(self) -> None:
        for fd in self.child_fds:
            with contextlib.suppress(OSError):
                os.close(fd)
        self.child_fds.clear()


class FreshLaunch(Launch):
    """A child cloned for this spawn: it joins its cgroup and restricts itself
    with its ruleset, both sent beside its order."""

    def __init__(
        self, deps: SpawnDeps, spawn_id: str | None = None, cgroup: SpawnCgroup | None = None
    ) -> None:
        super().__init__(deps, spawn_id or random_id(), cgroup)

    def make_cgroup(self, memory_bytes: int | None, pids: int | None) -> SpawnCgroup:
        if self.cgroup is None:
            return super().make_cgroup(memory_bytes, pids)
        # Made ahead or recycled (process/cgroup_pool.py), empty: its limits now.
        try:
            self.deps.cgroups.set_limits(self.cgroup, memory_bytes, pids)
        except CgroupError:
            if not self.cgroup.uses:
                raise
            # A recycled one's leftover charge above this spawn's memory
            # limit (v1 refuses a limit it cannot reclaim to): a new one.
            with contextlib.suppress(CgroupError):
                self.cgroup.remove()
            return super().make_cgroup(memory_bytes, pids)
        return self.cgroup

    async def send(self, order_for: OrderFor, fds: list[int]) -> None:
        deps = self.deps
        ruleset = deps.profile.new_ruleset()
        extra = [ruleset] if ruleset >= 0 else []
        self.child_fds += extra
        order = order_for(landlock=ruleset >= 0, warm=False)
        netns = False
        if deps.egress is not None and not order.env:
            # The spawn's network namespace, the proxy's listeners in it (an
            # environment's spawns join the environment's: process/environments.py).
            try:
                netns_fd = await deps.egress.open(self.id, self.labels)
            except (EgressUnavailable, OSError) as error:
                raise SetupFailed("egress", 0, str(error)) from None
            self.child_fds.append(netns_fd)
            extra.append(netns_fd)
            netns = True
        if netns:
            order = msgspec.structs.replace(order, netns=True)
        # Its cgroup's and the tenant's cpu share's cgroup.procs fds
        # (hostcapd.sandbox.cpu) go last, lent, as a warm order's are: not
        # dup'd and closed (three dups and three closes a spawn), taken in
        # the step the order is sent (a reload may replace the share while
        # the order waits for a restarting spawner).
        cgroup = self.cgroup
        await self._send(order, fds + extra, self._lent_cgroup_fds if cgroup is not None else None)
        self._close_child_fds()

    def _lent_cgroup_fds(self) -> list[int]:
        assert self.cgroup is not None
        return self.cgroup.lent_procs_fds() + self.deps.profile.cpu_procs_fds(lent=True)

    def release(self, ran: bool) -> SpawnCgroup | None:
        if self.deps.egress is not None:
            self.deps.egress.close(self.id)
        super().release(ran)
        return self.cgroup  # made, or taken from the pool: removed or recycled


class WarmLaunch(Launch):
    """The warm child of `entry`: in its cgroup already, its filters applied;
    only the request's part (the executable, argv, env, cwd, rlimits, stdio)
    goes with the order. If it is gone by then, a fresh child runs instead."""

    def __init__(self, deps: SpawnDeps, entry: WarmEntry) -> None:
        super().__init__(deps, entry.id)
        self.entry = entry
        self._resend: tuple[OrderFor, list[int]] | None = None
        self._fresh: FreshLaunch | None = None

    def make_cgroup(self, memory_bytes: int | None, pids: int | None) -> SpawnCgroup:
        cgroup = self.entry.cgroup
        if cgroup is None:
            return super().make_cgroup(memory_bytes, pids)
        try:
            self.deps.cgroups.set_limits(cgroup, memory_bytes, pids)  # its child is in it
        except CgroupError:
            # Refused (v1: the charge in it, a recycled one's leftover and
            # the waiting child's own, above the request's memory limit),
            # where a fresh child's new cgroup would take it: the warm child
            # is dropped, and a fresh one runs in a new cgroup, as for a
            # fresh spawn (whose CgroupError, if that fails too, is the spawn's).
            self._drop_warm()
            self._fresh = FreshLaunch(self.deps, self.id)
            self.cgroup = self._fresh.make_cgroup(memory_bytes, pids)
            return self.cgroup
        self.cgroup = cgroup
        return cgroup

    def _drop_warm(self) -> None:
        """The warm child killed and its cgroup removed, no spawn's."""
        self.deps.spawner.drop_warm(self.id)
        cgroup, self.entry.cgroup = self.entry.cgroup, None
        if cgroup is not None:
            try:
                cgroup.kill()
                cgroup.remove()
            except CgroupError as error:
                log.warning(
                    "spawn %s: its warm child's cgroup was not removed: %s",
                    self.id,
                    error,
                    extra=fields(tenant=self.deps.tenant.name, spawn_id=self.id),
                )

    async def send(self, order_for: OrderFor, fds: list[int]) -> None:
        fresh = self._fresh
        if fresh is not None:  # its cgroup refused the request's limits (make_cgroup)
            fresh.labels = self.labels
            fresh.child_fds, self.child_fds = self.child_fds, []
            await fresh.send(order_for, fds)
            self._started, self.exit = fresh._started, fresh.exit
            return
        # The child's fds are kept until it has started: a fresh child may need them.
        self._resend = (order_for, fds)
        if self.deps.egress is not None:  # its namespace's records: this spawn's labels now
            self.deps.egress.relabel(self.id, self.labels)
        await self._send(order_for(landlock=False, warm=True), fds)

    async def started(self) -> int:
        assert self._started is not None
        try:
            return await self._started
        except SetupFailed as error:
            if error.step != "warm":
                raise
            log.warning(
                "spawn %s: its warm child was gone; spawning fresh",
                self.id,
                extra=fields(tenant=self.deps.tenant.name, spawn_id=self.id),
            )
            return await self._spawn_fresh()
        finally:
            self._close_child_fds()

    async def _spawn_fresh(self) -> int:
        assert self._resend is not None
        fresh = self._fresh = FreshLaunch(self.deps, self.id, self.cgroup)
        fresh.child_fds, self.child_fds = self.child_fds, []
        await fresh.send(*self._resend)
        self.exit = fresh.exit
        return await fresh.started()

    def release(self, ran: bool) -> SpawnCgroup | None:
        super().release(ran)
        if self._fresh is not None:
            return self._fresh.release(ran)
        if self.deps.egress is not None:
            self.deps.egress.close(self.id)
        if ran:
            return None
        # Taken but never given its request (refused, cancelled, failed): it
        # is killed, and whatever is in its cgroup dies with it.
        self.deps.spawner.drop_warm(self.id)
        cgroup = self.entry.cgroup
        if cgroup is not None:
            with contextlib.suppress(CgroupError):
                cgroup.kill()
        return cgroup


def launch_for(
    deps: SpawnDeps, warm: WarmEntry | None, cgroup: SpawnCgroup | None = None
) -> Launch:
    """A warm child's launch if the pool gave one, else a fresh one (in
    `cgroup`, made ahead, whose name its spawn takes as its id, if given;
    a recycled one's served a spawn already: its spawn takes an id of its own)."""
    if warm is not None:
        return WarmLaunch(deps, warm)
    spawn_id = cgroup.name if cgroup is not None and not cgroup.uses else None
    return FreshLaunch(deps, spawn_id, cgroup)
