"""Identity: the run-as uid/gid, capabilities, no_new_privs, loginuid and
oom_score_adj of the child."""

from __future__ import annotations

import os
from dataclasses import dataclass


@dataclass(frozen=True)
class IdentityPlan:
    #: (uid, gid) to switch to (supplementary groups cleared), or None.
    ids: tuple[int, int] | None
    drop_caps: bool
    no_new_privs: bool
    #: Written to /proc/self/loginuid so kernel audit ties the tree to the run-as user.
    loginuid: bytes | None
    oom_score_adj: bytes | None


def loginuid_supported() -> bool:
    return os.path.exists("/proc/self/loginuid")


def plan(uid: int, gid: int, applied: set[str], oom_score_adj: int) -> IdentityPlan:
    drop = "uid_drop" in applied
    return IdentityPlan(
        ids=(uid, gid) if drop else None,
        drop_caps=drop,
        no_new_privs="no_new_privs" in applied,
        loginuid=str(uid).encode() if drop and loginuid_supported() else None,
        oom_score_adj=str(oom_score_adj).encode() if os.getuid() == 0 else None,
    )
