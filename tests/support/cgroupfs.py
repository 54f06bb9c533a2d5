"""Finding a daemon's cgroups in the host's hierarchies from a test."""

from __future__ import annotations

import os
from pathlib import Path


def dirs_ending(root: Path, tail: str) -> list[Path]:
    """Every directory beneath `root` (a cgroup hierarchy) whose path ends
    with `tail` (a name, or names joined by "/"). Walked so that a cgroup
    removed meanwhile (a spawn's, a daemon's of another test, the host's
    own) is passed over: pathlib's glob raised FileNotFoundError for one
    that went between its listing and its descent."""
    suffix = "/" + tail.strip("/")
    found = []
    for top, dirs, _ in os.walk(root):  # (listing errors ignored: gone meanwhile)
        found += [Path(top, d) for d in dirs if f"{top}/{d}".endswith(suffix)]
    return found
