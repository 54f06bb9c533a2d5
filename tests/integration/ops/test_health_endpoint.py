"""GET /healthz on the metrics socket: the container probes' liveness check
(deploy/kubernetes, deploy/nomad), read with curl exactly as the probes do,
answered by a live daemon and by nothing once it is gone."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
from ops_support import wait_admin
from support.daemon import Daemon

pytestmark = pytest.mark.skipif(shutil.which("curl") is None, reason="the probes use curl")


def probe(socket: Path, path: str = "/healthz") -> subprocess.CompletedProcess[str]:
    # The DaemonSet's startupProbe / livenessProbe command, with this socket.
    argv = [
        "curl",
        "-fsS",
        "--max-time",
        "4",
        "--unix-socket",
        str(socket),
        f"http://hostcapd{path}",
    ]
    return subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False)


def test_the_probe_passes_against_a_serving_daemon_and_fails_once_it_stops(
    start_daemon: Callable[..., Daemon], state_dir: Path
) -> None:
    socket = state_dir / "run" / "metrics.sock"
    daemon = wait_admin(start_daemon(metrics={"socket": str(socket)}))
    done = probe(socket)
    assert done.returncode == 0 and done.stdout == "ok\n", done
    # Only that path and /metrics: anything else is a 404, which fails curl -f.
    assert probe(socket, "/nothing").returncode != 0
    # A daemon whose event loop does not run (stopped here) fails the probe:
    # the answer comes from the loop, not from a socket merely being there.
    os.kill(daemon.pid, signal.SIGSTOP)
    try:
        assert probe(socket).returncode != 0
    finally:
        os.kill(daemon.pid, signal.SIGCONT)
    assert probe(socket).returncode == 0
    daemon.stop()
    assert probe(socket).returncode != 0
