"""Hostile input against the egress proxy's own parsing (hostcapd.egress.
protocols and rules: the bytes a sandboxed command sends the proxy, and the
rules an operator writes), fuzzed with hypothesis: each answer is a result
or the parser's typed error, never another exception. Then the bytes for
real: a sandboxed command sends fuzzed requests to its proxy, which answers
or hangs up on each, refuses what it must, and keeps serving."""

from __future__ import annotations

import contextlib
import ipaddress
import json
import os
from collections.abc import Callable
from pathlib import Path

import pytest
from hostcapd.egress import protocols
from hostcapd.egress.protocols import ProtocolError
from hostcapd.egress.rules import Policy, Rule, RuleError
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.daemon import Daemon, audit_records
from support.origin import BODY, Origin
from support.process import Client, outcome

FUZZ = settings(
    max_examples=300,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    database=None,
)

heads = st.builds(
    lambda method, target, headers, tail: method + b" " + target + b" HTTP/1.1\r\n"
    + b"".join(k + b": " + v + b"\r\n" for k, v in headers) + b"\r\n" + tail,
    st.sampled_from([b"CONNECT", b"GET", b"POST", b"G\x00T", b""]),
    st.one_of(st.binary(max_size=80), st.sampled_from(
        [b"a.test:443", b"[::1]:443", b"http://a.test/", b"http://u@a.test/", b"a.test:0",
         b"a.test:99999", b"http://[::1", b"http://a.test:80x/"])),
    st.lists(st.tuples(st.binary(max_size=20), st.binary(max_size=40)), max_size=5),
    st.binary(max_size=40),
)  # fmt: skip
socks = st.builds(
    lambda kind, addr, port: bytes([5, 1, 0, kind]) + addr + port,
    st.integers(0, 255),
    st.binary(max_size=260),
    st.binary(max_size=3),
)


@FUZZ
@given(data=st.one_of(st.binary(max_size=512), heads))
def test_http_heads_parse_or_refuse_typed(data: bytes) -> None:
    try:
        head = protocols.http_head(data)
    except ProtocolError:
        return
    if head is None:
        return
    try:
        if head.method == b"CONNECT":
            host, port = protocols.authority(head.target, default_port=None)
        else:
            host, port, path = protocols.absolute_uri(head.target)
            assert path.startswith(b"/")
    except ProtocolError:
        return
    assert 0 < port < 65536 and host


@FUZZ
@given(data=st.one_of(st.binary(max_size=300), socks))
def test_socks_messages_parse_or_refuse_typed(data: bytes) -> None:
    for parse in (protocols.socks_greeting, protocols.socks_request):
        try:
            parsed = parse(data)
        except ProtocolError:
            continue
        if parsed is not None:
            assert 0 < parsed[1] <= len(data)  # never reads past what it was given


@FUZZ
@given(text=st.one_of(st.text(max_size=60), st.from_regex(r"\*?\.?[a-z0-9.:\[\]/*-]{0,40}")))
def test_rules_parse_or_refuse_typed(text: str) -> None:
    with contextlib.suppress(RuleError):
        Rule.parse(text)


POLICY = Policy.of(["allowed.test", "*.mirror.test:8443"], ["bad.mirror.test"])


@FUZZ
@given(
    host=st.one_of(st.text(max_size=80), st.ip_addresses().map(str)), port=st.integers(-5, 70000)
)
def test_the_policy_never_allows_an_ip_literal_or_an_unnamed_host(host: str, port: int) -> None:
    verdict = POLICY.decide(host, port)
    if not verdict.allowed:
        assert verdict.reason
        return
    assert verdict.rule in ("allowed.test", "*.mirror.test:8443")
    name = host.lower().rstrip(".")
    assert name == "allowed.test" or name.endswith(".mirror.test")
    with pytest.raises(ValueError):
        ipaddress.ip_address(host)


# ---- the bytes for real --------------------------------------------------------


SENDER = r"""
import json, socket, sys
payloads = json.load(open(sys.argv[1]))
answered = 0
for hexed in payloads:
    s = socket.create_connection(("127.0.0.1", 3128), timeout=10)
    try:
        s.sendall(bytes.fromhex(hexed))
        s.shutdown(socket.SHUT_WR)
        while s.recv(65536):
            pass
        answered += 1
    except OSError:
        answered += 1
    finally:
        s.close()
print("answered", answered)
"""


@pytest.mark.skipif(os.geteuid() != 0, reason="the proxy mode needs root")
async def test_fuzzed_bytes_to_the_proxy_are_answered_and_survived(
    start_daemon: Callable[..., Daemon], tmp_path: Path
) -> None:
    origin = Origin()
    try:
        daemon = start_daemon(
            tenants={"dev": {"network": {
                "mode": "proxy", "allow": [f"allowed.test:{origin.port}"],
                "resolve": {"allowed.test": "127.0.0.1"}, "max_connections": 10_000,
            }}},
            daemon={"allow_resolve_overrides": True},
        )  # fmt: skip
        payloads: list[bytes] = []

        @settings(FUZZ, max_examples=150)
        @given(data=st.one_of(st.binary(max_size=600), heads, socks))
        def collect(data: bytes) -> None:
            payloads.append(data)

        collect()
        reference = daemon.root(index=1)
        (reference / "payloads.json").write_text(json.dumps([p.hex() for p in payloads]))
        (reference / "send.py").write_text(SENDER)
        client = Client(daemon.socket)
        try:
            result = await client.run(
                "sh", "-c",
                f"python3 {reference}/send.py {reference}/payloads.json && "
                f"curl -sS -m 20 http://allowed.test:{origin.port}/",
            )  # fmt: skip
        finally:
            await client.close()
        assert outcome(result) == "EXITED", result.stderr
        assert result.stdout == f"answered {len(payloads)}\n".encode() + BODY
        # Nothing fuzzed got out: the one allowed connection is the curl's.
        allowed = [r for r in audit_records(daemon.audit_path)
                   if r["event"] == "network.connect" and r["allowed"]]  # fmt: skip
        assert all(r["host"] == "allowed.test" for r in allowed)
    finally:
        origin.close()
