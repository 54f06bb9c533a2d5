"""The one way into the C set-up: a ChildPlan that names every field, run by
childsetup.spawn. A plan that leaves a protection out is refused before
anything is cloned, and a step's failure comes back as SetupError(step, errno)."""

from __future__ import annotations

import dataclasses
import errno
import os
from typing import Any

import psutil
import pytest
from hostcapd import childsetup
from hostcapd.childsetup import ChildPlan
from support.childplans import bare_plan


def _plan(**change: Any) -> ChildPlan:
    plan = bare_plan(
        exe_path=b"/bin/sh",
        argv=[b"sh", b"-c", b"exit 7"],
        umask=0o022,
        no_new_privs=True,
        pdeathsig=9,
    )
    return dataclasses.replace(plan, **change)


def test_a_plan_runs_through_the_c_set_up() -> None:
    pid, _ = childsetup.spawn(_plan())
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 7


def test_a_plan_that_leaves_a_field_out_is_refused() -> None:
    fields = dataclasses.asdict(_plan())
    del fields["seccomp_filter"]
    with pytest.raises(TypeError):
        ChildPlan(**fields)


def test_a_plan_is_not_changed_once_made() -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        _plan().no_new_privs = False  # type: ignore[misc]


def test_a_failing_step_is_named() -> None:
    with pytest.raises(childsetup.SetupError) as raised:
        childsetup.spawn(_plan(exe_path=b"/nonexistent-hostcap"))
    assert raised.value.args == ("exec", errno.ENOENT)


def test_a_namespace_step_without_its_namespace_is_refused_before_the_clone() -> None:
    with pytest.raises(ValueError, match="CLONE_NEWNET"):
        childsetup.spawn(_plan(loopback_up=True))


def test_a_terminal_without_a_mount_namespace_or_a_size_is_refused_before_the_clone() -> None:
    # Its devpts instance would be mounted in the host's namespace.
    before = psutil.Process().children()
    with pytest.raises(ValueError, match="CLONE_NEWNS or mntns_fd"):
        childsetup.spawn(_plan(tty_fd=0, tty_size=(24, 80)))
    with pytest.raises(ValueError, match="needs its size"):
        childsetup.spawn(_plan(tty_fd=0, tty_size=(0, 80), clone_flags=0x00020000))
    assert psutil.Process().children() == before


MOUNT = (6, None, b"/tmp", None, 0, None, 0)


@pytest.mark.parametrize(
    ("change", "error", "message"),
    [
        ({"mounts": [MOUNT] * 65, "clone_flags": 0x00020000}, ValueError, "too many mounts"),
        ({"rlimits": [(4, 0, 0)] * 17}, ValueError, "too many rlimits"),
        ({"cgroup_fds": [0] * 9}, ValueError, "too many cgroup fds"),
        ({"landlock_rules": [(b"/", 1)] * 13}, ValueError, "too many landlock rules"),
        ({"roots": [b"/tmp"] * 9}, ValueError, "too many roots"),
        ({"rlimits": [(4, 0)]}, TypeError, "rlimit must be"),
        ({"mounts": [(99, None, None, None, 0, None, 0)]}, ValueError, "unknown mount kind"),
        ({"landlock_rules": [(None, 1)]}, ValueError, "landlock rule path must be bytes"),
        ({"roots": [None]}, TypeError, "roots must be bytes"),
        ({"cgroup_fds": ["0"]}, TypeError, "integer"),
        ({"argv": [b"sh", "-c"]}, TypeError, "argv items must be bytes"),
        ({"envp": [b"A=\0B"]}, ValueError, "envp item contains a NUL byte"),
    ],
    ids=[
        "mounts",
        "rlimits",
        "cgroup_fds",
        "landlock_rules",
        "roots",
        "rlimit_shape",
        "mount_kind",
        "landlock_path",
        "root_none",
        "cgroup_fd_type",
        "argv_str",
        "envp_nul",
    ],
)
def test_a_plan_that_does_not_fit_the_c_plan_is_refused_before_the_clone(
    change: dict[str, Any], error: type[Exception], message: str
) -> None:
    # One conversion (each_item in childsetup_c/args.c) bounds and types
    # every sequence; a plan it refuses clones nothing.
    before = psutil.Process().children()
    with pytest.raises(error, match=message):
        childsetup.spawn(_plan(**change))
    assert psutil.Process().children() == before


@pytest.mark.parametrize("n", [4, 7])
def test_a_go_with_the_wrong_number_of_fds_is_refused(n: int) -> None:
    with pytest.raises(ValueError, match="5 or 6 fds"):
        childsetup.go(0, b"", [0] * n)
