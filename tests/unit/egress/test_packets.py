"""What counts as an attempt past the proxy, and how often one is recorded."""

from __future__ import annotations

import struct

from hostcapd.egress import direct, packets


def v4(proto: int, body: bytes, frag: int = 0) -> bytes:
    head = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(body), 0, frag, 64, proto, 0,
                       bytes([198, 18, 0, 1]), bytes([192, 0, 2, 1]))  # fmt: skip
    return head + body


def v6(next_header: int, body: bytes) -> bytes:
    source = bytes.fromhex("fd686f7374636170" + "0" * 15 + "1")
    dest = bytes.fromhex("ff02" + "0" * 27 + "2")
    return struct.pack("!IHBB", 6 << 28, len(body), next_header, 255) + source + dest + body


def tcp(flags: int, port: int = 443) -> bytes:
    return struct.pack("!HHIIBBHHH", 40000, port, 7, 0, 5 << 4, flags, 1024, 0, 0)


def test_a_connect_and_a_datagram_are_attempts_the_rest_of_tcp_is_not() -> None:
    syn = packets.attempt_of(v4(packets.TCP, tcp(0x02)))
    assert syn == packets.Attempt("tcp", "198.18.0.1", "192.0.2.1", 443)
    assert packets.attempt_of(v4(packets.TCP, tcp(0x12))) is None  # SYN-ACK
    assert packets.attempt_of(v4(packets.TCP, tcp(0x10))) is None  # ACK
    udp = packets.attempt_of(v4(packets.UDP, struct.pack("!HHHH", 5000, 53, 8, 0)))
    assert udp is not None and (udp.protocol, udp.port) == ("udp", 53)
    assert packets.attempt_of(v4(packets.UDP, b"\0" * 8, frag=0x0010)) is None  # later fragment
    gre = packets.attempt_of(v4(47, b""))
    assert gre is not None and (gre.protocol, gre.number) == ("ip", 47)


def test_the_kernels_own_messages_are_not_attempts() -> None:
    solicitation = v6(packets.ICMPV6, bytes([133, 0, 0, 0]) + bytes(4))
    mld = v6(0, bytes([packets.ICMPV6, 0, 5, 2, 0, 0, 1, 0]) + bytes([143]) + bytes(27))
    assert packets.attempt_of(solicitation) is None
    assert packets.attempt_of(mld) is None
    assert packets.attempt_of(v4(2, bytes(8))) is None  # IGMP
    ping = packets.attempt_of(v6(packets.ICMPV6, bytes([128, 0, 0, 0, 0, 1, 0, 1])))
    assert ping is not None and ping.protocol == "icmp"


def test_a_refusal_quotes_the_attempt_from_its_destination() -> None:
    packet = v4(packets.TCP, tcp(0x02))
    answer = packets.refusal_of(packet)
    assert answer is not None
    assert answer[12:16] == packet[16:20] and answer[16:20] == packet[12:16]
    assert answer[20:22] == bytes([3, 13])  # communication administratively prohibited
    assert answer[28:] == packet[:28]
    assert packets.refusal_of(v4(packets.TCP, tcp(0x10))) is None


def test_a_flow_is_recorded_once_and_a_flood_is_counted_not_written() -> None:
    clock = [0.0]
    limiter = direct.Limiter(now=lambda: clock[0])
    same = packets.Attempt("udp", "198.18.0.1", "192.0.2.1", 53)
    assert limiter.admit(same) and not limiter.admit(same)
    clock[0] += direct.FLOW_TTL
    assert limiter.admit(same)  # again after FLOW_TTL
    admitted = sum(
        limiter.admit(packets.Attempt("udp", "198.18.0.1", "192.0.2.1", port))
        for port in range(1000, 1100)
    )
    assert admitted == direct.BURST - 1 and limiter.left_out == 100 - admitted
    assert "skips the proxy" in direct.reason_of(same)
