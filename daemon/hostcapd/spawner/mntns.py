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
"""

from __future__ import annotations

import os
import time
from collections import deque
from collections.abc import Sequence

from hostcapd import childsetup
from hostcapd.childsetup import Mount

Mounts = Sequence[Mount]


class MountNamespacePool:
    """Up to `size` namespaces per profile key, each an fd of its nsfs file."""

    def __init__(self, size: int = 2, max_age: float = 30.0) -> None:
        self.size = size
        self.max_age = max_age
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

    def asked(self, key: str) -> None:
        self.pending[key] = self.pending.get(key, 0) + 1

    def made(self, key: str, fd: int, error: str = "") -> None:
        """One the pool maker was asked for came (in the order asked): its
        fd, or why not."""
        if self._stale.get(key, 0) > 0:  # asked for a registration since dropped
            self._stale[key] -= 1
            if fd >= 0:
                os.close(fd)
            return
        self.pending[key] = max(0, self.pending.get(key, 0) - 1)
        if fd >= 0:
            self._ready.setdefault(key, deque()).append((time.monotonic(), fd))
        elif error:
            self.failed[key] = error

    def forget_pending(self) -> None:
        """The pool maker is gone: nothing asked of it will come."""
        self.pending.clear()
        self._stale.clear()

    def fill_one(self, key: str, mounts: Mounts) -> None:
        try:
            fd = childsetup.mount_namespace(mounts)
        except (childsetup.SetupError, OSError, ValueError, TypeError) as error:
            self.failed[key] = str(error)
            return
        self._ready.setdefault(key, deque()).append((time.monotonic(), fd))

    def drop(self, key: str) -> None:
        for _, fd in self._ready.pop(key, ()):
            os.close(fd)
        self.failed.pop(key, None)
        asked = self.pending.pop(key, 0)
        if asked:
            self._stale[key] = self._stale.get(key, 0) + asked

    def _expire(self) -> None:
        oldest = time.monotonic() - self.max_age
        for ready in self._ready.values():
            while ready and ready[0][0] < oldest:
                os.close(ready.popleft()[1])

    def close(self) -> None:
        for key in list(self._ready):
            self.drop(key)
