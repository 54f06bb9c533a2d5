"""The messages of the front-end <-> root channel, one pydantic model each.

A front-end sends what its client asked, and nothing else: one `Call` per
gRPC call, carrying the request as a typed model of the same fields as the
wire message (argv, env, cwd, requested limits, labels, request id, a
path, ...). No model has a field for a tenant, a uid, a root, a landlock
rule, a seccomp profile or a ceiling: the root side knows which tenant a
channel belongs to from the channel itself, and derives every privilege
from its own config for that tenant. A field a model does not declare is a
malformed message (`extra="forbid"`), as is a wrong type (`strict`).

    front-end -> root   Ready, Call (AdminCall), Cancel, Ack, Malformed
    root -> front-end   Hello, Reply, Event, End, Abort, Drain

The admin socket has a front-end of its own, whose channel carries only
the admin operations (`AdminCall`): the root side reads each channel with
its kind's adapter, so neither kind can send the other's calls.

The payload beside a message (`hostcapd.bridge.channel`) is a request's
bytes field (stdin, a file's content) one way, and a reply's serialized
message the other way.

`request.proto(payload)` builds the request message the root side's
servicers take, from validated values (the root side never parses the
protobuf wire format); `request_model(method, message)` is the front-end's
converse.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, ClassVar, Literal

from google.protobuf import message as protobuf_message
from hostcap_proto.v1 import admin_pb2, common_pb2, fs_pb2, host_pb2, process_pb2
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, model_validator

U64 = Annotated[int, Field(ge=0, lt=1 << 64)]
U32 = Annotated[int, Field(ge=0, lt=1 << 32)]
I32 = Annotated[int, Field(ge=-(1 << 31), lt=1 << 31)]
CallId = Annotated[int, Field(gt=0, lt=1 << 63)]


class Message(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid", frozen=True)


# --- the requests: the wire messages' fields, typed --------------------------


class Request(Message):
    #: The request message's class, and the field the payload fills.
    proto_class: ClassVar[type[protobuf_message.Message]]
    payload_field: ClassVar[str | None] = None

    def proto(self, payload: bytes) -> protobuf_message.Message:
        """The request message, built from these validated values; ValueError
        (or TypeError) for a value protobuf refuses."""
        fields = self.model_dump(exclude={"method", "payload"}, exclude_none=True)
        if self.payload_field is not None and getattr(self, "payload", False):
            fields[self.payload_field] = payload
        return self.proto_class(**fields)

    @classmethod
    def from_proto(cls, method: str, message: protobuf_message.Message) -> tuple[Request, bytes]:
        """The model of a parsed request message and its payload."""
        values: dict[str, Any] = {"method": method}
        payload = b""
        for field in message.DESCRIPTOR.fields:
            name = field.name
            if name == cls.payload_field:
                if field.has_presence and not message.HasField(name):
                    continue
                payload = getattr(message, name)
                values["payload"] = True
                continue
            if field.has_presence and not message.HasField(name):
                continue
            value = getattr(message, name)
            if field.message_type is not None and field.message_type.GetOptions().map_entry:
                value = dict(value)
            elif field.message_type is not None and not field.is_repeated:
                value = {
                    f.name: getattr(value, f.name)
                    for f in field.message_type.fields
                    if value.HasField(f.name)
                }
            elif field.is_repeated:
                value = list(value)
            values[name] = value
        return cls.model_validate(values), payload


class Limits(Message):
    cpu_seconds: float | None = None
    memory_bytes: U64 | None = None
    wall_seconds: float | None = None
    pids: U32 | None = None
    output_bytes: U64 | None = None
    file_size_bytes: U64 | None = None
    open_files: U32 | None = None
    total_output_bytes: U64 | None = None


class SpawnRequest(Request):
    proto_class = process_pb2.SpawnRequest
    payload_field = "stdin"
    method: Literal["ProcessService.Spawn", "ProcessService.Run"]
    argv: list[str] = []
    cwd: str = ""
    env: dict[str, str] = {}
    #: stdin is the payload (unset: /dev/null).
    payload: bool = False
    limits: Limits | None = None
    request_id: str = ""
    dry_run: bool = False
    labels: dict[str, str] = {}


class SignalRequest(Request):
    proto_class = process_pb2.SignalRequest
    method: Literal["ProcessService.Signal"]
    spawn_id: str | None = None
    pid: I32 | None = None
    signal: I32 = 0

    @model_validator(mode="after")
    def _one_target(self) -> SignalRequest:
        if self.spawn_id is not None and self.pid is not None:
            raise ValueError("a signal has one target: spawn_id or pid")
        return self


class ListRequest(Request):
    proto_class = process_pb2.ListRequest
    method: Literal["ProcessService.List"]


class CapabilitiesRequest(Request):
    proto_class = host_pb2.CapabilitiesRequest
    method: Literal["HostService.Capabilities"]


class ReadFileRequest(Request):
    proto_class = fs_pb2.ReadFileRequest
    method: Literal["FsService.ReadFile"]
    path: str = ""
    offset: U64 = 0
    max_bytes: U64 | None = None


class WriteFileRequest(Request):
    proto_class = fs_pb2.WriteFileRequest
    payload_field = "data"
    method: Literal["FsService.WriteFile"]
    path: str = ""
    #: data is the payload.
    payload: bool = False
    create_parents: bool = False
    exclusive: bool = False
    expected_sha256: str | None = None
    labels: dict[str, str] = {}
    request_id: str = ""


class ListDirectoryRequest(Request):
    proto_class = fs_pb2.ListDirectoryRequest
    method: Literal["FsService.ListDirectory"]
    path: str = ""
    max_entries: U32 | None = None
    depth: U32 | None = None
    include_hidden: bool = False


class StatRequest(Request):
    proto_class = fs_pb2.StatRequest
    method: Literal["FsService.Stat"]
    path: str = ""


class Timestamp(Message):
    seconds: Annotated[int, Field(ge=-(1 << 63), lt=1 << 63)] = 0
    nanos: Annotated[int, Field(ge=0, lt=1_000_000_000)] = 0


# --- the admin front-end's: only the admin operations ---------------------------


class ListSpawnsRequest(Request):
    proto_class = admin_pb2.ListSpawnsRequest
    method: Literal["AdminService.ListSpawns"]
    tenant: str = ""


class KillRequest(Request):
    proto_class = admin_pb2.KillRequest
    method: Literal["AdminService.Kill"]
    spawn_id: str = ""


class TailAuditRequest(Request):
    proto_class = admin_pb2.TailAuditRequest
    method: Literal["AdminService.TailAudit"]
    lines: U32 = 0
    follow: bool = False


class QueryAuditRequest(Request):
    proto_class = admin_pb2.QueryAuditRequest
    method: Literal["AdminService.QueryAudit"]
    tenant: str = ""
    since: Timestamp | None = None
    until: Timestamp | None = None
    event: str = ""
    outcome: str = ""
    spawn_id: str = ""


class ReloadRequest(Request):
    proto_class = admin_pb2.ReloadRequest
    method: Literal["AdminService.Reload"]


AnyAdminRequest = Annotated[
    ListSpawnsRequest | KillRequest | TailAuditRequest | QueryAuditRequest | ReloadRequest,
    Field(discriminator="method"),
]
ADMIN_REQUESTS: Mapping[str, type[Request]] = {
    "AdminService.ListSpawns": ListSpawnsRequest,
    "AdminService.Kill": KillRequest,
    "AdminService.TailAudit": TailAuditRequest,
    "AdminService.QueryAudit": QueryAuditRequest,
    "AdminService.Reload": ReloadRequest,
}

AnyRequest = Annotated[
    SpawnRequest
    | SignalRequest
    | ListRequest
    | CapabilitiesRequest
    | ReadFileRequest
    | WriteFileRequest
    | ListDirectoryRequest
    | StatRequest,
    Field(discriminator="method"),
]

#: Every method a tenant front-end relays, with its request model.
TENANT_REQUESTS: Mapping[str, type[Request]] = {
    "ProcessService.Spawn": SpawnRequest,
    "ProcessService.Run": SpawnRequest,
    "ProcessService.Signal": SignalRequest,
    "ProcessService.List": ListRequest,
    "HostService.Capabilities": CapabilitiesRequest,
    "FsService.ReadFile": ReadFileRequest,
    "FsService.WriteFile": WriteFileRequest,
    "FsService.ListDirectory": ListDirectoryRequest,
    "FsService.Stat": StatRequest,
}
#: Each kind of front-end's methods: a channel carries only its kind's.
REQUESTS: Mapping[str, Mapping[str, type[Request]]] = {
    "tenant": TENANT_REQUESTS,
    "admin": ADMIN_REQUESTS,
}

# the import keeps common_pb2 (Limits) registered before SpawnRequest is built
_ = common_pb2


# --- front-end -> root ---------------------------------------------------------


class Protection(Message):
    """One protection of the front-end and whether it is in force."""

    name: str
    applied: bool
    reason: str
    required: bool


class Ready(Message):
    """The front-end is confined and its server listens at the bind path.
    (What it says of itself is reported, never relied on: the root side
    trusts no front-end.)"""

    op: Literal["ready"]
    pid: int
    protections: list[Protection] = []


class Call(Message):
    """A call its client made; its payload is the request's bytes field."""

    op: Literal["call"]
    call: CallId
    request: AnyRequest


