"""`daemon.event_loop`: asyncio by default, uvloop on request, and a uvloop
that cannot be imported is a start-up error, not a silent fall-back."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import uvloop
from hostcapd.cli import event_loop_factory
from hostcapd.config import ConfigError, DaemonSettings
from pydantic import ValidationError
from support.daemon import Daemon, daemon_config, frontend_pids, tenant_config
from support.process import Client, outcome


def test_the_default_loop_is_asyncio(tmp_path: Path) -> None:
    settings = DaemonSettings(state_dir=tmp_path, runtime_dir=tmp_path / "run")
    assert settings.event_loop == "asyncio"
    assert event_loop_factory("asyncio") is None


def test_uvloop_factory_makes_a_uvloop_loop() -> None:
    factory = event_loop_factory("uvloop")
    assert factory is not None
    loop = factory()
    try:
        assert isinstance(loop, uvloop.Loop)
    finally:
        loop.close()


def test_an_unknown_loop_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValidationError):
        DaemonSettings(state_dir=tmp_path, runtime_dir=tmp_path / "run", event_loop="trio")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="unknown loop 'trio'"):
        event_loop_factory("trio")


def test_uvloop_asked_but_not_importable_fails_closed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "uvloop", None)  # import uvloop raises ImportError
    with pytest.raises(ConfigError, match='event_loop = "uvloop" but uvloop is not importable'):
        event_loop_factory("uvloop")


async def _serves_a_run(daemon: Daemon) -> None:
    client = Client(daemon.socket)
    try:
        result = await client.run("echo", "hello")
    finally:
        await client.close()
    assert outcome(result) == "EXITED", result
    assert result.stdout == b"hello\n"


@pytest.mark.parametrize("loop", ["asyncio", "uvloop"])
async def test_the_daemon_serves_a_run_on_the_configured_loop(state_dir: Path, loop: str) -> None:
    config = daemon_config(state_dir, {"dev": tenant_config(state_dir, "dev")})
    config["daemon"]["event_loop"] = loop
    daemon = Daemon(state_dir, config).start()
    try:
        await _serves_a_run(daemon)
    finally:
        assert daemon.stop() == 0
    assert f"event loop: {loop}" in daemon.output()


def test_the_front_ends_default_loop_is_uvloop(tmp_path: Path) -> None:
    settings = DaemonSettings(state_dir=tmp_path, runtime_dir=tmp_path / "run")
    assert settings.frontend_event_loop == "uvloop"


@pytest.mark.parametrize("loop", ["asyncio", "uvloop"])
async def test_a_front_end_serves_on_its_configured_loop(state_dir: Path, loop: str) -> None:
    """The tenant's front-end process runs the loop it was given: uvloop's
    extension is mapped in it, or not; and a Run is served either way."""
    config = daemon_config(state_dir, {"dev": tenant_config(state_dir, "dev")})
    config["daemon"]["frontend_event_loop"] = loop
    daemon = Daemon(state_dir, config).start()
    try:
        await _serves_a_run(daemon)
        frontends = frontend_pids(daemon)
        assert frontends, "no front-end process"
        for pid in frontends:
            mapped = "/uvloop/loop." in Path(f"/proc/{pid}/maps").read_text()
            assert mapped == (loop == "uvloop"), (pid, loop)
    finally:
        assert daemon.stop() == 0
