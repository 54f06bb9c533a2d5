"""Shared fixtures: a real hostcapd on temporary sockets."""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from support.daemon import Daemon, daemon_config, tenant_config

#: Where each session's base temporary directory is made (see pytest_configure).
SESSIONS = Path(tempfile.gettempdir()) / "hostcap-tests"
#: Ended sessions' directories kept for a look after a failure, newest first.
KEEP_ENDED = 3


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    """Each session gets a base temporary directory of its own, traversable
    by the run-as identities (state_dir below). pytest's shared
    /tmp/pytest-of-<user> will not do: every session that starts makes it
    0700 again, which took the search permission from another session's
    running daemons (an fs worker or a `nobody` client refused mid-test
    while two sessions ran on one machine). Earlier sessions' directories are
    removed once their pytest is gone, but for the newest few."""
    if config.option.basetemp is not None:
        return
    SESSIONS.mkdir(mode=0o711, exist_ok=True)
    SESSIONS.chmod(0o711)
    ended = []
    for entry in SESSIONS.iterdir():
        pid = entry.name.split("-", 1)[0]
        if pid.isdigit() and not Path(f"/proc/{pid}").exists():
            ended.append(entry)
    ended.sort(key=lambda e: e.stat().st_mtime, reverse=True)
    for entry in ended[KEEP_ENDED:]:
        with contextlib.suppress(OSError):
            shutil.rmtree(entry)
    base = SESSIONS / f"{os.getpid()}-{time.strftime('%Y%m%dT%H%M%S')}"
    config.option.basetemp = str(base)


@pytest.fixture
def state_dir(tmp_path: Path) -> Path:
    state = tmp_path / "state"
    state.mkdir()
    # The run-as identity (the fs worker runs as it on the host) must be able
    # to reach the roots: make pytest's private temp dirs traversable.
    for p in (state, *state.parents):
        if p == Path(tempfile.gettempdir()) or p == Path("/"):
            break
        p.chmod(p.stat().st_mode | 0o711)
    return state


@pytest.fixture
def start_daemon(state_dir: Path) -> Iterator[Callable[..., Daemon]]:
    """Start a daemon: start_daemon(tenants={name: overrides}, **daemon_config_extra)."""
    started: list[Daemon] = []

    def start(
        tenants: dict[str, dict[str, Any]] | None = None,
        env: dict[str, str] | None = None,
        **extra: Any,
    ) -> Daemon:
        tenants = tenants or {"dev": {}}
        config = daemon_config(
            state_dir,
            {name: tenant_config(state_dir, name, **over) for name, over in tenants.items()},
            **extra,
        )
        daemon = Daemon(state_dir, config, env=env or {})
        started.append(daemon)
        return daemon.start()

    yield start
    for daemon in started:
        if daemon.proc is not None and daemon.proc.poll() is None:
            daemon.stop()


@pytest.fixture
def daemon(start_daemon: Callable[..., Daemon]) -> Daemon:
    return start_daemon()


@pytest.fixture
def marker() -> str:
    """A unique string to put in a sandboxed program's argv, to find survivors."""
    return f"hostcap-test-{uuid.uuid4().hex[:12]}"
