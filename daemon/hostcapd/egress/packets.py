"""The packets a proxy-mode spawn sends past its proxy, and the answer to
each: pure functions on untrusted bytes, fuzzed with the hostile-input suite.

A proxy-mode spawn's namespace routes everything that is not its loopback
into a tun device whose fd only the egress proxy reads (egress/netns.py):
no packet is forwarded anywhere. For each packet read there,

    attempt = attempt_of(packet)     # None: not an attempt to reach anything
    answer = refusal_of(packet)      # the ICMP error that fails it at once

`attempt_of` names what the program tried (a TCP connect, a UDP datagram,
a ping, another protocol) for the audit record; `refusal_of` builds the
"communication administratively prohibited" ICMP (ICMPv6) error that makes
the kernel fail the program's connect() at once (EHOSTUNREACH; EACCES over
IPv6) and a connected UDP socket's next call. Nothing here trusts a length
or an offset the packet gives without checking it against the bytes read.
"""

from __future__ import annotations

import ipaddress
import struct
from dataclasses import dataclass

TCP, UDP, ICMP, ICMPV6 = 6, 17, 1, 58
#: IPv6 extension headers walked to the upper-layer header.
_V6_EXTENSIONS = {0, 43, 60}
_V6_FRAGMENT = 44
#: An ICMPv6 error stays within the IPv6 minimum MTU.
_V6_ERROR_ROOM = 1280 - 40 - 8


@dataclass(frozen=True)
class Attempt:
    """One attempt to reach past the proxy, as the audit record names it."""

    protocol: str  # "tcp", "udp", "icmp", or "ip" (another protocol: `number`)
    source: str
    address: str
    port: int
    number: int = 0

    @property
    def flow(self) -> tuple[str, str, str, int, int]:
        """What makes two packets the same attempt (the source port is left
        out: a program retrying from new ports is one attempt)."""
        return (self.protocol, self.source, self.address, self.port, self.number)


def _upper_v4(packet: bytes) -> tuple[int, bytes, str, str] | None:
    """(protocol, payload, source, destination) of an IPv4 packet; None if
    it is malformed or a later fragment (no ports in it)."""
    if len(packet) < 20:
        return None
    ihl = (packet[0] & 0x0F) * 4
    total = struct.unpack_from("!H", packet, 2)[0]
    if ihl < 20 or total < ihl or total > len(packet):
        return None
    if struct.unpack_from("!H", packet, 6)[0] & 0x1FFF:
        return None
    source = str(ipaddress.IPv4Address(packet[12:16]))
    dest = str(ipaddress.IPv4Address(packet[16:20]))
    return packet[9], packet[ihl:total], source, dest


def _upper_v6(packet: bytes) -> tuple[int, bytes, str, str] | None:
    if len(packet) < 40:
        return None
    length = struct.unpack_from("!H", packet, 4)[0]
    if 40 + length > len(packet):
        return None
    body = packet[40 : 40 + length]
    header = packet[6]
    for _ in range(8):  # a bounded walk of the extension headers
        if header in _V6_EXTENSIONS:
            if len(body) < 8:
                return None
            size = (body[1] + 1) * 8
            if size > len(body):
                return None
            header, body = body[0], body[size:]
        elif header == _V6_FRAGMENT:
            if len(body) < 8 or struct.unpack_from("!H", body, 2)[0] & 0xFFF8:
                return None  # a later fragment
            header, body = body[0], body[8:]
        else:
            break
    else:
        return None
    source = str(ipaddress.IPv6Address(packet[8:24]))
    dest = str(ipaddress.IPv6Address(packet[24:40]))
    return header, body, source, dest


def attempt_of(packet: bytes) -> Attempt | None:
    """What `packet` tries to reach, or None for what is no attempt: a TCP
    segment that does not open a connection, the kernel's own neighbour,
    router and multicast-listener messages, IGMP, a malformed packet."""
    if not packet:
        return None
    version = packet[0] >> 4
    upper = _upper_v4(packet) if version == 4 else _upper_v6(packet) if version == 6 else None
    if upper is None:
        return None
    protocol, body, source, dest = upper
    if protocol == TCP:
        if len(body) < 14:
            return None
        flags = body[13]
        if not flags & 0x02 or flags & 0x10:  # SYN without ACK: a connect
            return None
        return Attempt("tcp", source, dest, struct.unpack_from("!H", body, 2)[0])
    if protocol == UDP:
        if len(body) < 8:
            return None
        return Attempt("udp", source, dest, struct.unpack_from("!H", body, 2)[0])
    if protocol in (ICMP, ICMPV6):
        echo = 8 if protocol == ICMP else 128
        if not body or body[0] != echo:
            return None  # errors, and the kernel's own ND/MLD/router messages
        return Attempt("icmp", source, dest, 0)
    if protocol == 2:  # IGMP: the kernel's own
        return None
    return Attempt("ip", source, dest, 0, protocol)


def _checksum(data: bytes) -> int:
    if len(data) % 2:
        data += b"\0"
    total: int = sum(struct.unpack(f"!{len(data) // 2}H", data))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return ~total & 0xFFFF


def refusal_of(packet: bytes) -> bytes | None:
    """The ICMP "administratively prohibited" error answering `packet`,
    from its destination to its source; None where none is due (what
    `attempt_of` does not count as an attempt)."""
    if attempt_of(packet) is None:
        return None
    if packet[0] >> 4 == 4:
        ihl = (packet[0] & 0x0F) * 4
        quoted = packet[: ihl + 8]
        icmp = bytearray(struct.pack("!BBHI", 3, 13, 0, 0) + quoted)
        struct.pack_into("!H", icmp, 2, _checksum(bytes(icmp)))
        header = bytearray(
            struct.pack(
                "!BBHHHBBH4s4s",
                0x45,
                0,
                20 + len(icmp),
                0,
                0x4000,
                64,
                ICMP,
                0,
                packet[16:20],
                packet[12:16],
            )
        )
        struct.pack_into("!H", header, 10, _checksum(bytes(header)))
        return bytes(header + icmp)
    source, dest = packet[24:40], packet[8:24]
    quoted = packet[:_V6_ERROR_ROOM]
    icmp = bytearray(struct.pack("!BBHI", 1, 1, 0, 0) + quoted)
    pseudo = source + dest + struct.pack("!I3xB", len(icmp), ICMPV6)
    struct.pack_into("!H", icmp, 2, _checksum(pseudo + bytes(icmp)))
    head = struct.pack("!IHBB", 6 << 28, len(icmp), ICMPV6, 64) + source + dest
    return head + bytes(icmp)
