"""The daemon's answers: the wire's response messages as msgspec structs
(`hostcapd.bridge.messages` re-exports them).

A `Reply` carries a unary call's answer (`Replied`), an `Event` one
streamed struct (`Streamed`). Each mirrors its wire message field for
field (by name, enums by their value names) and is tagged by the message's
full name ("hostcap.v1.RunResult"); only the front-end converts them to
protobuf (`hostcapd.frontend.convert`).
"""

from __future__ import annotations

import msgspec

from hostcapd.bridge.values import I32, U32, U64, Limits, Protection, TerminalSize, Value


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
    stdin_open: bool = False
    tty: TerminalSize | None = None


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
    tty: TerminalSize | None = None
    input_writes: U32 = 0
    input_bytes: U64 = 0


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
    stdin_open: bool = False
    tty: TerminalSize | None = None


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


class WriteStdinResponse(Answer, frozen=True, tag="hostcap.v1.WriteStdinResponse"):
    spawn_id: str = ""
    bytes_written: U64 = 0
    total_bytes: U64 = 0
    writes: U32 = 0


class ResizeResponse(Answer, frozen=True, tag="hostcap.v1.ResizeResponse"):
    spawn_id: str = ""


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
    | WriteStdinResponse
    | ResizeResponse
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
