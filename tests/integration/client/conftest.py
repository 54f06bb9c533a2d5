"""Fixtures of the client integration tests: a real hostcapd (`serve --dev`)
on a temporary state dir, and the real client connected to it."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import hostcap
import pytest
from client_daemon import Daemon, start_daemon, stop_daemon
from hostcap import BUILTIN_TOOLS, ToolRegistry


@pytest.fixture(scope="module")
def daemon() -> Iterator[Daemon]:
    started = start_daemon()
    try:
        yield started
    finally:
        stop_daemon(started)


@pytest.fixture
async def host(daemon: Daemon) -> AsyncIterator[hostcap.GrpcToolHost]:
    async with hostcap.connect(daemon.socket) as connected:
        yield connected


@pytest.fixture
async def registry(host: hostcap.GrpcToolHost) -> ToolRegistry:
    return hostcap.create_tool_registry(tools=BUILTIN_TOOLS, host=host)
