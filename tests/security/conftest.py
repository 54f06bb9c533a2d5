"""Fixtures of the sandbox escape suite: one real daemon shared by the suite
(see escape_attempts.py for why its paths live outside /tmp) and a client per
tenant."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterator

import pytest
from escape_attempts import SecurityHost, security_host
from support.process import Client


@pytest.fixture(scope="session")
def host() -> Iterator[SecurityHost]:
    if os.geteuid() != 0:
        pytest.skip("the sandbox escape suite needs a root daemon")
    with security_host() as h:
        yield h


async def _client(host: SecurityHost, tenant: str) -> AsyncIterator[Client]:
    client = Client(host.socket(tenant))
    yield client
    await client.close()


@pytest.fixture
async def alpha(host: SecurityHost) -> AsyncIterator[Client]:
    """A tenant with the default, full profile."""
    async for client in _client(host, "alpha"):
        yield client


@pytest.fixture
async def beta(host: SecurityHost) -> AsyncIterator[Client]:
    """A second tenant with the full profile, running as the same uid as alpha."""
    async for client in _client(host, "beta"):
        yield client


@pytest.fixture
async def layers(host: SecurityHost) -> AsyncIterator[Client]:
    """A tenant without pid and net namespaces: the next layer must hold."""
    async for client in _client(host, "layers"):
        yield client
