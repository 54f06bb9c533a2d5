"""The client installs on its own: its wheel and the wire package's, built
from client/ and proto/, installed with the adapters extra into a fresh
virtualenv that has no C compiler step, no libcap and no python-prctl.

Slow (a fresh virtualenv and a resolver run, about a minute) and it lets
pip reach the package registry for the dependencies, so it carries its own
generous timeout and retries the install once.
"""

from __future__ import annotations

import re
import subprocess
import sys
import venv
import zipfile
from pathlib import Path

import pytest
from support.daemon import REPO

pytestmark = [pytest.mark.packaging, pytest.mark.timeout(900)]


def run(*argv: str | Path, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(a) for a in argv], capture_output=True, text=True, timeout=timeout, cwd=REPO
    )


def test_client_wheel_installs_and_imports_in_a_fresh_virtualenv(tmp_path: Path) -> None:
    wheels = tmp_path / "wheels"
    built = run(
        sys.executable,
        "-m",
        "pip",
        "wheel",
        "--no-deps",
        "-q",
        "-w",
        wheels,
        REPO / "proto",
        REPO / "client",
    )
    assert built.returncode == 0, built.stdout + built.stderr
    names = sorted(p.name for p in wheels.glob("*.whl"))
    assert (
        len(names) == 2
        and names[0].startswith("hostcap_client-")
        and names[1].startswith("hostcap_proto-")
    )
    client_wheel = next(wheels.glob("hostcap_client-*.whl"))
    with zipfile.ZipFile(client_wheel) as archive:
        files = archive.namelist()
        metadata = archive.read(
            next(n for n in files if n.endswith(".dist-info/METADATA"))
        ).decode()
    assert "hostcap/adapters/openai.py" in files and "hostcap/mcp_server.py" in files
    assert not any(name.startswith(("hostcapd/", "hostcap_proto/")) for name in files)
    requires = [line for line in metadata.splitlines() if line.startswith("Requires-Dist:")]
    assert requires and not any(re.search(r"===?\s*[0-9]", line) for line in requires), (
        requires
    )  # ranges, not pins
    assert not any("prctl" in line for line in requires)

    env_dir = tmp_path / "env"
    venv.EnvBuilder(with_pip=True).create(env_dir)
    python = env_dir / "bin" / "python"
    install = ("-m", "pip", "install", "-q", "--find-links", wheels, "hostcap-client[adapters]")
    installed = run(python, *install)
    if installed.returncode != 0:  # one retry: a registry hiccup is not the client's fault
        installed = run(python, *install)
    assert installed.returncode == 0, installed.stdout + installed.stderr

    probe = (
        "import importlib.util, hostcap, hostcap_proto, openai, anthropic\n"
        "from hostcap.adapters import openai as a, anthropic as b\n"
        "reg = hostcap.create_tool_registry(tools=hostcap.BUILTIN_TOOLS, host=hostcap.StaticToolHost())\n"
        "assert a.chat_tools(reg, strict=True) and b.anthropic_tools(reg)\n"
        "for absent in ('hostcapd', 'prctl'):\n"
        "    assert importlib.util.find_spec(absent) is None, absent\n"
        "print('imported', hostcap.__name__)\n"
    )
    imported = subprocess.run(
        [str(python), "-c", probe], capture_output=True, text=True, timeout=120, cwd=tmp_path
    )
    assert imported.returncode == 0 and "imported hostcap" in imported.stdout, imported.stderr
    snippet = run(
        env_dir / "bin" / "hostcap",
        "mcp",
        "--socket",
        "s.sock",
        "--config",
        "p.toml",
        "--print-config-snippet",
    )
    assert snippet.returncode == 0 and '"mcpServers"' in snippet.stdout, snippet.stderr
