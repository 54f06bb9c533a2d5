"""The parsing the egress proxy does itself, on untrusted bytes: pure
functions, fuzzed with the hostile-input suite. HTTP/1.1 request heads are
h11's (`HttpHead`); what is written here is the proxy target forms and
SOCKS5's two messages.

    host, port = authority(b"pypi.org:443", default_port=None)   # CONNECT
    host, port, path = absolute_uri(b"http://pypi.org/simple/")   # plain HTTP
    methods, used = socks_greeting(buf)      # None: more bytes needed
    request, used = socks_request(buf)       # SocksRequest, or None
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass

import h11

SOCKS_VERSION = 5
#: SOCKS5 reply codes (RFC 1928).
SOCKS_OK = 0
SOCKS_FAILURE = 1
SOCKS_NOT_ALLOWED = 2
SOCKS_HOST_UNREACHABLE = 4
SOCKS_REFUSED = 5
SOCKS_TTL_EXPIRED = 6
SOCKS_COMMAND_UNSUPPORTED = 7
SOCKS_ADDRESS_UNSUPPORTED = 8
#: Longest request head the proxy reads before it refuses.
MAX_HEAD = 16 * 1024
_HOST = re.compile(rb"[A-Za-z0-9._-]{1,253}")


class ProtocolError(ValueError):
    """Bytes that are not the protocol; the message is safe to show."""


def _port(raw: bytes) -> int:
    if not re.fullmatch(rb"[0-9]{1,5}", raw) or not 0 < int(raw) < 65536:
        raise ProtocolError("the port is not 1-65535")
    return int(raw)


def authority(raw: bytes, default_port: int | None) -> tuple[str, int]:
    """`host:port` (`[v6]:port`) as (host, port); the port may be left out
    only with a `default_port`."""
    if raw.startswith(b"["):
        end = raw.find(b"]")
        if end < 0:
            raise ProtocolError("unclosed '[' in the target")
        host, rest = raw[1:end], raw[end + 1 :]
        try:
            ipaddress.IPv6Address(host.decode("ascii"))
        except (ValueError, UnicodeDecodeError):
            raise ProtocolError("not an IPv6 address in '[...]'") from None
        if not rest:
            if default_port is None:
                raise ProtocolError("the target has no port")
            return host.decode("ascii"), default_port
        if not rest.startswith(b":"):
            raise ProtocolError("junk after ']' in the target")
        return host.decode("ascii"), _port(rest[1:])
    host, sep, port = raw.rpartition(b":")
    if not sep:
        host, port = raw, b""
    if not _HOST.fullmatch(host):
        raise ProtocolError("the target's host is not a name or an address")
    if not port:
        if default_port is None or sep:
            raise ProtocolError("the target has no port")
        return host.decode("ascii"), default_port
    return host.decode("ascii"), _port(port)


def absolute_uri(target: bytes) -> tuple[str, int, bytes]:
    """`http://host[:port]/path` as (host, port, origin-form path)."""
    if target[:7].lower() != b"http://":
        raise ProtocolError(
            "a plain-HTTP proxy request needs an absolute http:// target (use CONNECT for https)"
        )
    rest = target[7:]
    cut = min((i for i in (rest.find(b"/"), rest.find(b"?")) if i >= 0), default=len(rest))
    hostport, path = rest[:cut], rest[cut:]
    if b"@" in hostport:
        raise ProtocolError("credentials in the target are refused")
    host, port = authority(hostport, default_port=80)
    if not path.startswith(b"/"):
        path = b"/" + path
    return host, port, path


@dataclass(frozen=True)
class SocksRequest:
    command: int
    host: str
    port: int


def socks_greeting(buf: bytes) -> tuple[bytes, int] | None:
    """(offered methods, bytes used), or None while incomplete."""
    if len(buf) < 2:
        return None
    if buf[0] != SOCKS_VERSION:
        raise ProtocolError("not SOCKS version 5")
    count = buf[1]
    if count == 0:
        raise ProtocolError("a SOCKS5 greeting offers no method")
    if len(buf) < 2 + count:
        return None
    return bytes(buf[2 : 2 + count]), 2 + count


def socks_request(buf: bytes) -> tuple[SocksRequest, int] | None:
    """(request, bytes used), or None while incomplete. The address types
    are IPv4, a domain name (remote resolution) and IPv6."""
    if len(buf) < 5:
        return None
    version, command, reserved, kind = buf[0], buf[1], buf[2], buf[3]
    if version != SOCKS_VERSION or reserved != 0:
        raise ProtocolError("not a SOCKS5 request")
    if kind == 1:
        end = 4 + 4
        if len(buf) < end + 2:
            return None
        host = str(ipaddress.IPv4Address(bytes(buf[4:end])))
    elif kind == 3:
        size = buf[4]
        end = 5 + size
        if len(buf) < end + 2:
            return None
        name = bytes(buf[5:end])
        if not _HOST.fullmatch(name):
            raise ProtocolError("the SOCKS5 domain name is not a name")
        host = name.decode("ascii")
    elif kind == 4:
        end = 4 + 16
        if len(buf) < end + 2:
            return None
        host = str(ipaddress.IPv6Address(bytes(buf[4:end])))
    else:
        raise ProtocolError(f"SOCKS5 address type {kind} is not supported")
    port = int.from_bytes(buf[end : end + 2], "big")
    if port == 0:
        raise ProtocolError("port 0")
    return SocksRequest(command, host, port), end + 2


def socks_reply(code: int) -> bytes:
    """A reply with the unspecified bound address (the client learns nothing
    of the host's side)."""
    return bytes([SOCKS_VERSION, code, 0, 1, 0, 0, 0, 0, 0, 0])


@dataclass(frozen=True)
class HttpHead:
    """A proxy request's head, as h11 parsed it."""

    method: bytes
    target: bytes
    headers: list[tuple[bytes, bytes]]
    #: Bytes after the head (a body's start, or a tunnel's first bytes).
    rest: bytes


def http_head(buf: bytes) -> HttpHead | None:
    """The request head at the start of `buf`, or None while incomplete;
    ProtocolError if it is not HTTP/1.x or is larger than MAX_HEAD."""
    conn = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_HEAD)
    try:
        conn.receive_data(bytes(buf))
        event = conn.next_event()
    except h11.RemoteProtocolError as error:
        raise ProtocolError(f"not an HTTP/1.1 request: {error}") from None
    if event is h11.NEED_DATA:
        if len(buf) > MAX_HEAD:
            raise ProtocolError("the request head is too large")
        return None
    if not isinstance(event, h11.Request):
        raise ProtocolError("not an HTTP/1.1 request")
    # h11 keeps what follows the head unread: its trailing data.
    rest, _closed = conn.trailing_data
    if event.method == b"CONNECT":
        # h11 would read a CONNECT's body by its headers; the tunnel has none.
        rest = _after_head(bytes(buf))
    return HttpHead(event.method, event.target, list(event.headers.raw_items()), bytes(rest))


def _after_head(buf: bytes) -> bytes:
    end = buf.find(b"\r\n\r\n")
    if end >= 0:
        return buf[end + 4 :]
    end = buf.find(b"\n\n")
    return buf[end + 2 :] if end >= 0 else b""
