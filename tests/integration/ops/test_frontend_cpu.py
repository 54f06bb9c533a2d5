"""`daemon.frontend_cpu`: "core" (the default) keeps every thread of a
front-end process, gRPC's too, on the core the process started on; "any"
leaves them to the scheduler. A Run is served either way."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hostcapd.config import DaemonSettings
from hostcapd.frontend.affinity import core_of
from pydantic import ValidationError
from support.daemon import Daemon, daemon_config, frontend_pids, tenant_config
from support.process import Client, outcome

ALLOWED = os.sched_getaffinity(0)


def _threads(pid: int) -> dict[int, set[int]]:
    return {int(t): os.sched_getaffinity(int(t)) for t in os.listdir(f"/proc/{pid}/task")}


def test_the_default_is_core(tmp_path: Path) -> None:
    settings = DaemonSettings(state_dir=tmp_path, runtime_dir=tmp_path / "run")
    assert settings.frontend_cpu == "core"
    with pytest.raises(ValidationError):
        DaemonSettings(state_dir=tmp_path, runtime_dir=tmp_path / "run", frontend_cpu="numa")  # type: ignore[arg-type]


@pytest.mark.parametrize("mode", ["core", "any"])
async def test_a_front_end_runs_where_it_was_told(state_dir: Path, mode: str) -> None:
    config = daemon_config(state_dir, {"dev": tenant_config(state_dir, "dev")})
    config["daemon"]["frontend_cpu"] = mode
    daemon = Daemon(state_dir, config).start()
    try:
        client = Client(daemon.socket)
        try:
            result = await client.run("echo", "hello")
        finally:
            await client.close()
        assert outcome(result) == "EXITED", result
        frontends = frontend_pids(daemon)
        assert frontends, "no front-end process"
        for pid in frontends:
            threads = _threads(pid)
            assert len(threads) > 3, threads  # gRPC's threads are there too
            placements = set(map(frozenset, threads.values()))
            assert len(placements) == 1, threads  # every thread alike
            (cpus,) = placements
            if mode == "any" or len(ALLOWED) < 2:
                assert cpus == ALLOWED
            else:
                assert cpus < ALLOWED
                assert cpus == core_of(min(cpus)) & ALLOWED
    finally:
        assert daemon.stop() == 0
