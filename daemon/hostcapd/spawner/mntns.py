"""A pool of mount namespaces with a tenant's new root already assembled,
made ahead of need by the spawner's pool maker (spawner/maker.py), or by
the spawner while it is idle.

A spawn in its own mount namespace pays, in the vfork child and so on the
request path, for a copy of the host's mount table and some 25 steps that
build its new root (clones of the shown trees, a staging tmpfs, pivot_root,
the read-only locks): about 1.5 ms here. Those steps depend only on the
tenant's profile, so the spawner runs them ahead of need in a short-lived
child (`childsetup.mount_namespace`) and keeps the namespace's fd. A spawn
joins one with setns(2) and makes only its own steps (a fresh /proc for its
pid namespace). Each namespace serves one spawn (the spawner closes its fd
once that spawn is reaped: decision 0009): its /tmp, /dev/shm and mounts are
never shared. A namespace older
than `max_age` seconds is dropped rather than used, so a spawn does not see
the host's trees as they were long ago.

Each is a copy of a template (`Templates`): the new root of the profile's
host trees is built once (`namespaces.template_split`), in a namespace of
its own that no process ever enters, and a namespace for a spawn is a copy
of it (setns, then one unshare copies all of its mounts) with the mounts
that must be its own made fresh on the copy: its /tmp (with the roots
beneath /tmp), its /dev/shm. The build per spawn copied the host's mount
table, cloned and moved each tree, and its pivot_root walked every process
of the machine (chroot_fs_refs): 0.37-0.42 ms of CPU against 0.12 ms for a
copy (bench/README.md, 2026-12-06). A copy's age is its template's: a
template is made again once `TEMPLATE_AGE` old.
"""

from __future__ import annotations

import os
import time
from collections import deque
from collections.abc import Sequence

from hostcapd import childsetup
from hostcapd.childsetup import Mount
from hostcapd.sandbox import namespaces

Mounts = Sequence[Mount]
#: Seconds a profile's template is copied for before it is made again.
TEMPLATE_AGE = 10.0
#: Templates held at once (the least recently made goes first).
TEMPLATES = 16
#: A spawn that finds its pool empty copies its profile's template in its own
#: set-up (MountNamespacePool.copy_base); False: it builds its new root whole
#: (the A/B of bench/README.md, 2026-12-06).
SPAWN_COPIES = True


class Templates:
    """Per profile key, its template namespace, copied for each spawn.

    `here`: the copies are made by the calling thread (the pool maker, which
    has no other), not by a child (`childsetup.mount_namespace`); where that
    cannot be, by a child from then on."""

    def __init__(self, here: bool = False, max_age: float = TEMPLATE_AGE) -> None:
        self.here = here
        self.max_age = max_age
        #: key -> (the pooled steps it was made for, its fd, made at, the
        #: steps of a copy)
        self._made: dict[str, tuple[tuple[Mount, ...], int, float, list[Mount]]] = {}

    def make(self, key: str, mounts: Mounts) -> tuple[int, float]:
        """A namespace for one spawn of `key` with its pooled steps `mounts`
        made: (its fd, when the host trees it shows were taken). Raises as
        `childsetup.mount_namespace`."""
        held = self.current(key, mounts)
        if held is None:
            split = namespaces.template_split(mounts)
            if split is None:  # not of the template's shape: built whole
                return childsetup.mount_namespace(mounts), time.monotonic()
            template, copy = split
            made = time.monotonic()
            self.adopt(key, mounts, childsetup.mount_namespace(template), made, copy)
            held = self._made[key][1], copy
        base, copy = held
        try:
            fd = childsetup.mount_namespace(copy, base_fd=base, here=self.here)
        except childsetup.SetupError as error:
            if not self.here or error.args[0] != "mntns":
                raise
            self.here = False  # a thread of its own now, say: a child does it
            fd = childsetup.mount_namespace(copy, base_fd=base)
        return fd, self._made[key][2]

    def current(self, key: str, mounts: Mounts) -> tuple[int, list[Mount]] | None:
        """`key`'s template for `mounts`, if one is held and young enough:
        (its fd, the steps a copy of it takes). Nothing is made."""
        self.expire()
        held = self._made.get(key)
        if held is None or held[0] != tuple(mounts):  # no copy of a tuple's
            return None
        return held[1], held[3]

    def made_at(self, key: str) -> float | None:
        held = self._made.get(key)
        return held[2] if held is not None else None

    def adopt(
        self, key: str, mounts: Mounts, fd: int, made: float, copy: list[Mount] | None = None
    ) -> None:
        """Hold `fd`, a template of `key` for `mounts` made at `made` (by
        `make`, or sent by the pool maker), instead of an older one; closed
        if it is the older one, or `mounts` are not of the template's shape."""
        held = self._made.get(key)
        if copy is None:
            split = namespaces.template_split(mounts)
            copy = split[1] if split is not None else None
        if copy is None or (held is not None and held[0] == tuple(mounts) and held[2] >= made):
            os.close(fd)
            return
        self.drop(key)
        self._made[key] = (tuple(mounts), fd, made, copy)
        while len(self._made) > TEMPLATES:
            self.drop(min(self._made, key=lambda k: self._made[k][2]))

    def expire(self) -> None:
        oldest = time.monotonic() - self.max_age
        for key in [k for k, (_, _, made, _) in self._made.items() if made < oldest]:
            self.drop(key)

    def next_expiry(self) -> float | None:
        """Seconds until the oldest template is to be closed, if any is held."""
        if not self._made:
            return None
        made = min(held[2] for held in self._made.values())
        return max(0.0, made + self.max_age - time.monotonic())

    def drop(self, key: str) -> None:
        held = self._made.pop(key, None)
        if held is not None:
            os.close(held[1])

    def close(self) -> None:
        for key in list(self._made):
            self.drop(key)


