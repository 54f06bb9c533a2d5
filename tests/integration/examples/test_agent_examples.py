"""docs/examples/openai_agent.py and anthropic_agent.py, run as a user would
(no API key: the recorded responses, played to the real SDK client) against
a real hostcapd."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from support.daemon import REPO, Daemon

EXAMPLES = REPO / "docs" / "examples"


def run_example(name: str, daemon: Daemon) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY")}
    return subprocess.run(
        [sys.executable, str(EXAMPLES / name), "--socket", str(daemon.socket), "--yes"],
        cwd=REPO, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=100,
    )  # fmt: skip


@pytest.fixture
def example_daemon(start_daemon: Callable[..., Daemon]) -> Daemon:
    return start_daemon()


def test_openai_agent_on_the_recorded_path(example_daemon: Daemon) -> None:
    done = run_example("openai_agent.py", example_daemon)
    out = done.stdout
    assert done.returncode == 0, done.stdout + done.stderr
    assert "playing openai_agent.json" in out
    assert (example_daemon.root() / "hello.txt").read_text() == "hello from an OpenAI agent\n"
    assert "the sandbox runs this" in out
    assert "not valid JSON" in out  # the malformed call, fed back
    assert "path_escapes_root" in out and "command_not_allowed" in out
    assert "hostcap-spill:" in out  # seq 20000, bounded and spilled
    assert "5 requests sent to the recorded API" in out


def test_anthropic_agent_on_the_recorded_path(example_daemon: Daemon) -> None:
    done = run_example("anthropic_agent.py", example_daemon)
    out = done.stdout
    assert done.returncode == 0, done.stdout + done.stderr
    assert "playing anthropic_agent.json" in out
    assert (example_daemon.root() / "claude.txt").read_text() == "hello from a Claude agent\n"
    assert "hostcap-spill:" in out
    assert "content: Field required" in out  # the missing argument, fed back
    assert "command_not_allowed" in out
    assert "4 requests sent to the recorded API" in out


def test_an_example_without_a_daemon_says_how_to_start_one(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(EXAMPLES / "openai_agent.py"), "--socket", str(tmp_path / "none.sock")],
        cwd=REPO, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 2 and "make run" in done.stderr
