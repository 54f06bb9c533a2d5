"""Just enough HTTP/2 to open a gRPC call on a tenant socket by hand, so a
test can then misbehave in ways no gRPC client library will: stop reading,
half-close the socket, never acknowledge anything, send broken frames.

    conn = RawConnection.open(socket_path)
    conn.start_call("/hostcap.v1.ProcessService/Spawn", request.SerializeToString())
    conn.sock.shutdown(socket.SHUT_WR)

Header blocks use HPACK literals without indexing or Huffman coding (RFC
7541 6.2.2), which every decoder must accept.
"""

from __future__ import annotations

import socket
import struct
from dataclasses import dataclass
from pathlib import Path

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
DATA, HEADERS, RST_STREAM, SETTINGS, PING, GOAWAY, WINDOW_UPDATE = 0, 1, 3, 4, 6, 7, 8
END_STREAM, ACK, END_HEADERS = 0x1, 0x1, 0x4


def frame(kind: int, flags: int, stream: int, payload: bytes) -> bytes:
    """One HTTP/2 frame (RFC 9113 4.1)."""
    return (
        struct.pack(">I", len(payload))[1:]
        + bytes([kind, flags])
        + struct.pack(">I", stream)
        + payload
    )


def _hpack_int(value: int, prefix_bits: int, first: int = 0) -> bytes:
    limit = (1 << prefix_bits) - 1
    if value < limit:
        return bytes([first | value])
    out = bytearray([first | limit])
    value -= limit
    while value >= 128:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def header_block(headers: list[tuple[bytes, bytes]]) -> bytes:
    """HPACK: each header as a literal without indexing, new name."""
    out = bytearray()
    for name, value in headers:
        out.append(0x00)
        out += _hpack_int(len(name), 7) + name
        out += _hpack_int(len(value), 7) + value
    return bytes(out)


def grpc_message(payload: bytes, declared_length: int | None = None) -> bytes:
    """A gRPC length-prefixed message (uncompressed); `declared_length` lies."""
    length = len(payload) if declared_length is None else declared_length
    return b"\x00" + struct.pack(">I", length) + payload


def call_headers(path: str) -> list[tuple[bytes, bytes]]:
    return [
        (b":method", b"POST"),
        (b":scheme", b"http"),
        (b":path", path.encode()),
        (b":authority", b"localhost"),
        (b"content-type", b"application/grpc"),
        (b"te", b"trailers"),
    ]


@dataclass
class RawConnection:
    sock: socket.socket
    next_stream: int = 1

    @classmethod
    def open(cls, path: Path, timeout: float = 10.0, preface: bool = True) -> RawConnection:
        """Connect; send the client preface and an empty SETTINGS unless told not to."""
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(timeout)
        sock.connect(str(path))
        if preface:
            sock.sendall(PREFACE + frame(SETTINGS, 0, 0, b""))
        return cls(sock)

    def start_call(self, path: str, message: bytes, end_stream: bool = True) -> int:
        """HEADERS then one DATA frame carrying `message` as a gRPC message."""
        stream = self.next_stream
        self.next_stream += 2
        self.sock.sendall(
            frame(HEADERS, END_HEADERS, stream, header_block(call_headers(path)))
            + frame(DATA, END_STREAM if end_stream else 0, stream, grpc_message(message))
        )
        return stream

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def read_until_closed(self, limit: int = 1 << 20) -> bytes:
        """Everything the daemon sends until it closes (or `limit` bytes, or the timeout)."""
        received = bytearray()
        while len(received) < limit:
            try:
                chunk = self.sock.recv(65536)
            except (TimeoutError, ConnectionError):
                break
            if not chunk:
                break
            received += chunk
        return bytes(received)

    def close(self) -> None:
        self.sock.close()
