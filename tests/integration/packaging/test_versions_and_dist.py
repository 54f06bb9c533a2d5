"""`--version` of both commands, and `make dist`: the three wheels, the
daemon's with its C extension and entry points, versions that agree."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest
from support.daemon import REPO

VERSION = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]


def run(*argv: str | Path, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(a) for a in argv], capture_output=True, text=True, timeout=timeout, cwd=REPO
    )


def test_hostcapd_version() -> None:
    done = run(sys.executable, "-m", "hostcapd", "--version")
    assert done.returncode == 0, done.stderr
    assert re.fullmatch(
        rf"hostcapd {re.escape(VERSION)} \(hostcap_proto \S+, grpcio \S+, python \S+\)\n",
        done.stdout,
    ), done.stdout


def test_hostcapctl_version() -> None:
    done = run(sys.executable, "-m", "hostcap.ctl.main", "--version")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("hostcapctl "), done.stdout
    assert VERSION in done.stdout


def test_every_package_declares_the_same_version() -> None:
    from hostcapd import __version__

    for pyproject in ("proto/pyproject.toml", "client/pyproject.toml"):
        assert tomllib.loads((REPO / pyproject).read_text())["project"]["version"] == VERSION
    assert __version__ == VERSION


@pytest.mark.packaging
@pytest.mark.timeout(600)
def test_make_dist_builds_the_three_wheels(tmp_path: Path) -> None:
    out = tmp_path / "dist"
    # -o: the virtualenv is taken as built (the test runs inside it).
    done = run("make", "-o", ".venv/.installed", "dist", f"DIST={out}", f"PY={sys.executable}")
    assert done.returncode == 0, done.stdout + done.stderr
    names = sorted(p.name for p in out.glob("*.whl"))
    assert [n.split("-")[0] for n in names] == ["hostcap", "hostcap_client", "hostcap_proto"]
    assert all(f"-{VERSION}-" in n for n in names), names
    daemon = next(out.glob("hostcap-*.whl"))
    with zipfile.ZipFile(daemon) as wheel:
        files = wheel.namelist()
        entry_points = wheel.read(
            next(n for n in files if n.endswith(".dist-info/entry_points.txt"))
        ).decode()
    assert any(re.fullmatch(r"hostcapd/_childsetup\..*\.so", n) for n in files), files
    assert "hostcapd = hostcapd.cli:main" in entry_points
    assert "hostcapctl = hostcap.ctl.main:main" in entry_points
