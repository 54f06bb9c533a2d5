"""cgroups: one cgroup per spawn under the daemon's own subtree.

Not implemented yet: CgroupHost.probe() reports cgroups unavailable.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class CgroupSupport:
    #: "v2", "v1" (hybrid host: memory/pids on v1), or "" when unusable.
    version: str
    controllers: tuple[str, ...]
    reason: str


@dataclass(frozen=True)
class CgroupStats:
    peak_memory_bytes: int | None
    oom_kills: int
    #: Forks the pids controller refused.
    pids_refused: int


class SpawnCgroup:
    def procs_fds(self) -> list[int]:
        raise NotImplementedError

    def kill(self) -> None:
        raise NotImplementedError

    def stats(self) -> CgroupStats:
        raise NotImplementedError

    def remove(self) -> None:
        raise NotImplementedError


class CgroupHost:
    def __init__(self, support: CgroupSupport) -> None:
        self.support = support

    @classmethod
    def probe(cls, parent: str = "") -> CgroupHost:
        return cls(CgroupSupport("", (), "not implemented yet in hostcapd"))

    def sweep_stale(self) -> int:
        return 0

    def create(self, name: str, memory_bytes: int | None, pids: int | None) -> SpawnCgroup:
        raise NotImplementedError("cgroups are not implemented yet")
