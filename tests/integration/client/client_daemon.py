"""Helpers of the client integration tests: a real hostcapd (`serve --dev`)
on a temporary state dir, read through its audit log."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import hostcap
import pytest
from hostcap import BUILTIN_TOOLS, DispatchContext, ToolPolicy
from hostcap.errors import HostError

#: Generous correctness deadline for the daemon to start serving.
START_DEADLINE_S = 60.0


@dataclass
class Daemon:
    """A running `hostcapd serve --dev`."""

    process: subprocess.Popen[bytes]
    state: Path
    log_path: Path

    @property
    def socket(self) -> Path:
        return self.state / "run" / "dev.sock"

    @property
    def audit_path(self) -> Path:
        return self.state / "log" / "audit.jsonl"

    @property
    def workspace(self) -> Path:
        return self.state / "workspace"

    def audit(self) -> list[dict[str, Any]]:
        """Every audit record written so far."""
        if not self.audit_path.exists():
            return []
        with self.audit_path.open() as log:
            return [json.loads(line) for line in log if line.strip()]

    def records_for(self, tool_call_id: str, event: str | None = None) -> list[dict[str, Any]]:
        return [
            r
            for r in self.audit()
            if (r.get("labels") or {}).get("tool_call_id") == tool_call_id
            and (event is None or r["event"] == event)
        ]


def start_daemon() -> Daemon:
    state = Path(tempfile.mkdtemp(prefix="hostcap-client-it-"))
    state.chmod(0o711)
    log_path = state / "daemon.log"
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "hostcapd", "serve", "--dev", "--state-dir", str(state)],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    daemon = Daemon(process, state, log_path)
    deadline = time.monotonic() + START_DEADLINE_S
    while not daemon.socket.exists():
        if process.poll() is not None or time.monotonic() > deadline:
            stop_daemon(daemon)
            pytest.fail(
                f"hostcapd did not start serving:\n{log_path.read_text(errors='replace')[-4000:]}"
            )
        time.sleep(0.05)
    return daemon


def stop_daemon(daemon: Daemon) -> None:
    if daemon.process.poll() is None:
        daemon.process.send_signal(signal.SIGTERM)
        try:
            daemon.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            daemon.process.kill()
            daemon.process.wait()
    shutil.rmtree(daemon.state, ignore_errors=True)


def make_ctx(**overrides: Any) -> DispatchContext:
    """A context granting every builtin, allowing a few commands."""
    fields: dict[str, Any] = {
        "node_id": "it-node",
        "granted_tool_ids": {tool.id for tool in BUILTIN_TOOLS},
        "config": {},
        "tool_policy": ToolPolicy(
            allowed_commands={"echo", "sleep", "sh", "seq", "cat", "nonexistent-tool-xyz"}
        ),
        "fs_scope": "workspace-write",
        "gate_approved": False,
        "session_id": f"it-session-{os.getpid()}",
    }
    fields.update(overrides)
    return DispatchContext(**fields)


async def require_fs(host: hostcap.GrpcToolHost) -> None:
    """Skip while the daemon's FsService is not served yet (UNIMPLEMENTED)."""
    try:
        await host.fs.stat(".")
    except HostError as error:
        if error.reason == "UNIMPLEMENTED":
            pytest.skip("hostcapd does not serve FsService yet (UNIMPLEMENTED)")
        raise
