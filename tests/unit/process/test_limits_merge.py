"""Merged limits are built once per set of values (process/limits.py): the
cache must give what a fresh merge gives, and never skip a refusal."""

from __future__ import annotations

import pytest
from hostcapd.config import Limits, TenantLimits
from hostcapd.errors import Refusal
from hostcapd.process import limits

MiB = 1 << 20
#: Every limit needs a ceiling.
CEILING = {
    "cpu_seconds": 600,
    "memory_bytes": 1 << 30,
    "pids": 64,
    "output_bytes": 64 * MiB,
    "total_output_bytes": 256 * MiB,
    "file_size_bytes": 1 << 30,
    "open_files": 4096,
}


def tenant_limits(wall: int = 600) -> TenantLimits:
    return TenantLimits(
        default=Limits(output_bytes=MiB, wall_seconds=120),
        ceiling=Limits(**{**CEILING, "wall_seconds": wall}),
    )


def test_the_defaults_are_one_model_and_what_a_fresh_merge_gives() -> None:
    tenant = tenant_limits()
    first, again = limits.apply({}, tenant), limits.apply({}, tenant)
    assert first is again
    assert first == Limits(**{**CEILING, "output_bytes": MiB, "wall_seconds": 120})
    assert limits.dumped(first) == first.model_dump(exclude_none=True)
    # A fresh dict each time: a record that changes its copy changes no other.
    limits.dumped(first)["pids"] = 1
    assert limits.dumped(first)["pids"] == 64


def test_another_tenants_defaults_are_its_own() -> None:
    assert limits.apply({}, tenant_limits(wall=600)).wall_seconds == 120
    other = TenantLimits(ceiling=Limits(**{**CEILING, "wall_seconds": 30}))
    assert limits.apply({}, other).wall_seconds == 30


def test_asked_limits_are_what_a_fresh_merge_gives_and_still_refused_above_the_ceiling() -> None:
    tenant = tenant_limits()
    for asked in ({"wall_seconds": 5}, {"wall_seconds": 5.0}, {"pids": 7, "open_files": 9}):
        merged = limits.apply(asked, tenant)
        fresh = Limits(**{**CEILING, "output_bytes": MiB, "wall_seconds": 120, **asked})
        assert limits.dumped(merged) == fresh.model_dump(exclude_none=True)
        assert limits.apply(dict(asked), tenant) is merged
    for _ in range(2):  # the second time with the merge of the first kept
        with pytest.raises(Refusal, match="above the tenant's ceiling"):
            limits.apply({"wall_seconds": 601}, tenant)
        with pytest.raises(Refusal, match="must be positive"):
            limits.apply({"pids": 0}, tenant)


def test_a_model_not_merged_here_is_dumped_as_pydantic_does() -> None:
    own = Limits(pids=3)
    assert limits.dumped(own) == {"pids": 3}
