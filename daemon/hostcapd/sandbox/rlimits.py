"""rlimits: the per-spawn resource limits the child sets before exec."""

from __future__ import annotations

import math
import resource

from hostcapd.childsetup import RLimit
from hostcapd.config import Limits


def plan(limits: Limits, memory_by_cgroup: bool, pids_by_cgroup: bool) -> list[RLimit]:
    """(resource, soft, hard) for the child. Memory and pids fall back to
    RLIMIT_AS / RLIMIT_NPROC only where cgroups do not enforce them (the
    address-space limit breaks runtimes that reserve large virtual ranges)."""
    out: list[RLimit] = [(resource.RLIMIT_CORE, 0, 0)]
    if limits.cpu_seconds is not None:
        soft = max(1, math.ceil(limits.cpu_seconds))
        # SIGXCPU at the soft limit, SIGKILL one second later.
        out.append((resource.RLIMIT_CPU, soft, soft + 1))
    if limits.memory_bytes is not None and not memory_by_cgroup:
        out.append((resource.RLIMIT_AS, limits.memory_bytes, limits.memory_bytes))
    if limits.pids is not None and not pids_by_cgroup:
        out.append((resource.RLIMIT_NPROC, limits.pids, limits.pids))
    if limits.file_size_bytes is not None:
        out.append((resource.RLIMIT_FSIZE, limits.file_size_bytes, limits.file_size_bytes))
    if limits.open_files is not None:
        out.append((resource.RLIMIT_NOFILE, limits.open_files, limits.open_files))
    return out
