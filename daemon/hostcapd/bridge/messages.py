"""The messages of the front-end <-> root channel, one msgspec Struct each.

A front-end sends what its client asked, and nothing else: one `Call` per
gRPC call, carrying the request as a typed struct of the same fields as the
wire message (argv, env, cwd, requested limits, labels, request id, a
path, ...). No struct has a field for a tenant, a uid, a root, a landlock
rule, a seccomp profile or a ceiling: the root side knows which tenant a
channel belongs to from the channel itself, and derives every privilege
from its own config for that tenant. A field a struct does not declare is
a malformed message (`forbid_unknown_fields`), as is a wrong type (msgspec
does not coerce: a bool is not an int, a float not an int).

    front-end -> root   Ready, Call (AdminCall), Cancel, Ack, Malformed
    root -> front-end   Hello, Reply, Event, Chunk, End, Abort, Drain, Serving

The admin socket has a front-end of its own, whose channel carries only
the admin operations (`AdminCall`): the root side reads each channel with
its kind's decoder, so neither kind can send the other's calls.

The payload beside a message (`hostcapd.bridge.channel`) is a request's
bytes field (stdin, a file's content); nothing else carries one. The
daemon's answers are typed too: a `Reply` carries the unary call's answer
struct, an `Event` one streamed struct, an `Abort` a refusal's status code,
reason and message. The structs mirror the wire messages field for field
(by name, enums by their value names) and name their message (`proto`,
"hostcap.v1.RunResult"); only the front-end converts them to and from
protobuf (`hostcapd.frontend.convert`). This module imports neither
protobuf nor grpc: the daemon's root side never loads them.

msgspec with MessagePack, not pydantic with JSON: a front-end's idle RSS is
the cost of a tenant, and the models cost a front-end 1.7 MiB this way
against 14.8 MiB (pydantic's import and its schemas; measured in decision
0027). MessagePack also carries floats whole: a limit of inf or NaN reaches
the root side and is refused there (JSON would carry null, "unset").

The structs live in rooms of their own and are taken from here:
`hostcapd.bridge.values` (the field types and shared nested values),
`hostcapd.bridge.calls` (the requests, `*Call`), `hostcapd.bridge.answers`
(the daemon's answers); this module holds the channel's control messages
and their decoders.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any

import msgspec

from hostcapd.bridge.answers import (
    Answer,
    AuditLine,
    CapabilitiesResponse,
    CloseEnvironmentResponse,
    DirEntry,
    EnvironmentEntry,
    EnvironmentInfo,
    Executable,
    Exited,
    KillResponse,
    ListDirectoryResponse,
    ListEnvironmentsResponse,
    ListResponse,
    ListSpawnsResponse,
    Network,
    Output,
    ReadFileResponse,
    ReadOutputResponse,
    ReloadResponse,
    Replied,
    ResizeResponse,
    Root,
    RunResult,
    Rusage,
    SignalResponse,
    SpawnEvent,
    SpawnInfo,
    Started,
    StatResponse,
    Streamed,
    StreamStats,
    WriteFileResponse,
    WriteStdinResponse,
)
from hostcapd.bridge.calls import (
    MAX_WAIT_MS,
    REQUESTS,
    AdminRequest,
    CapabilitiesCall,
    CloseEnvironmentCall,
    KillCall,
    ListCall,
    ListDirectoryCall,
    ListEnvironmentsCall,
    ListSpawnsCall,
    OpenEnvironmentCall,
    QueryAuditCall,
    ReadFileCall,
    ReadOutputCall,
    ReloadCall,
    Request,
    ResizeCall,
    RunCall,
    SignalCall,
    SpawnCall,
    StatCall,
    TailAuditCall,
    TenantRequest,
    WriteFileCall,
    WriteStdinCall,
)
from hostcapd.bridge.values import (
    I32,
    I64,
    U32,
    U64,
    Caller,
    CallId,
    Limits,
    Protection,
    TerminalSize,
    Text,
    Timestamp,
    Value,
)

__all__ = [
    "CALLS",
    "FROM_FRONTEND",
    "I32",
    "I64",
    "MAX_WAIT_MS",
    "REQUESTS",
    "TO_FRONTEND",
    "U32",
    "U64",
    "Abort",
    "Ack",
    "AdminCall",
    "AdminRequest",
    "Answer",
    "AuditLine",
    "Call",
    "CallId",
    "Caller",
    "Cancel",
    "CapabilitiesCall",
    "CapabilitiesResponse",
    "Chunk",
    "CloseEnvironmentCall",
    "CloseEnvironmentResponse",
    "DirEntry",
    "Drain",
    "End",
    "EnvironmentEntry",
    "EnvironmentInfo",
    "Event",
    "Executable",
    "Exited",
    "Hello",
    "KillCall",
    "KillResponse",
    "Limits",
    "ListCall",
    "ListDirectoryCall",
    "ListDirectoryResponse",
    "ListEnvironmentsCall",
    "ListEnvironmentsResponse",
    "ListResponse",
    "ListSpawnsCall",
    "ListSpawnsResponse",
    "Malformed",
    "Message",
    "Network",
    "OpenEnvironmentCall",
    "Output",
    "Protection",
    "QueryAuditCall",
    "ReadFileCall",
    "ReadFileResponse",
    "ReadOutputCall",
    "ReadOutputResponse",
    "Ready",
    "ReloadCall",
    "ReloadResponse",
    "Replied",
    "Reply",
    "Request",
    "ResizeCall",
    "ResizeResponse",
    "Root",
    "RunCall",
    "RunResult",
    "Rusage",
    "Serving",
    "SignalCall",
    "SignalResponse",
    "SpawnCall",
    "SpawnEvent",
    "SpawnInfo",
    "Started",
    "StatCall",
    "StatResponse",
    "StreamStats",
    "Streamed",
    "TailAuditCall",
    "TenantRequest",
    "TerminalSize",
    "Text",
    "Timestamp",
    "Value",
    "WriteFileCall",
    "WriteFileResponse",
    "WriteStdinCall",
    "WriteStdinResponse",
]


class Message(
    msgspec.Struct, frozen=True, forbid_unknown_fields=True, omit_defaults=True, tag_field="op"
):
    """A channel message: tagged by `op` (the kind of message)."""

    @property
    def op(self) -> str:
        return str(self.__struct_config__.tag)


# --- front-end -> root ---------------------------------------------------------


class Ready(Message, frozen=True, tag="ready"):
    """The front-end is confined and its server listens at the bind path.
    (What it says of itself is reported, never relied on: the root side
    trusts no front-end.)"""

    pid: int
    protections: list[Protection] = []


class Call(Message, frozen=True, tag="call"):
    """A call its client made; its payload is the request's bytes field."""

    call: CallId
    request: TenantRequest
    #: Who made it (SO_PEERCRED of its connection, the front-end's word);
    #: None when the front-end does not take over the accept
    #: (`daemon.record_callers = false`, or served in the root process).
    caller: Caller | None = None


