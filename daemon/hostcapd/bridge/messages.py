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
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Annotated, Any, ClassVar

import msgspec
from hostcap_proto.limits import BYTES, LIMIT_NAMES, SECONDS, UNITS
from hostcap_proto.names import ProtectionName

#: A uint64: msgspec's bounds are int64, so only the lower one is checked
#: here (its MessagePack decoder takes up to 2^64 - 1).
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

    #: The wire message's full name, and the field the payload fills.
    proto: ClassVar[str]
    payload_field: ClassVar[str | None] = None
    #: A server-streaming method (its answers are `Event`s, then `End`).
    streaming: ClassVar[bool] = False

    @property
    def method(self) -> str:
        return str(self.__struct_config__.tag)


def _limit_type(name: str) -> Any:
    # The wire's widths: seconds are doubles, bytes uint64, counts uint32.
    unit = UNITS[name]
    return float | None if unit == SECONDS else (U64 | None if unit == BYTES else U32 | None)


if TYPE_CHECKING:
    Limits = Value
else:
    #: A spawn's limits: the fields of the one limits model
    #: (`hostcap_proto.limits`), each None when unset.
    Limits = msgspec.defstruct(
        "Limits",
        [(name, _limit_type(name), None) for name in LIMIT_NAMES],
        bases=(Value,),
        module=__name__,
        frozen=True,
    )


class SpawnCall(Request, frozen=True, tag="ProcessService.Spawn"):
    proto = "hostcap.v1.SpawnRequest"
    streaming = True
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
    detached: bool = False
    environment_id: str = ""


class RunCall(SpawnCall, frozen=True, tag="ProcessService.Run"):
    """The same request, for ProcessService.Run."""

    streaming = False


class SignalCall(Request, frozen=True, tag="ProcessService.Signal"):
    proto = "hostcap.v1.SignalRequest"
    spawn_id: str | None = None
    pid: I32 | None = None
    signal: I32 = 0

    def __post_init__(self) -> None:
        if self.spawn_id is not None and self.pid is not None:
            raise ValueError("a signal has one target: spawn_id or pid")


class ListCall(Request, frozen=True, tag="ProcessService.List"):
    proto = "hostcap.v1.ListRequest"


#: The longest ReadOutput wait, in milliseconds.
MAX_WAIT_MS = 30_000


class OpenEnvironmentCall(Request, frozen=True, tag="ProcessService.OpenEnvironment"):
    proto = "hostcap.v1.OpenEnvironmentRequest"
    idle_timeout_seconds: Annotated[float, msgspec.Meta(ge=0)] = 0.0
    lifetime_seconds: Annotated[float, msgspec.Meta(ge=0)] = 0.0
    labels: dict[str, str] = {}


class CloseEnvironmentCall(Request, frozen=True, tag="ProcessService.CloseEnvironment"):
    proto = "hostcap.v1.CloseEnvironmentRequest"
    environment_id: str = ""


class ListEnvironmentsCall(Request, frozen=True, tag="ProcessService.ListEnvironments"):
    proto = "hostcap.v1.ListEnvironmentsRequest"


class ReadOutputCall(Request, frozen=True, tag="ProcessService.ReadOutput"):
    proto = "hostcap.v1.ReadOutputRequest"
    spawn_id: str = ""
    offset: U64 = 0
    wait_ms: Annotated[int, msgspec.Meta(ge=0, le=MAX_WAIT_MS)] = 0


class CapabilitiesCall(Request, frozen=True, tag="HostService.Capabilities"):
    proto = "hostcap.v1.CapabilitiesRequest"


class ReadFileCall(Request, frozen=True, tag="FsService.ReadFile"):
    proto = "hostcap.v1.ReadFileRequest"
    path: str = ""
    offset: U64 = 0
    max_bytes: U64 | None = None


class WriteFileCall(Request, frozen=True, tag="FsService.WriteFile"):
    proto = "hostcap.v1.WriteFileRequest"
    payload_field = "data"
    path: str = ""
    #: data is the payload.
    payload: bool = False
    create_parents: bool = False
    exclusive: bool = False
    expected_sha256: str | None = None
    labels: dict[str, str] = {}
    request_id: str = ""


