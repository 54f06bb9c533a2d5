"""Run a host command as another uid from a test process.

`subprocess` with `user=`/`group=` cannot use vfork, so it forks the whole
test process, and a fork beside gRPC's threads can crash the child before it
execs (seen in CI: SIGSEGV, after gRPC's "skipping fork() handlers"). The
identity is dropped by `setpriv` after a plain vfork+exec instead."""

from __future__ import annotations

from collections.abc import Sequence


def as_user(uid: int, gid: int, argv: Sequence[str]) -> list[str]:
    """argv, run as uid:gid with no supplementary groups."""
    return ["setpriv", f"--reuid={uid}", f"--regid={gid}", "--clear-groups", "--", *argv]
