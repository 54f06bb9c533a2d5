"""Reads the tenant's front-end asks of its fs worker directly
(docs/decisions/0034-direct-reads.md).

Three parties, two SOCK_SEQPACKET pairs per tenant, both made by the root
side (`Links`), which keeps the worker's ends to hand to every worker it
starts:

- the read link, front-end <-> worker: the front-end sends `Read` (or a
  `Sync` probe); the worker answers `Content` with the bytes in the same
  datagram, `Refused` with a typed reason, `Relay` (too large for one
  datagram: the front-end relays the call through the root side, as every
  read went before), `Synced`, and `Started` once per worker start (the
  front-end then asks again what it had in flight: a dead worker answers
  nothing);
- the report link, worker <-> root side: `Denied` for each refused read
  whose reason is audited (`AUDITED_READ_REASONS`: the root writes its
  `policy.deny` and answers `Acked`, and only then does the worker answer
  the front-end, so a refusal is in the log before its caller hears of it),
  `Counted` (the reads' results, for the metrics, in batches), and
  `Malformed` (a datagram from the front-end that is none of ours: the root
  treats it as a channel violation).

The worker trusts nothing from the front-end: each datagram is decoded
strictly (one struct, no unknown field, bounded path and integers, no fd,
no data after the header), `max_bytes` is held to the tenant's
`max_read_bytes`, and the path goes through the same checks, as the
tenant, as a relayed read's. A datagram is `>I` (the header's length), the
MessagePack header, and a read's content after it.

This module is the protocol (imported by the front-end, the worker and the
root side); the worker's end is `hostcapd.fs.direct_worker`.
"""

from __future__ import annotations

import socket
import struct
from typing import Annotated

import msgspec

from hostcapd import framing
from hostcapd.bridge.values import Caller
from hostcapd.errors import Refusal

#: The most content one answer carries; a larger read is relayed.
MAX_DATA = 1 << 20
#: A request's longest path (characters): a longer one is relayed.
MAX_PATH = 4096
#: What one request datagram may be, at most (a path of MAX_PATH 4-byte
#: characters and its fields fit).
MAX_REQUEST = 32 << 10
#: What one answer datagram may be, at most.
MAX_ANSWER = MAX_DATA + (64 << 10)
#: Socket buffers of both links (forced by the root side).
BUFFER_BYTES = 8 << 20
#: Reads a front-end has in flight on its link at once; more are relayed.
IN_FLIGHT = 4
#: A read not answered in this time puts the link in doubt: it is relayed.
ANSWER_TIMEOUT_S = 5.0
#: How long the worker waits for the root's record of a refusal.
ACK_TIMEOUT_S = 5.0
#: Counts are sent once the worker idled this long, or at least this often.
COUNT_IDLE_S = 0.05
COUNT_EVERY_S = 0.5
MAX_OFFSET = (1 << 63) - 1


def read_bounds(offset: int, max_bytes: int | None, ceiling: int) -> int:
    """The bytes a read may take: `max_bytes` if given (1 to the tenant's
    read ceiling), else the ceiling; a refusal as the root gave it for an
    offset past 2^63 - 1 or a `max_bytes` out of range. The one check of a
    read's bounds, relayed (the root) or direct (the worker)."""
    if offset > MAX_OFFSET:
        raise Refusal("INVALID_ARGUMENT", "offset is too large")
    if max_bytes is None:
        return ceiling
    if max_bytes == 0 or max_bytes > ceiling:
        raise Refusal(
            "LIMIT_INVALID",
            f"max_bytes must be between 1 and the tenant's read ceiling of {ceiling}",
        )
    return max_bytes


#: Refusals of reads, listings and stats that are worth an audit line (a
#: missing file is not; every refused write is).
AUDITED_READ_REASONS = frozenset(
    {
        "PATH_ESCAPES_ROOT",
        "SYMLINK_REFUSED",
        "SECRET_PATH",
        "PROTECTED_PATH",
        "READ_ONLY_TIER",
        "LIMIT_INVALID",
        "ACCESS_DENIED",
    }
)

Id = Annotated[int, msgspec.Meta(ge=1, le=MAX_OFFSET)]
#: A uint64 (msgspec checks the lower bound; its decoder takes up to 2^64 - 1).
Offset = Annotated[int, msgspec.Meta(ge=0)]
Path = Annotated[str, msgspec.Meta(max_length=MAX_PATH)]
Short = Annotated[str, msgspec.Meta(max_length=1024)]
_HEAD = struct.Struct(">I")


class _Message(msgspec.Struct, frozen=True, forbid_unknown_fields=True, tag_field="op"):
    pass