class AdminCall(Message):
    """A call on the admin socket (the admin front-end's only kind)."""

    op: Literal["call"]
    call: CallId
    request: AnyAdminRequest


class Cancel(Message):
    """The client went away (cancelled, deadline, disconnected)."""

    op: Literal["cancel"]
    call: CallId


class Ack(Message):
    """A streamed event reached the client's connection: send the next."""

    op: Literal["ack"]
    call: CallId


class Malformed(Message):
    """A request the front-end could not parse (for the root's metrics)."""

    op: Literal["malformed"]
    #: One of the channel's methods (the root side checks).
    method: Annotated[str, Field(max_length=64)]


#: The Call class of each kind's channel.
CALLS: Mapping[str, Any] = {"tenant": Call, "admin": AdminCall}

FromFrontend = Annotated[Ready | Call | Cancel | Ack | Malformed, Field(discriminator="op")]
FromAdminFrontend = Annotated[
    Ready | AdminCall | Cancel | Ack | Malformed, Field(discriminator="op")
]
#: What the root side accepts from each kind of front-end.
FROM_FRONTEND: Mapping[str, TypeAdapter[Any]] = {
    "tenant": TypeAdapter(FromFrontend),
    "admin": TypeAdapter(FromAdminFrontend),
}


# --- root -> front-end ---------------------------------------------------------