class AdminCall(Message, frozen=True, tag="call"):
    """A call on the admin socket (the admin front-end's only kind)."""

    call: CallId
    request: AdminRequest
    #: As Call's.
    caller: Caller | None = None


class Cancel(Message, frozen=True, tag="cancel"):
    """The client went away (cancelled, deadline, disconnected), or the
    front-end ended the call itself and says why (`reason`, e.g. its output
    budget): the front-end's word, which the root bounds and only quotes."""

    call: CallId
    reason: str = ""


class Ack(Message, frozen=True, tag="ack"):
    """A streamed event reached the client's connection: send the next."""

    call: CallId


class Malformed(Message, frozen=True, tag="malformed"):
    """A request the front-end could not parse (for the root's metrics)."""

    #: One of the channel's methods (the root side checks).
    method: Text


#: The Call struct of each kind's channel.
CALLS: Mapping[str, Any] = {"tenant": Call, "admin": AdminCall}

#: What the root side accepts from each kind of front-end.
FROM_FRONTEND: Mapping[str, msgspec.msgpack.Decoder[Any]] = {
    "tenant": msgspec.msgpack.Decoder(Ready | Call | Cancel | Ack | Malformed),
    "admin": msgspec.msgpack.Decoder(Ready | AdminCall | Cancel | Ack | Malformed),
}


