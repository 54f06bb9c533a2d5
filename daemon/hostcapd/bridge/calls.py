"""The requests a front-end relays: one struct per method, the wire
request's fields typed (`hostcapd.bridge.messages` re-exports them).

Each is tagged by its method ("Service.Method") and names its wire message
(`proto`) and the bytes field its payload fills. No struct has a field for
a tenant, a uid, a root, a landlock rule, a seccomp profile or a ceiling:
the root side derives every privilege from its own config. A tenant's
front-end relays only the tenant's methods, the admin socket's only the
admin operations (`REQUESTS`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, ClassVar

import msgspec

from hostcapd.bridge.values import I32, U32, U64, Limits, TerminalSize, Timestamp

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
    stdin_open: bool = False
    tty: TerminalSize | None = None


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


#: The most a WriteStdin carries (TOO_LARGE above it).
MAX_WRITE_STDIN = 64 * 1024


class WriteStdinCall(Request, frozen=True, tag="ProcessService.WriteStdin"):
    proto = "hostcap.v1.WriteStdinRequest"
    payload_field = "data"
    spawn_id: str = ""
    #: data is the payload (its size is the service's to check).
    payload: bool = False
    close: bool = False


class ResizeCall(Request, frozen=True, tag="ProcessService.Resize"):
    proto = "hostcap.v1.ResizeRequest"
    spawn_id: str = ""
    rows: U32 = 0
    cols: U32 = 0


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
    | WriteStdinCall
    | ResizeCall
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
        WriteStdinCall,
        ResizeCall,
        CapabilitiesCall,
        ReadFileCall,
        WriteFileCall,
        ListDirectoryCall,
        StatCall,
    ),
    "admin": _by_method(ListSpawnsCall, KillCall, TailAuditCall, QueryAuditCall, ReloadCall),
}
