"""`--version` of both commands, and `make dist`: the three wheels, the
daemon's with its C extension and entry points, versions that agree. The
version comes from git (setuptools-scm), so it is read from the installed
distribution and from setuptools-scm itself, never written down here."""

from __future__ import annotations

import importlib
import re
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest
from hostcap_proto import build
from support.daemon import REPO


def installed_version() -> str:
    """What the last build or install wrote (both commands report it), read
    now: a wheel build in this run (make dist) writes it again, with the
    commit checked out now. Not importlib.metadata, which prefers a stale
    hostcap.egg-info in the working directory to the installed distribution."""
    try:
        from hostcap_proto import _version
    except ImportError:
        return build.VERSION
    return str(importlib.reload(_version).version)


COMMIT = re.compile(r"[0-9a-f]{7,40}")


def run(*argv: str | Path, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(a) for a in argv], capture_output=True, text=True, timeout=timeout, cwd=REPO
    )


def test_hostcapd_version() -> None:
    done = run(sys.executable, "-m", "hostcapd", "--version")
    assert done.returncode == 0, done.stderr
    assert re.fullmatch(
        rf"hostcapd {re.escape(installed_version())} \(commit (\S+), hostcap_proto \S+, grpcio \S+, "
        r"python \S+\)\n",
        done.stdout,
    ), done.stdout
    assert_a_commit_of_this_repository(done.stdout.split("commit ", 1)[1].split(",")[0])


def test_hostcapctl_version() -> None:
    done = run(sys.executable, "-m", "hostcap.ctl.main", "--version")
    assert done.returncode == 0, done.stderr
    found = re.fullmatch(r"hostcapctl (\S+) \(commit (\S+), hostcap\)\n", done.stdout)
    assert found, done.stdout
    assert found.group(1) == installed_version()
    assert_a_commit_of_this_repository(found.group(2))


def assert_a_commit_of_this_repository(commit: str) -> None:
    assert COMMIT.fullmatch(commit), commit
    known = run("git", "cat-file", "-t", commit)
    assert known.stdout.strip() == "commit", (commit, known.stderr)


def test_every_package_takes_its_version_from_git() -> None:
    from hostcapd import __version__

    for pyproject in ("pyproject.toml", "proto/pyproject.toml", "client/pyproject.toml"):
        project = tomllib.loads((REPO / pyproject).read_text())
        assert "version" not in project["project"], pyproject
        assert project["project"]["dynamic"] == ["version"], pyproject
        requires = project["build-system"]["requires"]
        assert any(r.startswith("setuptools-scm==") for r in requires), pyproject
        # proto/ and client/ are versioned by the checkout they are in.
        assert project["tool"]["setuptools_scm"].get("root", ".") in (".", ".."), pyproject
    assert __version__ == build.VERSION


def test_the_version_is_the_one_git_describes() -> None:
    # setuptools-scm on the checkout now: the installed version is what the
    # last install computed, so only its release part must agree (a commit
    # since then moves the dev part on).
    done = run(sys.executable, "-m", "setuptools_scm")
    assert done.returncode == 0, done.stderr
    now = done.stdout.strip().splitlines()[-1]
    release = re.compile(r"\d+\.\d+")
    version = installed_version()
    assert release.match(now) and release.match(version), (now, version)
    assert release.match(now).group() == release.match(version).group()  # type: ignore[union-attr]


@pytest.mark.packaging
@pytest.mark.timeout(600)
def test_make_dist_builds_the_three_wheels(tmp_path: Path) -> None:
    out = tmp_path / "dist"
    # -o: the virtualenv is taken as built (the test runs inside it).
    done = run("make", "-o", ".venv/.installed", "dist", f"DIST={out}", f"PY={sys.executable}")
    assert done.returncode == 0, done.stdout + done.stderr
    names = sorted(p.name for p in out.glob("*.whl"))
    assert [n.split("-")[0] for n in names] == ["hostcap", "hostcap_client", "hostcap_proto"]
    # One version for the three, the one setuptools-scm gives this checkout.
    scm = run(sys.executable, "-m", "setuptools_scm").stdout.strip().splitlines()[-1]
    assert all(f"-{scm}-" in n for n in names), (names, scm)
    daemon = next(out.glob("hostcap-*.whl"))
    with zipfile.ZipFile(daemon) as wheel:
        files = wheel.namelist()
        entry_points = wheel.read(
            next(n for n in files if n.endswith(".dist-info/entry_points.txt"))
        ).decode()
    assert any(re.fullmatch(r"hostcapd/_childsetup\..*\.so", n) for n in files), files
    assert "hostcapd = hostcapd.cli:main" in entry_points
    assert "hostcapctl = hostcap.ctl.main:main" in entry_points
