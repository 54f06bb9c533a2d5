"""Which spawn an event's pid belongs to, when the proc connector's table
does not say (decision 0030): the spawns that asked for their changes
(claims) and the cgroup fallback, which only works while the process lives.
An event no spawn can be named for is counted, never guessed."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass


@dataclass
class Claim:
    """A spawn whose changes are wanted, and the watcher's counters when it began."""

    cgroup_name: str
    unattributed_mark: int
    overflow_mark: int
    lost_mark: int


def cgroup_of(pid: int) -> str | None:
    """/proc/<pid>/cgroup, or None when the process is gone."""
    try:
        with open(f"/proc/{pid}/cgroup", encoding="utf-8", errors="replace") as f:
            return f.read()
    except OSError:
        return None


def claimant(groups: str, claims: Iterable[tuple[int, Claim]]) -> int | None:
    """The root pid of the claimed spawn whose cgroup `groups` (a
    /proc/<pid>/cgroup) names; None: a living process of no spawn (the fs
    worker, an administrator)."""
    for root_pid, claim in claims:
        if claim.cgroup_name and (
            f"/{claim.cgroup_name}\n" in groups or f"/{claim.cgroup_name}/" in groups
        ):
            return root_pid
    return None
