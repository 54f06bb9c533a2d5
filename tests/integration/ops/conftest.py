"""Fixtures of the ops tests: a notify socket standing in for systemd, and
clients of the tenant sockets."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from ops_support import NotifySocket, launch
from support.daemon import Daemon, daemon_config, tenant_config
from support.process import Client


@pytest.fixture
def notify(tmp_path: Path) -> Iterator[NotifySocket]:
    listener = NotifySocket(tmp_path / "notify.sock")
    try:
        yield listener
    finally:
        listener.close()


@pytest.fixture
async def client(daemon: Daemon) -> AsyncIterator[Client]:
    """A ProcessService client of the default daemon's first tenant."""
    c = Client(daemon.socket)
    yield c
    await c.close()


@pytest.fixture
def launch_daemon(state_dir: Path) -> Iterator[Callable[..., Daemon]]:
    """Like start_daemon, but returns as soon as the process is started."""
    launched: list[Daemon] = []

    def start(
        tenants: dict[str, dict[str, Any]] | None = None,
        env: dict[str, str] | None = None,
        **extra: Any,
    ) -> Daemon:
        config = daemon_config(
            state_dir,
            {
                name: tenant_config(state_dir, name, **over)
                for name, over in (tenants or {"dev": {}}).items()
            },
            **extra,
        )
        daemon = Daemon(state_dir, config, env=env or {})
        launched.append(daemon)
        return launch(daemon)

    yield start
    for daemon in launched:
        if daemon.proc is not None and daemon.proc.poll() is None:
            daemon.stop()
