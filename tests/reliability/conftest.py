"""Fixtures of the reliability suite: a real hostcapd with a private TMPDIR
(so its temp files are attributable), its cgroup subtrees, a client."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
from reliability_probes import daemon_env
from support.daemon import Daemon
from support.process import Client


@pytest.fixture
def start_reliable_daemon(
    start_daemon: Callable[..., Daemon], state_dir: Path
) -> Callable[..., Daemon]:
    """start_daemon with the reliability suite's environment (TMPDIR)."""

    def start(tenants: dict[str, dict[str, Any]] | None = None, **extra: Any) -> Daemon:
        return start_daemon(tenants=tenants, env=daemon_env(state_dir), **extra)

    return start


@pytest.fixture
def daemon(start_reliable_daemon: Callable[..., Daemon]) -> Daemon:
    return start_reliable_daemon()


@pytest.fixture
async def client(daemon: Daemon) -> AsyncIterator[Client]:
    c = Client(daemon.socket)
    yield c
    await c.close()
