"""The channel between the daemon and a tenant's egress proxy: one msgspec
MessagePack message per SOCK_SEQPACKET datagram, a spawn's fds beside its
`Listen` (SCM_RIGHTS): its listeners and its tun device. The daemon trusts nothing the proxy says: a report
naming a spawn the daemon did not hand this proxy is refused."""

from __future__ import annotations

import array
import socket
from typing import Literal

import msgspec
from hostcap_proto.names import HelperProtectionName

#: Largest datagram either side sends (a Hello with many rules).
MAX_DATAGRAM = 256 * 1024
_FD_SIZE = array.array("i").itemsize


class Hello(msgspec.Struct, tag="hello", forbid_unknown_fields=True):
    tenant: str
    allow: list[str]
    deny: list[str]
    resolve: dict[str, str]
    max_connections: int
    max_bytes: int
    connect_timeout: float
    parent_pid: int
    uid: int
    gid: int


class Listen(msgspec.Struct, tag="listen", forbid_unknown_fields=True):
    """Serve spawn `spawn_id` (or environment) on the fds beside this
    message, one per `ends` entry, in order: "tcp" a listener to accept on,
    "tun" the tun device its namespace routes everything else into."""

    spawn_id: str
    ends: list[Literal["tcp", "tun"]]


class Forget(msgspec.Struct, tag="forget", forbid_unknown_fields=True):
    """The spawn ended: close its listener and its connections."""

    spawn_id: str


class Ready(msgspec.Struct, tag="ready", forbid_unknown_fields=True):
    #: (name, applied, detail) of each confinement step.
    protections: list[tuple[HelperProtectionName, bool, str]]


class Listening(msgspec.Struct, tag="listening", forbid_unknown_fields=True):
    """The proxy accepts on spawn `spawn_id`'s listener."""

    spawn_id: str


class Connection(msgspec.Struct, tag="connection", forbid_unknown_fields=True):
    """One connection attempt of a spawn, reported when it ends (a refused
    one at once). "tcp", "udp", "icmp" and "ip" are packets past the proxy
    (read on its tun device), always refused."""

    spawn_id: str
    protocol: Literal["connect", "http", "socks5", "tcp", "udp", "icmp", "ip"]
    host: str
    port: int
    address: str
    rule: str
    allowed: bool
    reason: str
    bytes_up: int
    bytes_down: int
    duration_ms: int


ToProxy = Hello | Listen | Forget
FromProxy = Ready | Listening | Connection
_to_proxy = msgspec.msgpack.Decoder(ToProxy)
_from_proxy = msgspec.msgpack.Decoder(FromProxy)
_encoder = msgspec.msgpack.Encoder()


def encode(message: msgspec.Struct) -> bytes:
    return _encoder.encode(message)


def decode_to_proxy(data: bytes) -> ToProxy:
    return _to_proxy.decode(data)


def decode_from_proxy(data: bytes) -> FromProxy:
    """A proxy's report; msgspec.DecodeError / ValidationError on anything else."""
    return _from_proxy.decode(data)


#: The most fds one message carries (a Listen: two listeners and a tun).
MAX_FDS = 4


def send_with_fds(sock: socket.socket, data: bytes, fds: list[int]) -> None:
    sock.sendmsg([data], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))])


def receive(sock: socket.socket) -> tuple[bytes, list[int]]:
    """One datagram and the fds it carried (b"" at EOF)."""
    data, ancdata, _flags, _addr = sock.recvmsg(
        MAX_DATAGRAM, socket.CMSG_SPACE(MAX_FDS * _FD_SIZE), socket.MSG_CMSG_CLOEXEC
    )
    fds: list[int] = []
    for level, kind, payload in ancdata:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            usable = len(payload) - len(payload) % _FD_SIZE
            fds.extend(array.array("i", payload[:usable]))
    return data, fds