class Hello(Message):
    """What the front-end serves (the root side's values: trusted there)."""

    op: Literal["hello"]
    #: "tenant" (ProcessService, HostService, FsService) or "admin" (AdminService).
    kind: Literal["tenant", "admin"]
    #: The tenant's name ("admin" for the admin socket's).
    tenant: str
    #: Where to bind, in a directory made for this front-end.
    bind_path: str
    #: The mode the socket file gets (the front-end owns it until root chowns it).
    socket_mode: int
    max_receive: int
    max_send: int
    parent_pid: int
    #: The identity it takes before it serves (the front-end user).
    uid: int
    gid: int


class Reply(Message):
    """A unary call's answer; the payload is the serialized response."""

    op: Literal["reply"]
    call: CallId


class Event(Message):
    """One streamed message of a call; the payload is its serialized bytes."""

    op: Literal["event"]
    call: CallId


class End(Message):
    """A streaming call ended well."""

    op: Literal["end"]
    call: CallId


class Abort(Message):
    """A call ends with this status; the payload is its
    grpc-status-details-bin (the typed ErrorInfo), possibly empty."""

    op: Literal["abort"]
    call: CallId
    code: int
    details: str


class Drain(Message):
    """Report NOT_SERVING, stop taking calls, give calls in flight `grace`
    seconds, then exit."""

    op: Literal["drain"]
    grace: float | None = None
    health_only: bool = False


ToFrontend = Annotated[Hello | Reply | Event | End | Abort | Drain, Field(discriminator="op")]
TO_FRONTEND: TypeAdapter[Any] = TypeAdapter(ToFrontend)
