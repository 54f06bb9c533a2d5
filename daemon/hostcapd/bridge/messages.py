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
    root -> front-end   Hello, Reply, Event, End, Abort, Drain, Serving

The admin socket has a front-end of its own, whose channel carries only
the admin operations (`AdminCall`): the root side reads each channel with
its kind's decoder, so neither kind can send the other's calls.

The payload beside a message (`hostcapd.bridge.channel`) is a request's
bytes field (stdin, a file's content) one way, and a reply's serialized
message the other way.

`request.proto(payload)` builds the request message the root side's
servicers take, from validated values (the root side never parses the
protobuf wire format); `Request.from_proto(message)` is the
front-end's converse.

msgspec with MessagePack, not pydantic with JSON: a front-end's idle RSS is
the cost of a tenant, and the models cost a front-end 1.7 MiB this way
against 14.8 MiB (pydantic's import and its schemas; measured in decision
0027). MessagePack also carries floats whole: a limit of inf or NaN reaches
the root side and is refused there (JSON would carry null, "unset").
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, ClassVar

import msgspec
from google.protobuf import message as protobuf_message
from hostcap_proto.v1 import admin_pb2, fs_pb2, host_pb2, process_pb2

#: A uint64: msgspec's bounds are int64, so only the lower one is checked
#: here (its MessagePack decoder takes up to 2^64 - 1; protobuf checks the
#: upper one when the root side builds the request).
U64 = Annotated[int, msgspec.Meta(ge=0)]
U32 = Annotated[int, msgspec.Meta(ge=0, le=(1 << 32) - 1)]
I32 = Annotated[int, msgspec.Meta(ge=-(1 << 31), le=(1 << 31) - 1)]
I64 = Annotated[int, msgspec.Meta(ge=-(1 << 63), le=(1 << 63) - 1)]
CallId = Annotated[int, msgspec.Meta(gt=0, le=(1 << 63) - 1)]
Text = Annotated[str, msgspec.Meta(max_length=64)]


class Message(
    msgspec.Struct, frozen=True, forbid_unknown_fields=True, omit_defaults=True, tag_field="op"
):
    """A channel message: tagged by `op` (the kind of message)."""

    @property
    def op(self) -> str:
        return str(self.__struct_config__.tag)


class Value(msgspec.Struct, frozen=True, forbid_unknown_fields=True, omit_defaults=True):
    """A nested value of a request (limits, a timestamp, a protection)."""


# --- the requests: the wire messages' fields, typed --------------------------


class Request(
    msgspec.Struct, frozen=True, forbid_unknown_fields=True, omit_defaults=True, tag_field="method"
):
    """A request, tagged by its method ("Service.Method")."""

    #: The request message's class, and the field the payload fills.
    proto_class: ClassVar[type[protobuf_message.Message]]
    payload_field: ClassVar[str | None] = None

    @property
    def method(self) -> str:
        return str(self.__struct_config__.tag)

    def proto(self, payload: bytes) -> protobuf_message.Message:
        """The request message, built from these validated values; ValueError
        (or TypeError) for a value protobuf refuses."""
        fields = _present(msgspec.to_builtins(self))
        fields.pop("method", None)
        if fields.pop("payload", False) and self.payload_field is not None:
            fields[self.payload_field] = payload
        return self.proto_class(**fields)

    @classmethod
    def from_proto(cls, message: protobuf_message.Message) -> tuple[Request, bytes]:
        """The struct of a parsed request message and its payload; raises
        msgspec.ValidationError for a value the struct refuses."""
        values: dict[str, Any] = {}
        payload = b""
        for field in message.DESCRIPTOR.fields:
            name = field.name
            if field.has_presence and not message.HasField(name):
                continue
            value = getattr(message, name)
            if name == cls.payload_field:
                payload, values["payload"] = value, True
            elif field.message_type is not None and field.message_type.GetOptions().map_entry:
                values[name] = dict(value)
            elif field.message_type is not None and not field.is_repeated:
                values[name] = {
                    f.name: getattr(value, f.name)
                    for f in field.message_type.fields
                    if not f.has_presence or value.HasField(f.name)
                }
            elif field.is_repeated:
                values[name] = list(value)
            else:
                values[name] = value
        return msgspec.convert(values, cls), payload


def _present(value: Any) -> Any:
    """`value` without None entries (unset optional fields), recursively."""
    if isinstance(value, dict):
        return {k: _present(v) for k, v in value.items() if v is not None}
    return value


class Limits(Value, frozen=True):
    cpu_seconds: float | None = None
    memory_bytes: U64 | None = None
    wall_seconds: float | None = None
    pids: U32 | None = None
    output_bytes: U64 | None = None
    file_size_bytes: U64 | None = None
    open_files: U32 | None = None
    total_output_bytes: U64 | None = None


class SpawnRequest(Request, frozen=True, tag="ProcessService.Spawn"):
    proto_class = process_pb2.SpawnRequest
    payload_field = "stdin"
    argv: list[str] = []
    cwd: str = ""
    env: dict[str, str] = {}
    #: stdin is the payload (unset: /dev/null).
    payload: bool = False
    limits: Limits | None = None
    request_id: str = ""
    dry_run: bool = False
    labels: dict[str, str] = {}


class RunRequest(SpawnRequest, frozen=True, tag="ProcessService.Run"):
    """The same request, for ProcessService.Run."""


class SignalRequest(Request, frozen=True, tag="ProcessService.Signal"):
    proto_class = process_pb2.SignalRequest
    spawn_id: str | None = None
    pid: I32 | None = None
    signal: I32 = 0

    def __post_init__(self) -> None:
        if self.spawn_id is not None and self.pid is not None:
            raise ValueError("a signal has one target: spawn_id or pid")


class ListRequest(Request, frozen=True, tag="ProcessService.List"):
    proto_class = process_pb2.ListRequest


class CapabilitiesRequest(Request, frozen=True, tag="HostService.Capabilities"):
    proto_class = host_pb2.CapabilitiesRequest


class ReadFileRequest(Request, frozen=True, tag="FsService.ReadFile"):
    proto_class = fs_pb2.ReadFileRequest
    path: str = ""
    offset: U64 = 0
    max_bytes: U64 | None = None


class WriteFileRequest(Request, frozen=True, tag="FsService.WriteFile"):
    proto_class = fs_pb2.WriteFileRequest
    payload_field = "data"
    path: str = ""
    #: data is the payload.
    payload: bool = False
    create_parents: bool = False
    exclusive: bool = False
    expected_sha256: str | None = None
    labels: dict[str, str] = {}
    request_id: str = ""


class ListDirectoryRequest(Request, frozen=True, tag="FsService.ListDirectory"):
    proto_class = fs_pb2.ListDirectoryRequest
    path: str = ""
    max_entries: U32 | None = None
    depth: U32 | None = None
    include_hidden: bool = False


class StatRequest(Request, frozen=True, tag="FsService.Stat"):
    proto_class = fs_pb2.StatRequest
    path: str = ""


# --- the admin front-end's: only the admin operations ---------------------------


class Timestamp(Value, frozen=True):
    seconds: I64 = 0
    nanos: Annotated[int, msgspec.Meta(ge=0, le=999_999_999)] = 0


class ListSpawnsRequest(Request, frozen=True, tag="AdminService.ListSpawns"):
    proto_class = admin_pb2.ListSpawnsRequest
    tenant: str = ""


class KillRequest(Request, frozen=True, tag="AdminService.Kill"):
    proto_class = admin_pb2.KillRequest
    spawn_id: str = ""


class TailAuditRequest(Request, frozen=True, tag="AdminService.TailAudit"):
    proto_class = admin_pb2.TailAuditRequest
    lines: U32 = 0
    follow: bool = False


class QueryAuditRequest(Request, frozen=True, tag="AdminService.QueryAudit"):
    proto_class = admin_pb2.QueryAuditRequest
    tenant: str = ""
    since: Timestamp | None = None
    until: Timestamp | None = None
    event: str = ""
    outcome: str = ""
    spawn_id: str = ""


class ReloadRequest(Request, frozen=True, tag="AdminService.Reload"):
    proto_class = admin_pb2.ReloadRequest


TenantRequest = (
    SpawnRequest
    | RunRequest
    | SignalRequest
    | ListRequest
    | CapabilitiesRequest
    | ReadFileRequest
    | WriteFileRequest
    | ListDirectoryRequest
    | StatRequest
)
AdminRequest = (
    ListSpawnsRequest | KillRequest | TailAuditRequest | QueryAuditRequest | ReloadRequest
)


def _by_method(*classes: type[Request]) -> dict[str, type[Request]]:
    return {str(c.__struct_config__.tag): c for c in classes}


#: Each kind of front-end's methods and their requests: a channel carries
#: only its kind's.
REQUESTS: Mapping[str, Mapping[str, type[Request]]] = {
    "tenant": _by_method(
        SpawnRequest,
        RunRequest,
        SignalRequest,
        ListRequest,
        CapabilitiesRequest,
        ReadFileRequest,
        WriteFileRequest,
        ListDirectoryRequest,
        StatRequest,
    ),
    "admin": _by_method(
        ListSpawnsRequest, KillRequest, TailAuditRequest, QueryAuditRequest, ReloadRequest
    ),
}


# --- front-end -> root ---------------------------------------------------------


class Protection(Value, frozen=True):
    """One protection of the front-end and whether it is in force."""

    name: str
    applied: bool
    reason: str
    required: bool


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


class AdminCall(Message, frozen=True, tag="call"):
    """A call on the admin socket (the admin front-end's only kind)."""

    call: CallId
    request: AdminRequest


class Cancel(Message, frozen=True, tag="cancel"):
    """The client went away (cancelled, deadline, disconnected)."""

    call: CallId


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


class Reply(Message, frozen=True, tag="reply"):
    """A unary call's answer; the payload is the serialized response."""

    call: CallId


class Event(Message, frozen=True, tag="event"):
    """One streamed message of a call; the payload is its serialized bytes."""

    call: CallId


class End(Message, frozen=True, tag="end"):
    """A streaming call ended well."""

    call: CallId


class Abort(Message, frozen=True, tag="abort"):
    """A call ends with this status; the payload is its
    grpc-status-details-bin (the typed ErrorInfo), possibly empty."""

    call: CallId
    code: int
    details: str


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
    Hello | Reply | Event | End | Abort | Drain | Serving
)
