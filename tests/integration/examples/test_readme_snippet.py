"""The README's client snippet runs as written (issue 34, item 6), against a
real hostcapd whose socket is where the snippet looks for it."""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from support.daemon import REPO, Daemon


def readme_snippet() -> str:
    text = (REPO / "README.md").read_text()
    after = text.split("An engine uses the client library:", 1)[1]
    match = re.search(r"```python\n(.*?)```", after, re.S)
    assert match is not None, "the README has no client snippet"
    return match.group(1)


def test_the_readme_snippet_runs_as_written(
    start_daemon: Callable[..., Daemon], tmp_path: Path
) -> None:
    daemon = start_daemon()
    # The snippet connects to .hostcap/run/dev.sock: run it where that is this daemon's socket.
    (tmp_path / ".hostcap" / "run").mkdir(parents=True)
    (tmp_path / ".hostcap" / "run" / "dev.sock").symlink_to(daemon.socket)
    script = tmp_path / "snippet.py"
    script.write_text(readme_snippet())
    done = subprocess.run(
        [sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=100
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert (daemon.root() / "hello.txt").read_text() == "hi\n"
    assert "hello.txt" in done.stdout
    assert "tool_denied" in done.stdout and "path_escapes_root" in done.stdout
