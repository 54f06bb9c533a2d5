"""The per-spawn values made once (process/order.py's rlimits plan,
process/limits.py's dump and its plainness): each must be what a fresh
computation gives, for every merged set of limits and way of limiting."""

from __future__ import annotations

import resource
from types import SimpleNamespace
from typing import Any

from hostcap_proto.audit import fast_encodable
from hostcapd.config import Limits, TenantLimits
from hostcapd.process import limits
from hostcapd.process.order import plan_rlimits
from hostcapd.sandbox import rlimits

MiB = 1 << 20
CEILING = Limits(
    cpu_seconds=600,
    memory_bytes=1 << 30,
    pids=64,
    output_bytes=64 * MiB,
    total_output_bytes=256 * MiB,
    file_size_bytes=1 << 30,
    open_files=4096,
    wall_seconds=600,
)
TENANT = TenantLimits(default=Limits(output_bytes=MiB, wall_seconds=120), ceiling=CEILING)


def profile(*applied: str) -> Any:
    names = set(applied)
    return SimpleNamespace(has=lambda name: name in names)


def test_plan_is_a_fresh_plan_for_each_set_of_limits_and_way_of_limiting() -> None:
    asked = [{}, {"memory_bytes": 256 * MiB, "pids": 8}, {"cpu_seconds": 2.5}, {"open_files": 9}]
    for _ in range(2):  # the second pass is served from what the first kept
        for request in asked:
            merged = limits.apply(dict(request), TENANT)
            prepared: Any = SimpleNamespace(limits=merged)
            for by_cgroup in (True, False):
                applied = ("rlimits", "cgroup") if by_cgroup else ("rlimits",)
                planned = plan_rlimits(profile(*applied), prepared)
                assert list(planned) == rlimits.plan(merged, by_cgroup, by_cgroup)
            assert plan_rlimits(profile("cgroup"), prepared) == ()


def test_memory_and_pids_fall_back_to_rlimits_only_without_cgroups() -> None:
    merged = limits.apply({"memory_bytes": 256 * MiB, "pids": 8}, TENANT)
    prepared: Any = SimpleNamespace(limits=merged)
    with_cgroup = {r[0] for r in plan_rlimits(profile("rlimits", "cgroup"), prepared)}
    without = {r[0] for r in plan_rlimits(profile("rlimits"), prepared)}
    assert resource.RLIMIT_AS not in with_cgroup and resource.RLIMIT_NPROC not in with_cgroup
    assert resource.RLIMIT_AS in without and resource.RLIMIT_NPROC in without


def test_the_dump_and_its_plainness_are_a_fresh_dumps() -> None:
    # 1e-05 s is a float the fast encoder does not write as repr() does.
    for request in ({}, {"cpu_seconds": 2.5}, {"wall_seconds": 1e-05}):
        merged = limits.apply(dict(request), TENANT)
        for _ in range(2):
            dump, plain = limits.dumped_plain(merged)
            assert dump == merged.model_dump(exclude_none=True)
            assert plain == fast_encodable(merged.model_dump(exclude_none=True))
            dump["pids"] = 1  # a copy: the kept dump is not changed
    assert limits.dumped_plain(limits.apply({"wall_seconds": 1e-05}, TENANT))[1] is False
    own = Limits(pids=3)  # not a merged set: dumped as it is
    assert limits.dumped_plain(own) == ({"pids": 3}, True)
