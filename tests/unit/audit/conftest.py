"""Shared helpers of the audit tests: settings in a temp dir, event fields, tmpfs."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from audit_helpers import SettingsFactory
from hostcapd.config import AuditSettings


@pytest.fixture
def make_settings(tmp_path: Path) -> SettingsFactory:
    """AuditSettings for a log under tmp_path; keyword arguments override."""

    def make(**overrides: Any) -> AuditSettings:
        values: dict[str, Any] = {
            "path": tmp_path / "log" / "audit.jsonl",
            "group": None,
            "journal": "off",
        }
        values.update(overrides)
        return AuditSettings(**values)

    return make


@pytest.fixture
def tmpfs(tmp_path: Path) -> Iterator[Callable[[str], Path]]:
    """Mount a small tmpfs (root only): tmpfs("size=64k") -> its directory.
    Unmounted after the test."""
    mounted: list[Path] = []

    def mount(options: str) -> Path:
        if os.geteuid() != 0:
            pytest.skip("mounting a tmpfs needs root")
        target = tmp_path / f"tmpfs{len(mounted)}"
        target.mkdir()
        result = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(target)],
            capture_output=True,
            text=True,
        )
        if result.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs here: {result.stderr.strip()}")
        mounted.append(target)
        return target

    yield mount
    for target in reversed(mounted):
        subprocess.run(["umount", "-l", str(target)], check=False)
