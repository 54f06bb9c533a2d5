"""The one way into the C set-up: a ChildPlan that names every field, run by
childsetup.spawn. A plan that leaves a protection out is refused before
anything is cloned, and a step's failure comes back as SetupError(step, errno)."""

from __future__ import annotations

import dataclasses
import errno
import os
from typing import Any

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
