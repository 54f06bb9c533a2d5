"""network.mode = "proxy" against a real daemon, with no internet: the
test's own HTTP and HTTPS servers on the host, test names resolved to them
by the tenant's `resolve` overrides. A sandboxed command reaches an allowed
name through the proxy, and each way around it is tried and fails, with the
reason in its output and a network.connect record in the audit log."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from egress_support import CURL, connects, sh
from support.daemon import Daemon
from support.origin import BODY, Origin

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the proxy mode needs root")


@pytest.mark.skipif(CURL is None, reason="curl is not installed")
async def test_curl_https_to_an_allowed_name_goes_through_the_proxy(
    proxy_daemon: tuple[Daemon, Origin, Origin, Path],
) -> None:
    daemon, plain, secure, cert = proxy_daemon
    how, out, err = await sh(
        daemon,
        f"curl -sS -m 20 --cacert {cert} https://allowed.test:{secure.port}/ && "
        f"curl -sS -m 20 http://allowed.test:{plain.port}/ && "
        f"curl -sS -m 20 -x socks5h://127.0.0.1:3128 http://allowed.test:{plain.port}/",
    )
    assert (how, out) == ("EXITED", BODY * 3), err
    records = connects(daemon, at_least=3)
    allowed = [r for r in records if r["allowed"]]
    assert {r["protocol"] for r in allowed} == {"connect", "http", "socks5"}
    tls = next(r for r in allowed if r["protocol"] == "connect")
    assert (tls["host"], tls["port"], tls["address"]) == ("allowed.test", secure.port, "127.0.0.1")
    assert tls["rule"] == f"allowed.test:{secure.port}"
    assert tls["bytes_down"] > len(BODY) and tls["bytes_up"] > 0  # TLS, relayed unread
    assert tls["tenant"] == "dev" and tls["spawn_id"]
    assert tls["labels"] == {"session": "egress-test"}  # the request's, as on its exec


@pytest.mark.skipif(CURL is None, reason="curl is not installed")
async def test_each_way_around_the_rules_is_refused_with_its_reason_and_audited(
    proxy_daemon: tuple[Daemon, Origin, Origin, Path],
) -> None:
    daemon, plain, secure, cert = proxy_daemon
    p = plain.port
    script = "; ".join(
        [
            # a denied name (deny wins over *.test)
            f"curl -sS -m 20 http://denied.test:{p}/",
            f"curl -sS -m 20 -o /dev/null -w 'connect:%{{http_connect}}\\n' --cacert {cert} "
            f"https://denied.test:{secure.port}/",
            # the same through SOCKS5: its reply "not allowed by ruleset" (2)
            f"curl -sS -m 20 -x socks5h://127.0.0.1:3128 http://denied.test:{p}/ 2>&1",
            # a name with no rule
            f"curl -sS -m 20 http://other.example:{p}/",
            # a name that resolves into 127.0.0.0/8 (no override: /etc/hosts)
            f"curl -sS -m 20 --noproxy '' -x http://127.0.0.1:3128 http://localhost:{p}/",
            # an IP literal
            f"curl -sS -m 20 --noproxy '' -x http://127.0.0.1:3128 http://127.0.0.1:{p}/",
            "curl -sS -m 20 --noproxy '' -x http://127.0.0.1:3128 http://169.254.169.254/",
            "true",
        ]
    )
    how, out, _err = await sh(daemon, script)
    text = out.decode()
    assert how == "EXITED"
    assert "denied by rule 'denied.test'" in text
    assert "connect:403" in text  # CONNECT refused with a 403
    assert "SOCKS5" in text and "(2)" in text, text  # SOCKS5 reply 2: not allowed by ruleset
    assert "no allow rule matches other.example" in text
    assert "resolved to 127.0.0.1, an internal address" in text
    assert "IP address 127.0.0.1 is refused" in text
    assert "IP address 169.254.169.254 is refused" in text
    assert BODY.decode() not in text
    denied = [r for r in connects(daemon, at_least=7) if not r["allowed"]]
    hosts = {r["host"] for r in denied}
    assert {"denied.test", "other.example", "localhost", "127.0.0.1", "169.254.169.254"} <= hosts
    by_host = {r["host"]: r for r in denied}
    assert by_host["denied.test"]["rule"] == "denied.test"
    assert by_host["localhost"]["rule"] == f"localhost:{p}"
    # SOCKS5's reply is a code only: the reason is the audit record's.
    [socks] = [r for r in denied if r["protocol"] == "socks5"]
    assert socks["host"] == "denied.test" and socks["rule"] == "denied.test"
    assert "denied by rule 'denied.test'" in socks["reason"]


@pytest.mark.skipif(CURL is None, reason="curl is not installed")
async def test_audit_query_by_host_says_which_spawns_talked_to_it(
    proxy_daemon: tuple[Daemon, Origin, Origin, Path],
) -> None:
    import json
    import subprocess
    import sys

    daemon, plain, _secure, _cert = proxy_daemon
    await sh(daemon, f"curl -sS -m 20 http://allowed.test:{plain.port}/")
    await sh(daemon, f"curl -sS -m 20 http://denied.test:{plain.port}/")
    assert len(connects(daemon, at_least=2)) == 2

    def query(host: str) -> list[dict[str, Any]]:
        out = subprocess.run(
            [sys.executable, "-m", "hostcap.ctl.main", "audit", "query", "--file",
             str(daemon.audit_path), "--host", host, "--json"],
            check=True, capture_output=True, text=True,
        ).stdout  # fmt: skip
        return [json.loads(line) for line in out.splitlines() if line.strip()]

    allowed = query("allowed.test")
    assert [r["allowed"] for r in allowed] == [True]
    assert [r["host"] for r in query("*.test")] == ["allowed.test", "denied.test"]
    assert allowed[0]["spawn_id"] != query("denied.test")[0]["spawn_id"]


async def test_capabilities_show_the_mode_and_the_rules(
    proxy_daemon: tuple[Daemon, Origin, Origin, Path],
) -> None:
    import json
    import subprocess
    import sys

    daemon = proxy_daemon[0]
    out = subprocess.run(
        [sys.executable, "-m", "hostcap.ctl.main", "--socket", str(daemon.socket),
         "capabilities", "--json"],
        check=True, capture_output=True, text=True,
    ).stdout  # fmt: skip
    network = json.loads(out)["network"]
    assert network["mode"] == "proxy"
    assert network["deny"] == ["denied.test"]
    assert "allowed.test=127.0.0.1" in network["resolve"]
    assert network["proxy_url"] == "http://127.0.0.1:3128"
    assert network["proxy_running"] is True
    confined = {p["name"] for p in network["proxy_protections"] if p["applied"]}
    assert {"uid_drop", "no_new_privs", "no_capabilities", "landlock", "seccomp"} <= confined


@pytest.mark.skipif(CURL is None, reason="curl is not installed")
async def test_the_tenants_ceilings_on_connections_and_bytes(
    start_daemon: Callable[..., Daemon], origins: tuple[Origin, Origin, Path]
) -> None:
    plain = origins[0]
    daemon = start_daemon(
        tenants={"dev": {"network": {
            "mode": "proxy", "allow": [f"allowed.test:{plain.port}"],
            "resolve": {"allowed.test": "127.0.0.1"},
            "max_connections": 2, "max_bytes": 4 << 20,
        }}},
        daemon={"allow_resolve_overrides": True},
    )  # fmt: skip
    url = f"http://allowed.test:{plain.port}"
    how, out, _ = await sh(
        daemon,
        f"curl -sS -m 20 -o /dev/null -w '%{{size_download}}\\n' {url}/big/{16 << 20}; "
        f"curl -sS -m 20 {url}/; curl -sS -m 20 {url}/",
    )
    lines = out.decode().splitlines()
    assert how == "EXITED"
    assert int(lines[0]) < 16 << 20  # cut at the byte ceiling
    assert "limit of 2 connections" in out.decode()
    records = connects(daemon, at_least=3)
    assert any("limit of 4194304 bytes" in r["reason"] for r in records)
    assert [r["allowed"] for r in records].count(False) == 1
    # A new spawn starts with its own count.
    how, out, _ = await sh(daemon, f"curl -sS -m 20 {url}/")
    assert out == BODY
    # The spawner held each spawn's namespace (its own copy of the fd) and
    # let it go once idle, without closing anything twice.
    await asyncio.sleep(1.5)
    assert "spawner died" not in daemon.output()
