"""The file-API escape attempts run against the same endpoints as the
integration tests: the real daemon, and the in-process service."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "integration" / "fs"))

from fs_endpoint import endpoint, fs_daemon, stub

__all__ = ["endpoint", "fs_daemon", "stub"]