# --- front-end -> worker --------------------------------------------------------


class Read(_Message, frozen=True, tag="read"):
    id: Id
    path: Path
    offset: Offset = 0
    #: None: the tenant's max_read_bytes.
    max_bytes: Offset | None = None
    #: Who asked, as the front-end says (decision 0033): only recorded.
    caller: Caller | None = None


class Sync(_Message, frozen=True, tag="sync"):
    """A probe: answered `Synced` once everything sent before it is."""

    nonce: Id


# --- worker -> front-end --------------------------------------------------------


class Content(_Message, frozen=True, tag="content"):
    """A read's answer; its bytes follow the header in the datagram."""

    id: Id
    path: str
    size: int
    offset: int
    truncated: bool
    is_binary: bool
    media_type: str
    sha256: str
    file_sha256: str


class Refused(_Message, frozen=True, tag="refused"):
    id: Id
    reason: str
    message: str


class Relay(_Message, frozen=True, tag="relay"):
    """Too large for one datagram: ask the root side."""

    id: Id


class Synced(_Message, frozen=True, tag="synced"):
    nonce: Id


class Started(_Message, frozen=True, tag="started"):
    """A worker (re)started: what was in flight is lost."""

    pid: int


# --- worker <-> root ----------------------------------------------------------


class Denied(_Message, frozen=True, tag="denied"):
    seq: Id
    reason: Short
    message: Short
    path: Path
    caller: Caller | None = None


class Counted(_Message, frozen=True, tag="counted"):
    #: result ("OK" or a reason) -> reads that ended so.
    results: dict[Short, Annotated[int, msgspec.Meta(ge=1, le=1 << 40)]]


class Malformed(_Message, frozen=True, tag="malformed"):
    what: Short
    #: The link's generation the worker serves (`Links.generation`).
    generation: int


class Acked(_Message, frozen=True, tag="acked"):
    seq: Id


Request = Read | Sync
Answer = Content | Refused | Relay | Synced | Started
Report = Denied | Counted | Malformed

_ENCODER = msgspec.msgpack.Encoder()
REQUESTS: msgspec.msgpack.Decoder[Request] = msgspec.msgpack.Decoder(Request)
ANSWERS: msgspec.msgpack.Decoder[Answer] = msgspec.msgpack.Decoder(Answer)
REPORTS: msgspec.msgpack.Decoder[Report] = msgspec.msgpack.Decoder(Report)
ACKS: msgspec.msgpack.Decoder[Acked] = msgspec.msgpack.Decoder(Acked)


def encode(message: msgspec.Struct) -> bytes:
    """A datagram without data: its head and header."""
    body = _ENCODER.encode(message)
    return _HEAD.pack(len(body)) + body


def split(datagram: bytes | bytearray | memoryview) -> tuple[memoryview, memoryview]:
    """(header, data) of a datagram; ValueError if its head lies."""
    view = memoryview(datagram)
    if len(view) < _HEAD.size:
        raise ValueError("a datagram shorter than its head")
    (size,) = _HEAD.unpack_from(view)
    if size > len(view) - _HEAD.size:
        raise ValueError("a header longer than its datagram")
    return view[_HEAD.size : _HEAD.size + size], view[_HEAD.size + size :]


def pair() -> tuple[socket.socket, socket.socket]:
    return framing.socketpair(socket.SOCK_SEQPACKET, BUFFER_BYTES)


# --- the root side's sockets ------------------------------------------------------


class Links:
    """A tenant's two links, as the root side holds them: the worker's ends
    (handed to each worker it starts), its own end of the reports, and the
    front-end's end of the read link until a front-end takes it.

    Each front-end start after the first gets a new read link
    (`for_frontend` says so: the worker must then be restarted with its
    new end); the generation counts them."""

    def __init__(self) -> None:
        self.frontend, self.worker = pair()
        self.root, self.worker_reports = pair()
        self.generation = 1
        self._given = False

    def worker_fds(self) -> tuple[int, int]:
        return self.worker.fileno(), self.worker_reports.fileno()

    def for_frontend(self) -> tuple[socket.socket, bool]:
        """The read link's front-end end for a front-end about to start
        (the caller closes it once the process has it), and whether it is
        new (then the running worker holds the old one: restart it)."""
        renewed = self._given
        if renewed:
            self.worker.close()
            self.frontend, self.worker = pair()
            self.generation += 1
        self._given = True
        given = self.frontend
        return given, renewed

    def close(self) -> None:
        for s in (self.frontend, self.worker, self.root, self.worker_reports):
            s.close()
