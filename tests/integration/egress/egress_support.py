"""What the egress integration tests share: the test's own origins, a
proxy-mode daemon whose tenant reaches them by name, and reading its audit."""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from support.daemon import Daemon, audit_records, children_of, cmdline
from support.origin import Origin, self_signed
from support.process import Client, outcome

CURL = shutil.which("curl")


@pytest.fixture
def origins(tmp_path: Path) -> Iterator[tuple[Origin, Origin, Path]]:
    certs = tmp_path / "certs"
    certs.mkdir()
    tls = self_signed(certs, ["allowed.test", "denied.test"])
    plain, secure = Origin(), Origin(tls)
    yield plain, secure, tls[0]
    plain.close()
    secure.close()


@pytest.fixture
def proxy_daemon(
    start_daemon: Callable[..., Daemon], origins: tuple[Origin, Origin, Path]
) -> tuple[Daemon, Origin, Origin, Path]:
    plain, secure, cert = origins
    ports = (plain.port, secure.port)
    network = {
        "mode": "proxy",
        "allow": [f"allowed.test:{p}" for p in ports]
        + [f"*.test:{p}" for p in ports]
        + [f"localhost:{p}" for p in ports],
        "deny": ["denied.test"],
        "resolve": {"allowed.test": "127.0.0.1", "denied.test": "127.0.0.1"},
        "max_connections": 64,
    }
    daemon = start_daemon(
        tenants={"dev": {"network": network, "sandbox": {"system_dirs": ["/usr", "/bin", "/lib",
                                                                         "/lib64", "/etc"]}}},
        daemon={"allow_resolve_overrides": True},
    )  # fmt: skip
    # The certificate where the tenant can read it: its read-only root.
    reference = daemon.root(index=1)
    shutil.copy(cert, reference / "cert.pem")
    os.chmod(reference / "cert.pem", 0o644)
    return daemon, plain, secure, reference / "cert.pem"


def connects(daemon: Daemon, at_least: int = 0) -> list[dict[str, Any]]:
    """The network.connect records; waits (up to a generous deadline) for
    `at_least` of them: a connection's record is written when it ends, which
    the proxy may report after the spawn's exit."""
    deadline = time.monotonic() + 20
    while True:
        found = [r for r in audit_records(daemon.audit_path) if r["event"] == "network.connect"]
        if len(found) >= at_least or time.monotonic() > deadline:
            return found


def proxies(daemon: Daemon) -> list[int]:
    return [p for p in children_of(daemon.pid) if b"hostcapd.egress" in cmdline(p)]


async def sh(daemon: Daemon, script: str) -> tuple[str, bytes, bytes]:
    client = Client(daemon.socket)
    try:
        result = await client.run("sh", "-c", script, labels={"session": "egress-test"})
    finally:
        await client.close()
    return outcome(result), result.stdout, result.stderr
