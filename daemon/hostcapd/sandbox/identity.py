"""Identity: the run-as uid/gid the child switches to, and the loginuid that
ties its tree to that user in the kernel's audit. (The capability drop,
no_new_privs and oom_score_adj are per tenant: see `profile.TenantProfile`.)"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass


@dataclass(frozen=True)
class IdentityPlan:
    #: (uid, gid) to switch to (supplementary groups cleared), or None.
    ids: tuple[int, int] | None
    #: Written to /proc/self/loginuid so kernel audit ties the tree to the run-as user.
    loginuid: bytes | None


@functools.cache
def loginuid_supported() -> bool:
    """Whether the kernel keeps a loginuid (audit support, fixed at boot):
    looked up once, not per spawn."""
    return os.path.exists("/proc/self/loginuid")


def plan(uid: int, gid: int, applied: set[str]) -> IdentityPlan:
    drop = "uid_drop" in applied
    return IdentityPlan(
        ids=(uid, gid) if drop else None,
        loginuid=str(uid).encode() if drop and loginuid_supported() else None,
    )
