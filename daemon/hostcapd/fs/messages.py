"""The messages between the daemon and a tenant's fs worker, one msgspec
struct each: the bridge's codec, the fields declared once, here.

The daemon sends a `Hello` first (the worker's settings and the fds it was
handed), then `Request`s; the worker answers each with one `Answer`:
`Refused` (a typed reason) or the request's own reply. On the wire each is
the MessagePack of its struct, tagged by `op`; a field a struct does not
declare, a missing one or one of the wrong type is refused on receipt
(`decode_request` / `decode_answer` raise ProtocolError) and the link is
treated as lost: the worker exits, or the daemon kills and restarts it.

The daemon's fs service still speaks in dicts to its session (the
conversion at its edge is `request_of` and `answer_fields`).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import msgspec
from hostcap_proto.names import RefusalReason

from hostcapd.applied import Applied
from hostcapd.fs.scope import RootSpec


class ProtocolError(Exception):
    """A malformed or oversized frame, or the link closed mid-frame."""


class _Message(msgspec.Struct, frozen=True, forbid_unknown_fields=True, tag_field="op"):
    pass


# --- the daemon's requests ----------------------------------------------------


@dataclass(frozen=True)
class WorkerSettings:
    """Everything the worker needs, as plain values (the hello's)."""

    tenant: str
    roots: tuple[RootSpec, ...]
    uid: int
    gid: int
    follow_symlinks: bool
    protected_paths: tuple[str, ...]
    secret_paths: tuple[str, ...]
    file_mode: int
    dir_mode: int
    umask: int
    max_write_bytes: int
    #: Levels ("required", "best-effort", "off") of the tenant's profile.
    uid_drop: str
    landlock: str
    parent_pid: int
    #: The profile's test hook: protections to treat as unavailable.
    simulate_unavailable: tuple[str, ...] = ()
    #: The tenant's read ceiling: a read the front-end asks directly
    #: (`hostcapd.fs.direct`) is held to it.
    max_read_bytes: int = 0

    def to_hello(self) -> dict[str, Any]:
        """Its fields as plain values (a test passes them on a command line)."""
        return asdict(self)

    @classmethod
    def from_hello(cls, fields: dict[str, Any]) -> WorkerSettings:
        try:
            return msgspec.convert(fields, cls)
        except msgspec.ValidationError as error:
            raise ProtocolError(f"not valid settings: {error}") from None


class HandedOver(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """The fds the daemon opened for the worker (their numbers in it)."""

    root_fds: list[int]
    ruleset_fd: int | None
    #: The landlock decision: applied (pending restrict_self) or why not.
    landlock: Applied


class Hello(_Message, frozen=True, tag="hello"):
    """The worker's settings and what it was handed."""

    settings: WorkerSettings
    handover: HandedOver


class OpenRead(_Message, frozen=True, tag="open_read"):
    path: str


class WritePrepare(_Message, frozen=True, tag="write_prepare"):
    """The content is the frame's data."""

    path: str
    create_parents: bool
    exclusive: bool
    expected_sha256: str | None = None


class WriteCommit(_Message, frozen=True, tag="write_commit"):
    pass


class WriteAbort(_Message, frozen=True, tag="write_abort"):
    pass


class ListDirectory(_Message, frozen=True, tag="list"):
    path: str
    max_entries: int
    depth: int
    include_hidden: bool


class Stat(_Message, frozen=True, tag="stat"):
    path: str


Request = OpenRead | WritePrepare | WriteCommit | WriteAbort | ListDirectory | Stat


# --- the worker's answers -------------------------------------------------------


class Refused(_Message, frozen=True, tag="refused"):
    """The request (or the start) was refused; nothing was done."""

    reason: RefusalReason
    message: str


class Ready(_Message, frozen=True, tag="ready"):
    """The worker is confined and serves."""

    pid: int
    protections: list[Applied]


class Opened(_Message, frozen=True, tag="opened"):
    """The checked file, opened: its fd travels with the frame."""

    path: str
    name: str
    size: int


class Prepared(_Message, frozen=True, tag="prepared"):
    """A write staged, awaiting its commit or abort."""

    path: str
    size: int
    sha256: str
    previous_sha256: str | None
    created: bool


class Done(_Message, frozen=True, tag="done"):
    """A commit or an abort done."""


class Entry(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    name: str
    type: str
    size: int
    mtime: float
    target: str


class Listing(_Message, frozen=True, tag="listing"):
    path: str
    entries: list[Entry]
    truncated: bool


class Statted(_Message, frozen=True, tag="statted"):
    path: str
    type: str
    size: int
    mode: int
    mtime: float
    writable: bool


Answer = Refused | Ready | Opened | Prepared | Done | Listing | Statted

_ENCODER = msgspec.msgpack.Encoder()
_REQUESTS = msgspec.msgpack.Decoder(Request)
_HELLO = msgspec.msgpack.Decoder(Hello)
_ANSWERS = msgspec.msgpack.Decoder(Answer)


def encode(message: msgspec.Struct) -> bytes:
    return _ENCODER.encode(message)


def _decode(decoder: msgspec.msgpack.Decoder[Any], data: bytes | bytearray | memoryview) -> Any:
    try:
        return decoder.decode(data)
    except (msgspec.ValidationError, msgspec.DecodeError) as error:
        raise ProtocolError(f"not a valid message: {error}") from None


def decode_hello(data: bytes | bytearray | memoryview) -> Hello:
    hello: Hello = _decode(_HELLO, data)
    return hello


def decode_request(data: bytes | bytearray | memoryview) -> Request:
    request: Request = _decode(_REQUESTS, data)
    return request


def decode_answer(data: bytes | bytearray | memoryview) -> Answer:
    answer: Answer = _decode(_ANSWERS, data)
    return answer


def request_of(fields: dict[str, Any]) -> Request:
    """The fs service's request (a dict with its `op`), typed; ProtocolError
    if it is none of ours."""
    try:
        request: Request = msgspec.convert(fields, Request)
    except msgspec.ValidationError as error:
        raise ProtocolError(f"not a valid request: {error}") from None
    return request


def answer_fields(answer: Answer) -> dict[str, Any]:
    """An answer's fields, as the fs service reads them."""
    fields: dict[str, Any] = msgspec.to_builtins(answer)
    fields.pop("op", None)
    return fields
