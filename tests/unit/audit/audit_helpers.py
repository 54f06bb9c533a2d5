"""Plain helpers of the audit tests (fixtures are in conftest.py)."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hostcapd.config import AuditSettings

#: The make_settings fixture: AuditSettings for a temp log, keywords override.
SettingsFactory = Callable[..., AuditSettings]


def exec_fields(spawn_id: str, **overrides: Any) -> dict[str, Any]:
    """The fields the daemon passes for a process.exec."""
    fields: dict[str, Any] = {
        "tenant": "dev",
        "spawn_id": spawn_id,
        "request_id": f"req-{spawn_id}",
        "labels": {"session": "s1", "tool_call_id": f"call-{spawn_id}"},
        "argv": ["git", "status", "--short"],
        "env_names": ["HOME", "LANG", "PATH"],
        "executable": {"path": "/usr/bin/git", "sha256": "ab" * 32, "device": 2049, "inode": 1234},
        "cwd": "/srv/work",
        "uid": 65534,
        "gid": 65534,
        "limits": {"wall_seconds": 60.0, "memory_bytes": 1 << 30, "pids": 64},
        "protections": [
            {"name": "landlock", "applied": True, "reason": "ABI 7"},
            {"name": "seccomp", "applied": True},
        ],
    }
    fields.update(overrides)
    return fields


def exit_fields(spawn_id: str, **overrides: Any) -> dict[str, Any]:
    """The fields the daemon passes for a process.exit."""
    fields: dict[str, Any] = {
        "tenant": "dev",
        "spawn_id": spawn_id,
        "request_id": f"req-{spawn_id}",
        "labels": {"session": "s1"},
        "outcome": "EXITED",
        "exit_code": 0,
        "message": "exited with status 0",
        "rusage": {"user_seconds": 0.01, "system_seconds": 0.002, "max_rss_bytes": 4 << 20},
        "duration_s": 0.05,
        "stdout": {"total": 10, "kept": 10, "dropped": 0},
        "stderr": {"total": 0, "kept": 0, "dropped": 0},
    }
    fields.update(overrides)
    return fields


def remount(target: Path, options: str) -> None:
    subprocess.run(["mount", "-o", f"remount,{options}", str(target)], check=True)
