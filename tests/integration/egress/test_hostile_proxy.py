"""The egress proxy parses untrusted bytes, so the daemon trusts nothing it
says: a proxy replaced by a hostile one (tests/support/hostile_proxy.py)
reports a connection of a spawn it was never given and sends junk; the
daemon records neither, and records what it says of its own spawn under
that spawn and tenant only."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

import pytest
from hostcapd.config import load_config
from hostcapd.daemon import Daemon
from hostcapd.egress.supervisor import EgressProxy
from support import toml
from support.daemon import audit_records, daemon_config, prepare_roots, tenant_config
from support.process import Client, outcome

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the proxy mode needs root")
HOSTILE = Path(__file__).resolve().parents[2] / "support" / "hostile_proxy.py"


async def test_a_hostile_proxys_forged_reports_are_not_recorded(
    state_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(EgressProxy, "command", [sys.executable, "-I", str(HOSTILE)])
    # No warm children: each would be handed to the proxy (a report of theirs is legitimate).
    network = {"mode": "proxy", "allow": ["x.test"]}
    config = daemon_config(
        state_dir, {"dev": tenant_config(state_dir, "dev", network=network, warm_spawns=0)}
    )
    prepare_roots(config)
    path = state_dir / "hostcapd.toml"
    path.write_text(toml.dumps(config))
    daemon = Daemon(load_config(path), path)
    await daemon.start()
    try:
        client = Client(Path(config["tenants"]["dev"]["socket"]))
        try:
            result = await client.run("true")
        finally:
            await client.close()
        assert outcome(result) == "EXITED"
        spawn_id = result.started.spawn_id
        deadline = asyncio.get_running_loop().time() + 20
        while True:
            records = [
                r for r in audit_records(Path(config["audit"]["path"]))
                if r["event"] == "network.connect"
            ]  # fmt: skip
            if records or asyncio.get_running_loop().time() > deadline:
                break
            await asyncio.sleep(0.05)
        assert [(r["spawn_id"], r["tenant"], r["host"]) for r in records] == [
            (spawn_id, "dev", "own.example")
        ]
    finally:
        await daemon.stop()


async def test_while_no_proxy_can_start_a_spawn_fails_typed_never_open(
    state_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = daemon_config(
        state_dir,
        {"dev": tenant_config(state_dir, "dev", network={"mode": "proxy", "allow": ["x.test"]})},
    )
    prepare_roots(config)
    path = state_dir / "hostcapd.toml"
    path.write_text(toml.dumps(config))
    daemon = Daemon(load_config(path), path)
    await daemon.start()
    try:
        egress = daemon.tenants["dev"].runtime.deps.egress
        assert egress is not None and egress.proc is not None
        # The proxy dies, and no new one can start (its program exits at once).
        monkeypatch.setattr(EgressProxy, "command", ["/bin/false"])
        egress.proc.kill()
        client = Client(Path(config["tenants"]["dev"]["socket"]))
        try:
            result = await client.run("true")
            assert outcome(result) == "SPAWN_FAILED"
            assert result.exited.failed_step == "egress"
            assert "egress proxy" in result.exited.message
            # Back once a proxy can start again.
            monkeypatch.undo()
            result = await client.run("true")
            assert outcome(result) == "EXITED"
        finally:
            await client.close()
    finally:
        await daemon.stop()


async def test_without_a_tun_device_the_proxy_tenant_is_refused_at_start_up(
    state_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from hostcapd.egress import netns
    from hostcapd.service.sockets import StartupError

    # Fail closed: without the tun, what a spawn sends past the proxy could
    # not be audited.
    monkeypatch.setattr(netns, "TUN_DEVICE", str(state_dir / "no-such-tun"))
    config = daemon_config(
        state_dir,
        {"dev": tenant_config(state_dir, "dev", network={"mode": "proxy", "allow": ["x.test"]})},
    )
    prepare_roots(config)
    path = state_dir / "hostcapd.toml"
    path.write_text(toml.dumps(config))
    daemon = Daemon(load_config(path), path)
    with pytest.raises(StartupError, match=r"proxy mode needs .*no-such-tun"):
        await daemon.start()
    await daemon.stop()
