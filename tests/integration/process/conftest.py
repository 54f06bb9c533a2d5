"""Fixtures for ProcessService tests."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from support.process import Client


@pytest.fixture
async def client(daemon: Any) -> AsyncIterator[Client]:
    c = Client(daemon.socket)
    yield c
    await c.close()