class ListDirectoryCall(Request, frozen=True, tag="FsService.ListDirectory"):
    proto = "hostcap.v1.ListDirectoryRequest"
    path: str = ""
    max_entries: U32 | None = None
    depth: U32 | None = None
    include_hidden: bool = False


class StatCall(Request, frozen=True, tag="FsService.Stat"):
    proto = "hostcap.v1.StatRequest"
    path: str = ""


# --- the admin front-end's: only the admin operations ---------------------------


class Timestamp(Value, frozen=True):
    seconds: I64 = 0
    nanos: Annotated[int, msgspec.Meta(ge=0, le=999_999_999)] = 0


class ListSpawnsCall(Request, frozen=True, tag="AdminService.ListSpawns"):
    proto = "hostcap.v1.ListSpawnsRequest"
    tenant: str = ""


class KillCall(Request, frozen=True, tag="AdminService.Kill"):
    proto = "hostcap.v1.KillRequest"
    spawn_id: str = ""


class TailAuditCall(Request, frozen=True, tag="AdminService.TailAudit"):
    proto = "hostcap.v1.TailAuditRequest"
    streaming = True
    lines: U32 = 0
    follow: bool = False


class QueryAuditCall(Request, frozen=True, tag="AdminService.QueryAudit"):
    proto = "hostcap.v1.QueryAuditRequest"
    streaming = True
    tenant: str = ""
    since: Timestamp | None = None
    until: Timestamp | None = None
    event: str = ""
    outcome: str = ""
    spawn_id: str = ""


class ReloadCall(Request, frozen=True, tag="AdminService.Reload"):
    proto = "hostcap.v1.ReloadRequest"


TenantRequest = (
    SpawnCall
    | RunCall
    | SignalCall
    | ListCall
    | ReadOutputCall
    | OpenEnvironmentCall
    | CloseEnvironmentCall
    | ListEnvironmentsCall
    | CapabilitiesCall
    | ReadFileCall
    | WriteFileCall
    | ListDirectoryCall
    | StatCall
)
AdminRequest = ListSpawnsCall | KillCall | TailAuditCall | QueryAuditCall | ReloadCall


def _by_method(*classes: type[Request]) -> dict[str, type[Request]]:
    return {str(c.__struct_config__.tag): c for c in classes}


#: Each kind of front-end's methods and their requests: a channel carries
#: only its kind's.
REQUESTS: Mapping[str, Mapping[str, type[Request]]] = {
    "tenant": _by_method(
        SpawnCall,
        RunCall,
        SignalCall,
        ListCall,
        ReadOutputCall,
        OpenEnvironmentCall,
        CloseEnvironmentCall,
        ListEnvironmentsCall,
        CapabilitiesCall,
        ReadFileCall,
        WriteFileCall,
        ListDirectoryCall,
        StatCall,
    ),
    "admin": _by_method(ListSpawnsCall, KillCall, TailAuditCall, QueryAuditCall, ReloadCall),
}


# --- the daemon's answers: the wire's response messages, typed ----------------


class Protection(Value, frozen=True):
    """One protection and whether it is in force (hostcap.v1.Protection): a
    spawn's or a confined helper's (`hostcap_proto.names.ProtectionName`)."""

    name: ProtectionName
    applied: bool
    reason: str
    required: bool


class Answer(
    msgspec.Struct, frozen=True, forbid_unknown_fields=True, omit_defaults=True, tag_field="message"
):
    """A unary call's answer or a streamed message, tagged by the wire
    message's full name (`proto`)."""

    @property
    def proto(self) -> str:
        return str(self.__struct_config__.tag)


class Executable(Value, frozen=True):
    path: str = ""
    device: U64 = 0
    inode: U64 = 0
    sha256: str = ""


class Started(Value, frozen=True):
    spawn_id: str = ""
    pid: I32 = 0
    executable: Executable | None = None
    limits: Limits | None = None
    protections: list[Protection] = []
    cwd: str = ""
    env_names: list[str] = []
    dry_run: bool = False
    attached: bool = False
    request_id: str = ""


