"""Tenant ceilings: derived ones fit the host's share, set ones are checked,
and a config whose tenants together could exhaust the host is refused."""

from __future__ import annotations

from pathlib import Path

import pytest
from hostcapd.config import Tenant, dev_config
from hostcapd.sandbox.tenant_ceilings import (
    FRONTEND_BASE_BYTES,
    FRONTEND_PIDS,
    MIN_TENANT_PIDS,
    HostTotals,
    frontend_memory,
    share_problems,
    tenant_ceilings,
)

GiB = 1 << 30
MiB = 1 << 20
#: This machine's figures, more or less: pid_max 32768, 24 GiB.
HOST = HostTotals(pid_max=32768, memory_bytes=24 * GiB)


def _tenants(tmp_path: Path, count: int, **fields: object) -> list[Tenant]:
    base = dev_config(tmp_path).tenants[0]
    return [
        base.model_copy(update={"name": f"t{i}", "socket": tmp_path / f"t{i}.sock", **fields})
        for i in range(count)
    ]


def test_the_example_configs_product_is_no_bound_but_the_derived_ceiling_is(
    tmp_path: Path,
) -> None:
    [tenant] = _tenants(tmp_path, 1)
    # Per spawn 1,024 tasks, 64 at once: twice this pid_max.
    assert 1024 * tenant.max_concurrent_spawns > HOST.pid_max
    ceilings = tenant_ceilings(tenant, [tenant], HOST)
    assert ceilings.pids + FRONTEND_PIDS <= HOST.pid_max // 2
    assert ceilings.total_memory <= HOST.memory_bytes // 2
    assert "derived" in ceilings.derived
    assert share_problems([tenant], HOST) == []


@pytest.mark.parametrize("count", [1, 2, 5, 8])
def test_derived_ceilings_of_any_number_of_tenants_fit_together(tmp_path: Path, count: int) -> None:
    tenants = _tenants(tmp_path, count)
    total = [tenant_ceilings(t, tenants, HOST) for t in tenants]
    assert sum(c.total_pids for c in total) <= HOST.pids_share
    assert sum(c.total_memory for c in total) <= HOST.memory_share
    assert share_problems(tenants, HOST) == []


def test_a_derived_ceiling_is_at_most_the_per_spawn_ceiling_times_the_concurrency(
    tmp_path: Path,
) -> None:
    [tenant] = _tenants(tmp_path, 1, max_concurrent_spawns=2)
    ceilings = tenant_ceilings(tenant, [tenant], HOST)
    assert ceilings.pids == 2 * 1024
    assert ceilings.memory_bytes == 2 * 4 * GiB


def test_set_ceilings_are_kept_and_checked(tmp_path: Path) -> None:
    tenants = _tenants(tmp_path, 2, tenant_pids=12_000, tenant_memory_bytes=GiB)
    ceilings = tenant_ceilings(tenants[0], tenants, HOST)
    assert (ceilings.pids, ceilings.memory_bytes, ceilings.derived) == (12_000, GiB, "")
    [problem] = share_problems(tenants, HOST)
    assert "pid_max (32768)" in problem and "24512 tasks" in problem


def test_memory_beyond_the_hosts_share_is_refused(tmp_path: Path) -> None:
    tenants = _tenants(tmp_path, 3, tenant_memory_bytes=5 * GiB)
    [problem] = share_problems(tenants, HOST)
    assert "memory" in problem and str(HOST.memory_bytes) in problem


def test_too_many_tenants_for_a_derived_ceiling_say_to_set_it(tmp_path: Path) -> None:
    small = HostTotals(pid_max=4096, memory_bytes=24 * GiB)
    problems = share_problems(_tenants(tmp_path, 8), small)
    assert any(f"below {MIN_TENANT_PIDS}" in p and "set it" in p for p in problems), problems
    # Twenty tenants whose front-ends may each hold 1.25 GiB do not fit in
    # half of 24 GiB at all.
    problems = share_problems(_tenants(tmp_path, 20), HOST)
    assert any("tenant_memory_bytes" in p and "set it" in p for p in problems), problems


def test_a_front_ends_memory_grows_with_the_output_ceiling(tmp_path: Path) -> None:
    [tenant] = _tenants(tmp_path, 1)
    output = int(tenant.limits.ceiling.output_bytes or 0)
    assert frontend_memory(tenant) == FRONTEND_BASE_BYTES + 4 * output
    assert frontend_memory(tenant) > 2 * 2 * output  # two replies of both streams


def test_the_config_refuses_a_zero_or_negative_ceiling(tmp_path: Path) -> None:
    with pytest.raises(ValueError):
        Tenant.model_validate({**_tenants(tmp_path, 1)[0].model_dump(), "tenant_pids": 0})
