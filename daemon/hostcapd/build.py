"""What build of hostcapd runs: its version (the installed distribution's
metadata, so it follows however the build derives it) and the commit it
was built from, for `hostcapd_build_info`."""

from __future__ import annotations

import re
import shutil
import subprocess
from importlib import metadata
from pathlib import Path

from hostcapd import __version__

DISTRIBUTION = "hostcap"
#: setuptools-scm's local version part: `+g<hash>` (and `.dYYYYMMDD` when dirty).
_SCM_COMMIT = re.compile(r"\+g([0-9a-f]{7,40})\b")


def version() -> str:
    try:
        return metadata.version(DISTRIBUTION)
    except metadata.PackageNotFoundError:
        return __version__


def commit(installed_version: str | None = None) -> str:
    """The commit: from the version a build between tags carries
    (`0.2.1.dev3+g1a2b3c4`), else from git when this source is a checkout,
    else "unknown"."""
    found = _SCM_COMMIT.search(installed_version or version())
    if found:
        return found.group(1)
    git = shutil.which("git")
    if git is None:
        return "unknown"
    try:
        done = subprocess.run(
            # No hook, no fsmonitor: root runs nothing a checkout's config names.
            [
                git,
                "-c",
                "core.fsmonitor=false",
                "-C",
                str(Path(__file__).resolve().parent),
                "rev-parse",
                "--short=12",
                "HEAD",
            ],
            capture_output=True,
            text=True,
            timeout=5,
            check=False,
            env={"GIT_CONFIG_NOSYSTEM": "1", "PATH": "/usr/bin:/bin", "LC_ALL": "C"},
        )
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    value = done.stdout.strip()
    return value if done.returncode == 0 and re.fullmatch(r"[0-9a-f]{7,40}", value) else "unknown"
