"""Fixtures of the sandbox mechanism tests."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest


def _open_fds() -> set[str]:
    return set(os.listdir("/proc/self/fd"))


@pytest.fixture
def no_fd_leak() -> Iterator[None]:
    """Fails the test if it leaves file descriptors open."""
    before = _open_fds()
    yield
    assert _open_fds() == before
