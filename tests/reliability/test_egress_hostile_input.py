"""Hostile input against the egress proxy's own parsing (hostcapd.egress.
protocols, packets and rules: the bytes a sandboxed command sends the proxy
or past it onto its tun, and the rules an operator writes), fuzzed with hypothesis: each answer is a result
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
from hostcapd.egress import direct, packets, protocols
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


def _v4(ihl: int, total: int | None, frag: int, proto: int, body: bytes) -> bytes:
    size = 20 + len(body) if total is None else total
    head = bytes([0x40 | ihl, 0]) + size.to_bytes(2, "big") + bytes(2) + frag.to_bytes(2, "big")
    return head + bytes([64, proto, 0, 0]) + bytes([10, 0, 0, 1, 192, 0, 2, 1]) + body


def _v6(length: int | None, next_header: int, body: bytes) -> bytes:
    size = len(body) if length is None else length
    head = bytes([0x60, 0, 0, 0]) + size.to_bytes(2, "big") + bytes([next_header, 64])
    return head + bytes(15) + b"\x01" + bytes([0x20, 1, 0x0D, 0xB8]) + bytes(11) + b"\x01" + body


PROTOCOLS = st.one_of(st.sampled_from([0, 1, 2, 6, 17, 43, 44, 58, 60]), st.integers(0, 255))
ip_packets = st.one_of(
    st.binary(max_size=120),
    st.builds(_v4, st.integers(0, 15), st.one_of(st.none(), st.integers(0, 200)),
              st.integers(0, 0xFFFF), PROTOCOLS, st.binary(max_size=80)),
    st.builds(_v6, st.one_of(st.none(), st.integers(0, 200)), PROTOCOLS, st.binary(max_size=80)),
)  # fmt: skip


def _sums_to_zero(data: bytes) -> bool:
    return packets._checksum(data) == 0


@FUZZ
@given(packet=ip_packets)
def test_packets_past_the_proxy_are_named_or_ignored_and_answered_well_formed(
    packet: bytes,
) -> None:
    attempt = packets.attempt_of(packet)
    answer = packets.refusal_of(packet)
    assert (attempt is None) == (answer is None)
    if attempt is None or answer is None:
        return
    assert attempt.protocol in ("tcp", "udp", "icmp", "ip")
    assert 0 <= attempt.port < 65536 and attempt.address
    ipaddress.ip_address(attempt.address)
    # The answer: an ICMP error, its checksums right, quoting the packet.
    if answer[0] >> 4 == 4:
        assert len(answer) == int.from_bytes(answer[2:4], "big") <= 20 + 8 + 60 + 8
        assert _sums_to_zero(answer[:20]) and _sums_to_zero(answer[20:])
        assert answer[20:22] == bytes([3, 13]) and packet.startswith(answer[28:])
    else:
        assert len(answer) <= 1280 and int.from_bytes(answer[4:6], "big") == len(answer) - 40
        pseudo = answer[8:40] + (len(answer) - 40).to_bytes(4, "big") + bytes([0, 0, 0, 58])
        assert _sums_to_zero(pseudo + answer[40:])
        assert answer[40:42] == bytes([1, 1]) and packet.startswith(answer[48:])
    # An answer is never itself an attempt (no loop between the two ends).
    assert packets.attempt_of(answer) is None


@FUZZ
@given(
    steps=st.lists(
        st.tuples(st.floats(0, 5, allow_nan=False), st.integers(0, 40), st.integers(1, 65535)),
        max_size=400,
    )
)
def test_the_record_rate_of_packets_past_the_proxy_is_bounded(
    steps: list[tuple[float, int, int]],
) -> None:
    clock = [0.0]
    limiter = direct.Limiter(now=lambda: clock[0])
    recorded = 0
    for pause, host, port in steps:
        clock[0] += pause
        if limiter.admit(packets.Attempt("udp", "198.18.0.1", f"192.0.2.{host}", port)):
            recorded += 1
    assert recorded <= direct.BURST + direct.RATE * clock[0] + 1
    assert len(limiter.flows) <= direct.MAX_FLOWS


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