class Output(Value, frozen=True):
    #: "STDOUT" or "STDERR".
    stream: str
    data: bytes


class Rusage(Value, frozen=True):
    user_seconds: float = 0.0
    system_seconds: float = 0.0
    max_rss_bytes: U64 = 0
    voluntary_context_switches: U64 = 0
    involuntary_context_switches: U64 = 0
    block_input_ops: U64 = 0
    block_output_ops: U64 = 0


class StreamStats(Value, frozen=True):
    total_bytes: U64 = 0
    kept_bytes: U64 = 0
    dropped_bytes: U64 = 0


class Exited(Value, frozen=True):
    #: An Outcome's name ("EXITED", "TIMEOUT", ...).
    outcome: str
    exit_code: I32 | None = None
    signal: I32 = 0
    signal_name: str = ""
    message: str = ""
    failed_step: str = ""
    errno: I32 = 0
    rusage: Rusage | None = None
    peak_memory_bytes: U64 | None = None
    duration_seconds: float = 0.0
    stdout: StreamStats | None = None
    stderr: StreamStats | None = None
    oom_kills: U32 = 0


class SpawnEvent(Answer, frozen=True, tag="hostcap.v1.SpawnEvent"):
    """One of the three (the front-end builds an output's wire bytes itself)."""

    started: Started | None = None
    output: Output | None = None
    exited: Exited | None = None


class RunResult(Answer, frozen=True, tag="hostcap.v1.RunResult"):
    started: Started | None = None
    stdout: bytes = b""
    stderr: bytes = b""
    exited: Exited | None = None


class SignalResponse(Answer, frozen=True, tag="hostcap.v1.SignalResponse"):
    spawn_id: str = ""


class SpawnInfo(Value, frozen=True):
    spawn_id: str = ""
    tenant: str = ""
    pid: I32 = 0
    argv: list[str] = []
    age_seconds: float = 0.0
    limits: Limits | None = None
    labels: dict[str, str] = {}
    request_id: str = ""
    detached: bool = False
    environment_id: str = ""


class ListResponse(Answer, frozen=True, tag="hostcap.v1.ListResponse"):
    spawns: list[SpawnInfo] = []


class EnvironmentInfo(Answer, frozen=True, tag="hostcap.v1.EnvironmentInfo"):
    environment_id: str = ""
    tenant: str = ""
    idle_timeout_seconds: float = 0.0
    lifetime_seconds: float = 0.0
    age_seconds: float = 0.0
    idle_seconds: float = 0.0
    spawn_ids: list[str] = []
    labels: dict[str, str] = {}


class CloseEnvironmentResponse(Answer, frozen=True, tag="hostcap.v1.CloseEnvironmentResponse"):
    environment_id: str = ""
    spawns_ended: list[str] = []


class EnvironmentEntry(Value, frozen=True):
    """One environment of a list (EnvironmentInfo's fields)."""

    environment_id: str = ""
    tenant: str = ""
    idle_timeout_seconds: float = 0.0
    lifetime_seconds: float = 0.0
    age_seconds: float = 0.0
    idle_seconds: float = 0.0
    spawn_ids: list[str] = []
    labels: dict[str, str] = {}


class ListEnvironmentsResponse(Answer, frozen=True, tag="hostcap.v1.ListEnvironmentsResponse"):
    environments: list[EnvironmentEntry] = []


class ReadOutputResponse(Answer, frozen=True, tag="hostcap.v1.ReadOutputResponse"):
    stdout: bytes = b""
    stderr: bytes = b""
    next_offset: U64 = 0
    dropped_bytes: U64 = 0
    running: bool = False
    exited: Exited | None = None


class Root(Value, frozen=True):
    path: str
    #: "READ_ONLY" or "READ_WRITE".
    tier: str
    primary: bool = False


