"""The tools agents use, through the egress proxy, with no internet: `git
clone` over HTTPS from a local `git http-backend`, and `pip download` from
a local package index, each under an allowed test name resolved to the
test's own server; the same under a name the rules do not allow fails."""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from support.daemon import Daemon, audit_records
from support.origin import Files, GitBackend, self_signed, serve, tiny_wheel
from support.process import Client, outcome

pytestmark = [
    pytest.mark.skipif(os.geteuid() != 0, reason="the proxy mode needs root"),
    pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed"),
]


async def test_git_clone_and_pip_download_through_the_proxy(
    start_daemon: Callable[..., Daemon], tmp_path: Path, state_dir: Path
) -> None:
    certs = tmp_path / "certs"
    certs.mkdir()
    tls = self_signed(certs, ["git.test", "pypi.test", "other.test"])
    repos = tmp_path / "repos"
    work = tmp_path / "work"
    subprocess.run(["git", "init", "-q", "-b", "main", str(work)], check=True)
    (work / "README").write_text("cloned through the proxy\n")
    git = ["git", "-C", str(work), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "add", "README"], check=True)
    subprocess.run([*git, "commit", "-qm", "one"], check=True)
    subprocess.run(["git", "clone", "-q", "--bare", str(work), str(repos / "demo.git")], check=True)
    index = tmp_path / "index"
    (index / "simple" / "hostcap-egress-probe").mkdir(parents=True)
    wheel = tiny_wheel(index)
    (index / "simple" / "hostcap-egress-probe" / "index.html").write_text(
        f'<html><body><a href="/{wheel.name}">{wheel.name}</a></body></html>\n'
    )
    git_server = serve(type("Git", (GitBackend,), {"root": repos}), tls)
    index_server = serve(type("Index", (Files,), {"root": index}), tls)
    try:
        ca = state_dir / "dev" / "reference" / "cert.pem"
        ca.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(tls[0], ca)
        os.chmod(ca, 0o644)
        names = ("git.test", "pypi.test", "other.test")
        daemon = start_daemon(
            tenants={"dev": {
                "env": {"GIT_SSL_CAINFO": str(ca), "PIP_CERT": str(ca), "PIP_NO_CACHE_DIR": "1"},
                "network": {
                    "mode": "proxy",
                    "allow": [f"git.test:{git_server.port}", f"pypi.test:{index_server.port}"],
                    "resolve": {name: "127.0.0.1" for name in names},
                },
            }},
            daemon={"allow_resolve_overrides": True},
        )  # fmt: skip
        workspace = daemon.root()
        script = (
            f"cd {workspace} && git clone -q https://git.test:{git_server.port}/demo.git && "
            "cat demo/README && "
            f"python3 -m pip download -q --no-deps -d dl --index-url "
            f"https://pypi.test:{index_server.port}/simple/ hostcap-egress-probe && ls dl; "
            f"git clone -q https://other.test:{git_server.port}/demo.git blocked 2>&1; "
            "echo end"
        )
        client = Client(daemon.socket)
        try:
            result = await client.run("sh", "-c", script)
        finally:
            await client.close()
        text = result.stdout.decode()
        assert outcome(result) == "EXITED", result.stderr
        assert "cloned through the proxy" in text, (text, result.stderr)
        assert wheel.name in text, (text, result.stderr)
        assert "403" in text and not (workspace / "blocked").exists(), text
        wanted = {("git.test", True), ("pypi.test", True), ("other.test", False)}
        deadline = time.monotonic() + 20  # a record is written when its connection ends
        while True:
            hosts = {
                (r["host"], r["allowed"])
                for r in audit_records(daemon.audit_path)
                if r["event"] == "network.connect"
            }
            if wanted <= hosts or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.1)
        assert wanted <= hosts
    finally:
        git_server.close()
        index_server.close()
