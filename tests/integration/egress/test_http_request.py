"""The client's `http_request` through hostcapd's egress proxy: the engine's
allowed_domains and the tenant's rules must both allow (the narrower wins),
and a refusal names which refused. Where the tenant has no egress, the arm
is absent and `hostcap mcp` says why it does not offer the tool."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import hostcap
import pytest
from hostcap.errors import ToolPolicyError
from hostcap.host import EgressRequest
from support.daemon import Daemon
from support.origin import BODY, Origin, self_signed

pytestmark = [
    pytest.mark.skipif(os.geteuid() != 0, reason="the proxy mode needs root"),
    pytest.mark.skipif(shutil.which("curl") is None, reason="curl is not installed"),
]


@pytest.fixture
def secure(tmp_path: Path) -> Iterator[tuple[Origin, Path]]:
    certs = tmp_path / "certs"
    certs.mkdir()
    tls = self_signed(certs, ["allowed.test", "other.test", "denied.test"])
    origin = Origin(tls)
    yield origin, tls[0]
    origin.close()


@pytest.fixture
def daemon(
    start_daemon: Callable[..., Daemon], secure: tuple[Origin, Path], state_dir: Path
) -> Daemon:
    origin, cert = secure
    ca = state_dir / "dev" / "reference" / "cert.pem"
    ca.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(cert, ca)
    os.chmod(ca, 0o644)
    names = ("allowed.test", "other.test", "denied.test")
    return start_daemon(
        tenants={"dev": {
            "env": {"CURL_CA_BUNDLE": str(ca)},
            "network": {
                "mode": "proxy",
                "allow": [f"allowed.test:{origin.port}", f"other.test:{origin.port}"],
                "resolve": {name: "127.0.0.1" for name in names},
            },
        }},
        daemon={"allow_resolve_overrides": True},
    )  # fmt: skip


def context(allowed: list[str]) -> hostcap.DispatchContext:
    return hostcap.DispatchContext(
        granted_tool_ids={"http_request"},
        approval=hostcap.ApprovalPolicy("auto").context(),
        tool_policy=hostcap.ToolPolicy(allowed_domains=allowed),
        session_id="egress",
    )


async def test_http_request_goes_through_the_proxy_and_the_narrower_rule_wins(
    daemon: Daemon, secure: tuple[Origin, Path]
) -> None:
    origin = secure[0]
    async with hostcap.connect(daemon.socket) as host:
        assert host.egress is not None, host.egress_unavailable
        response = await host.egress.fetch(
            EgressRequest(method="GET", url=f"https://allowed.test:{origin.port}/")
        )
        assert (response.status, response.body) == (200, BODY.decode())
        registry = hostcap.create_tool_registry(tools=hostcap.BUILTIN_TOOLS, host=host)
        ctx = context(["allowed.test", "denied.test"])
        call = hostcap.ToolCall(
            "c1", "http_request", {"url": f"https://allowed.test:{origin.port}/"}
        )
        outcome = await registry.dispatch(call, ctx)
        assert BODY.decode() in str(outcome.tool_result.unwrap())
        # The tenant allows other.test, the engine does not: the engine refuses.
        with pytest.raises(ToolPolicyError) as engine:
            await registry.dispatch(
                hostcap.ToolCall(
                    "c2", "http_request", {"url": f"https://other.test:{origin.port}/"}
                ),
                ctx,
            )
        assert engine.value.reason == "domain_not_allowed"
        assert "client's allowed_domains" in str(engine.value)
        # The engine allows denied.test, the tenant does not: the host's rules refuse.
        with pytest.raises(ToolPolicyError) as rules:
            await registry.dispatch(
                hostcap.ToolCall(
                    "c3", "http_request", {"url": f"https://denied.test:{origin.port}/"}
                ),
                ctx,
            )
        assert rules.value.reason == "egress_rule_denied"
        assert "no allow rule matches denied.test" in str(rules.value)


async def test_without_egress_the_arm_is_absent_and_mcp_says_why(
    start_daemon: Callable[..., Daemon], tmp_path: Path
) -> None:
    daemon = start_daemon()  # network.mode "none"
    async with hostcap.connect(daemon.socket) as host:
        assert host.egress is None
        assert 'network mode is "none"' in host.egress_unavailable
        # Not offered to a model either, even granted (the registry's catalogue).
        registry = hostcap.create_tool_registry(tools=hostcap.BUILTIN_TOOLS, host=host)
        granted = hostcap.DispatchContext(
            granted_tool_ids={"read_file", "http_request"},
            approval=hostcap.ApprovalPolicy("auto").context(),
            tool_policy=hostcap.ToolPolicy(allowed_domains=["pypi.org"]),
            session_id="egress",
        )
        offered = {t["function"]["name"] for t in registry.openai_tools(granted)}
        assert "read_file" in offered and "http_request" not in offered
    config = tmp_path / "mcp.toml"
    config.write_text(
        'granted_tools = ["read_file", "http_request"]\nallowed_domains = ["pypi.org"]\n'
    )
    proc = subprocess.run(
        [sys.executable, "-m", "hostcap.mcp_cli", "mcp", "--socket", str(daemon.socket),
         "--config", str(config)],
        input=b"", capture_output=True, timeout=60,
    )  # fmt: skip
    assert b"not offering http_request" in proc.stderr, proc.stderr
    assert b'network mode is "none"' in proc.stderr
