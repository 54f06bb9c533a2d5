"""A child set-up plan with every step off, for tests that drive the C set-up
directly: each names only the fields it is about. (The daemon builds every
field itself; `ChildPlan` has no defaults so that it cannot forget one.)"""

from __future__ import annotations

from typing import Any

from hostcapd.childsetup import ChildPlan

#: No namespaces, mounts, limits, identity change, landlock or seccomp; the
#: caller's stdio; nothing waited for.
BARE: dict[str, Any] = dict(
    exe_fd=-1, exe_path=None, argv=[], envp=[b"PATH=/usr/bin:/bin"], stdio=(0, 1, 2),
    cwd_root=None, cwd=None, umask=-1, clone_flags=0, mounts=[], hostname=None,
    loopback_up=False, cgroup_fds=[], rlimits=[], oom_score_adj=None, loginuid=None,
    drop_caps=False, ids=None, no_new_privs=False, landlock_fd=-1, landlock_rules=[],
    seccomp_filter=b"", pdeathsig=0, cancel_fd=-1, life_fd=-1,
)  # fmt: skip


def bare_plan(**fields: Any) -> ChildPlan:
    """A ChildPlan with every step off but `fields`."""
    return ChildPlan(**{**BARE, **fields})