class MountNamespacePool:
    """Up to `size` namespaces per profile key, each an fd of its nsfs file."""

    def __init__(self, size: int = 2, max_age: float = 30.0) -> None:
        self.size = size
        self.max_age = max_age
        #: The templates of the namespaces the spawner makes itself.
        self.templates = Templates()
        #: key -> (made at, fd), oldest first
        self._ready: dict[str, deque[tuple[float, int]]] = {}
        #: key -> why making one failed (that profile's spawns make their own)
        self.failed: dict[str, str] = {}
        #: key -> asked of the pool maker (spawner/maker.py), not come yet;
        #: and those asked before the key was dropped (closed when they come).
        self.pending: dict[str, int] = {}
        self._stale: dict[str, int] = {}

    def take(self, key: str) -> int:
        """A namespace for one spawn of `key` (the caller closes it), or -1."""
        self._expire()
        ready = self._ready.get(key)
        return ready.pop()[1] if ready else -1

    def wanted(self, profiles: dict[str, Mounts], empty_only: bool = False) -> str | None:
        """A profile key the pool should make a namespace for, if any (only
        one with none ready nor asked for, if `empty_only`)."""
        self._expire()
        for key, mounts in profiles.items():
            have = len(self._ready.get(key, ())) + self.pending.get(key, 0)
            if mounts and key not in self.failed and have < (1 if empty_only else self.size):
                return key
        return None

    def wanted_all(self, profiles: dict[str, Mounts], empty_only: bool = False) -> list[str]:
        """The profile keys to ask a namespace for now, one entry per
        namespace: each key's shortfall up to the pool's size (one for each
        key with none ready nor asked for, if `empty_only`)."""
        self._expire()
        keys: list[str] = []
        for key, mounts in profiles.items():
            if not mounts or key in self.failed:
                continue
            have = len(self._ready.get(key, ())) + self.pending.get(key, 0)
            keys += [key] * ((1 if have == 0 else 0) if empty_only else max(0, self.size - have))
        return keys

    def asked(self, key: str) -> None:
        self.pending[key] = self.pending.get(key, 0) + 1

    def made(
        self,
        key: str,
        fd: int,
        error: str = "",
        taken: float | None = None,
        template: int = -1,
        mounts: Mounts = (),
    ) -> None:
        """One the pool maker was asked for came (in the order asked): its
        fd, or why not; `taken`, when the host trees it shows were (its
        template's making, time.monotonic()), if not just now; `template`,
        the template it was copied from when the maker made a new one (for
        `mounts`, the profile's pooled steps): held for `copy_base`."""
        if self._stale.get(key, 0) > 0:  # asked for a registration since dropped
            self._stale[key] -= 1
            for stale in (fd, template):
                if stale >= 0:
                    os.close(stale)
            return
        if template >= 0:
            self.templates.adopt(
                key, mounts, template, time.monotonic() if taken is None else taken
            )
        self.pending[key] = max(0, self.pending.get(key, 0) - 1)
        if fd >= 0:
            now = time.monotonic()
            made = now if taken is None else min(taken, now)
            self._ready.setdefault(key, deque()).append((made, fd))
        elif error:
            self.failed[key] = error

    def copy_base(self, key: str, mounts: Mounts) -> tuple[int, list[Mount]] | None:
        """For a spawn of `key` that finds the pool empty: a template to copy
        in its own set-up (its fd, which stays the pool's, and the steps of
        the copy, to which the spawn adds its own), if a young one is held;
        None: it builds its namespace whole."""
        return self.templates.current(key, mounts) if SPAWN_COPIES else None

    def forget_pending(self) -> None:
        """The pool maker is gone: nothing asked of it will come."""
        self.pending.clear()
        self._stale.clear()

    def fill_one(self, key: str, mounts: Mounts) -> None:
        try:
            fd, made = self.templates.make(key, mounts)
        except (childsetup.SetupError, OSError, ValueError, TypeError) as error:
            self.failed[key] = str(error)
            return
        self._ready.setdefault(key, deque()).append((made, fd))

    def drop(self, key: str) -> None:
        for _, fd in self._ready.pop(key, ()):
            os.close(fd)
        self.templates.drop(key)
        self.failed.pop(key, None)
        asked = self.pending.pop(key, 0)
        if asked:
            self._stale[key] = self._stale.get(key, 0) + asked

    def _expire(self) -> None:
        oldest = time.monotonic() - self.max_age
        for key, ready in self._ready.items():
            if ready and min(made for made, _ in ready) < oldest:
                for made, fd in ready:
                    if made < oldest:
                        os.close(fd)
                self._ready[key] = deque(item for item in ready if item[0] >= oldest)
        self.templates.expire()

    def close(self) -> None:
        for key in list(self._ready):
            self.drop(key)
        self.templates.close()