class Network(Value, frozen=True):
    """A tenant's egress (hostcap.v1.Network)."""

    mode: str = "none"
    allow: list[str] = []
    deny: list[str] = []
    resolve: list[str] = []
    proxy_url: str = ""
    max_connections: U32 = 0
    max_bytes: U64 = 0
    connect_timeout_seconds: float = 0.0
    proxy_protections: list[Protection] = []
    proxy_running: bool = False


class CapabilitiesResponse(Answer, frozen=True, tag="hostcap.v1.CapabilitiesResponse"):
    tenant: str = ""
    daemon_version: str = ""
    run_as_uid: U32 = 0
    run_as_gid: U32 = 0
    roots: list[Root] = []
    path: list[str] = []
    allowed_executable_dirs: list[str] = []
    default_limits: Limits | None = None
    ceilings: Limits | None = None
    protections: list[Protection] = []
    landlock_abi: U32 = 0
    cgroup_version: str = ""
    cgroup_controllers: list[str] = []
    memory_limit_mechanism: str = ""
    max_concurrent_spawns: U32 = 0
    env_allowlist: list[str] = []
    max_read_bytes: U64 = 0
    max_write_bytes: U64 = 0
    fs_protections: list[Protection] = []
    socket_families: list[str] = []
    cpu_weight: U32 = 0
    cpu_max_cores: float = 0.0
    disk_budget_bytes: U64 = 0
    disk_budget_mechanism: str = ""
    frontend_protections: list[Protection] = []
    frontend_uid: U32 = 0
    network: Network | None = None


class ReadFileResponse(Answer, frozen=True, tag="hostcap.v1.ReadFileResponse"):
    path: str = ""
    data: bytes = b""
    size: U64 = 0
    offset: U64 = 0
    truncated: bool = False
    is_binary: bool = False
    media_type: str = ""
    sha256: str = ""
    file_sha256: str = ""


class WriteFileResponse(Answer, frozen=True, tag="hostcap.v1.WriteFileResponse"):
    path: str = ""
    size: U64 = 0
    sha256: str = ""
    previous_sha256: str = ""
    created: bool = False


class DirEntry(Value, frozen=True):
    name: str
    #: "REGULAR", "DIRECTORY", "SYMLINK" or "OTHER".
    type: str
    size: U64 = 0
    mtime: float = 0.0
    target: str = ""


class ListDirectoryResponse(Answer, frozen=True, tag="hostcap.v1.ListDirectoryResponse"):
    path: str = ""
    entries: list[DirEntry] = []
    truncated: bool = False


class StatResponse(Answer, frozen=True, tag="hostcap.v1.StatResponse"):
    path: str = ""
    type: str = "FILE_TYPE_UNSPECIFIED"
    size: U64 = 0
    mode: U32 = 0
    mtime: float = 0.0
    writable: bool = False


class ListSpawnsResponse(Answer, frozen=True, tag="hostcap.v1.ListSpawnsResponse"):
    spawns: list[SpawnInfo] = []
    environments: list[EnvironmentEntry] = []


class KillResponse(Answer, frozen=True, tag="hostcap.v1.KillResponse"):
    spawn_id: str = ""
    tenant: str = ""
    exited: Exited | None = None


class AuditLine(Answer, frozen=True, tag="hostcap.v1.AuditLine"):
    json: str = ""


class ReloadResponse(Answer, frozen=True, tag="hostcap.v1.ReloadResponse"):
    added: list[str] = []
    removed: list[str] = []
    changed: list[str] = []


Replied = (
    RunResult
    | SignalResponse
    | ListResponse
    | ReadOutputResponse
    | EnvironmentInfo
    | CloseEnvironmentResponse
    | ListEnvironmentsResponse
    | CapabilitiesResponse
    | ReadFileResponse
    | WriteFileResponse
    | ListDirectoryResponse
    | StatResponse
    | ListSpawnsResponse
    | KillResponse
    | ReloadResponse
)
Streamed = SpawnEvent | AuditLine


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
    """A unary call's answer."""

    call: CallId
    answer: Replied


class Event(Message, frozen=True, tag="event"):
    """One streamed message of a call."""

    call: CallId
    item: Streamed


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
    Hello | Reply | Event | End | Abort | Drain | Serving
)