# --- root -> front-end ---------------------------------------------------------


class Hello(Message, frozen=True, tag="hello"):
    """What the front-end serves (the root side's values: trusted there)."""

    #: "tenant" (ProcessService, HostService, FsService) or "admin" (AdminService).
    kind: str
    #: The tenant's name ("(admin)" for the admin socket's).
    tenant: str
    #: Where to bind, relative to its cwd (a directory made for it).
    bind_path: str
    #: The mode the socket file gets (from the umask: chmod is denied to it).
    socket_mode: int
    max_receive: int
    max_send: int
    parent_pid: int
    #: The identity it takes before it serves (the front-end user).
    uid: int
    gid: int
    #: Bytes of its calls' output it may keep at once (Chunk): a call
    #: past it is refused QUOTA_EXCEEDED (0: unbounded).
    output_budget: int = 0
    #: Take over the accept (in a network namespace of its own) and relay
    #: each call's caller (`hostcapd.frontend.peers`); else grpc binds the
    #: socket itself and no caller is known.
    record_callers: bool = False
    #: Its event loop: "asyncio" or "uvloop" (`daemon.frontend_event_loop`).
    event_loop: str = "asyncio"
    #: Where its threads run: "core" (kept on the core it started on) or
    #: "any" (`daemon.frontend_cpu`, `hostcapd.frontend.affinity`).
    cpu: str = "any"


class Reply(Message, frozen=True, tag="reply"):
    """A unary call's answer."""

    call: CallId
    answer: Replied


class Event(Message, frozen=True, tag="event"):
    """One streamed message of a call."""

    call: CallId
    item: Streamed


class Chunk(Message, frozen=True, tag="chunk"):
    """A read of a spawn's output pipe, passed on as it came (the payload is
    its bytes; acknowledged with an `Ack`, as an `Event`). The root side
    keeps none of it, only its counts: the front-end keeps the head and
    tail of each stream within `keep` bytes, and builds the Run's result or
    streams the Spawn's head at once and its tail before its Exited, where
    that memory is the tenant's (decision 0032)."""

    call: CallId
    #: 1 (stdout) or 2 (stderr).
    stream: Annotated[int, msgspec.Meta(ge=1, le=2)]
    #: The stream's output budget (`Limits.output_bytes` as applied).
    keep: U64


class End(Message, frozen=True, tag="end"):
    """A streaming call ended well."""

    call: CallId


class Abort(Message, frozen=True, tag="abort"):
    """A call ends with this status: a gRPC status code, the hostcap reason
    (a `hostcap.v1.ErrorReason` name; empty for a bare status such as
    INTERNAL or UNAVAILABLE, which the front-end sends without an ErrorInfo)
    and the message."""

    call: CallId
    code: int
    message: str
    reason: str = ""


class Drain(Message, frozen=True, tag="drain"):
    """Report NOT_SERVING, stop taking calls, give calls in flight `grace`
    seconds, then exit."""

    grace: float | None = None
    health_only: bool = False


class Serving(Message, frozen=True, tag="serving"):
    """A tenant's health: SERVING when `reason` is empty, else NOT_SERVING
    because the root side would refuse its spawns itself (the reason is
    what `hostcapctl health` prints). `service` "": every service of this
    front-end (a tenant's); else the one health service named (the admin
    socket's `tenant/NAME`)."""

    reason: Annotated[str, msgspec.Meta(max_length=1024)] = ""
    service: Annotated[str, msgspec.Meta(max_length=128)] = ""


TO_FRONTEND: msgspec.msgpack.Decoder[Any] = msgspec.msgpack.Decoder(
    Hello | Reply | Event | Chunk | End | Abort | Drain | Serving
)
