"""Fixtures of the ops tests: a notify socket standing in for systemd, and
clients of the tenant sockets."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from ops_support import NotifySocket
from support.daemon import Daemon
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
