from hostcap_proto.v1 import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class SpawnRequest(_message.Message):
    __slots__ = ("argv", "cwd", "env", "stdin", "limits", "request_id", "dry_run", "labels", "detached", "environment_id", "stdin_open", "tty")
    class EnvEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    class LabelsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    ARGV_FIELD_NUMBER: _ClassVar[int]
    CWD_FIELD_NUMBER: _ClassVar[int]
    ENV_FIELD_NUMBER: _ClassVar[int]
    STDIN_FIELD_NUMBER: _ClassVar[int]
    LIMITS_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    DRY_RUN_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    DETACHED_FIELD_NUMBER: _ClassVar[int]
    ENVIRONMENT_ID_FIELD_NUMBER: _ClassVar[int]
    STDIN_OPEN_FIELD_NUMBER: _ClassVar[int]
    TTY_FIELD_NUMBER: _ClassVar[int]
    argv: _containers.RepeatedScalarFieldContainer[str]
    cwd: str
    env: _containers.ScalarMap[str, str]
    stdin: bytes
    limits: _common_pb2.Limits
    request_id: str
    dry_run: bool
    labels: _containers.ScalarMap[str, str]
    detached: bool
    environment_id: str
    stdin_open: bool
    tty: TerminalSize
    def __init__(self, argv: _Optional[_Iterable[str]] = ..., cwd: _Optional[str] = ..., env: _Optional[_Mapping[str, str]] = ..., stdin: _Optional[bytes] = ..., limits: _Optional[_Union[_common_pb2.Limits, _Mapping]] = ..., request_id: _Optional[str] = ..., dry_run: _Optional[bool] = ..., labels: _Optional[_Mapping[str, str]] = ..., detached: _Optional[bool] = ..., environment_id: _Optional[str] = ..., stdin_open: _Optional[bool] = ..., tty: _Optional[_Union[TerminalSize, _Mapping]] = ...) -> None: ...

class TerminalSize(_message.Message):
    __slots__ = ("rows", "cols")
    ROWS_FIELD_NUMBER: _ClassVar[int]
    COLS_FIELD_NUMBER: _ClassVar[int]
    rows: int
    cols: int
    def __init__(self, rows: _Optional[int] = ..., cols: _Optional[int] = ...) -> None: ...

class Executable(_message.Message):
    __slots__ = ("path", "device", "inode", "sha256")
    PATH_FIELD_NUMBER: _ClassVar[int]
    DEVICE_FIELD_NUMBER: _ClassVar[int]
    INODE_FIELD_NUMBER: _ClassVar[int]
    SHA256_FIELD_NUMBER: _ClassVar[int]
    path: str
    device: int
    inode: int
    sha256: str
    def __init__(self, path: _Optional[str] = ..., device: _Optional[int] = ..., inode: _Optional[int] = ..., sha256: _Optional[str] = ...) -> None: ...

class Started(_message.Message):
    __slots__ = ("spawn_id", "pid", "executable", "limits", "protections", "cwd", "env_names", "dry_run", "attached", "request_id", "stdin_open", "tty")
    SPAWN_ID_FIELD_NUMBER: _ClassVar[int]
    PID_FIELD_NUMBER: _ClassVar[int]
    EXECUTABLE_FIELD_NUMBER: _ClassVar[int]
    LIMITS_FIELD_NUMBER: _ClassVar[int]
    PROTECTIONS_FIELD_NUMBER: _ClassVar[int]
    CWD_FIELD_NUMBER: _ClassVar[int]
    ENV_NAMES_FIELD_NUMBER: _ClassVar[int]
    DRY_RUN_FIELD_NUMBER: _ClassVar[int]
    ATTACHED_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    STDIN_OPEN_FIELD_NUMBER: _ClassVar[int]
    TTY_FIELD_NUMBER: _ClassVar[int]
    spawn_id: str
    pid: int
    executable: Executable
    limits: _common_pb2.Limits
    protections: _containers.RepeatedCompositeFieldContainer[_common_pb2.Protection]
    cwd: str
    env_names: _containers.RepeatedScalarFieldContainer[str]
    dry_run: bool
    attached: bool
    request_id: str
    stdin_open: bool
    tty: TerminalSize
    def __init__(self, spawn_id: _Optional[str] = ..., pid: _Optional[int] = ..., executable: _Optional[_Union[Executable, _Mapping]] = ..., limits: _Optional[_Union[_common_pb2.Limits, _Mapping]] = ..., protections: _Optional[_Iterable[_Union[_common_pb2.Protection, _Mapping]]] = ..., cwd: _Optional[str] = ..., env_names: _Optional[_Iterable[str]] = ..., dry_run: _Optional[bool] = ..., attached: _Optional[bool] = ..., request_id: _Optional[str] = ..., stdin_open: _Optional[bool] = ..., tty: _Optional[_Union[TerminalSize, _Mapping]] = ...) -> None: ...

class Output(_message.Message):
    __slots__ = ("stream", "data")
    STREAM_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    stream: _common_pb2.Stream
    data: bytes
    def __init__(self, stream: _Optional[_Union[_common_pb2.Stream, str]] = ..., data: _Optional[bytes] = ...) -> None: ...

class StreamStats(_message.Message):
    __slots__ = ("total_bytes", "kept_bytes", "dropped_bytes")
    TOTAL_BYTES_FIELD_NUMBER: _ClassVar[int]
    KEPT_BYTES_FIELD_NUMBER: _ClassVar[int]
    DROPPED_BYTES_FIELD_NUMBER: _ClassVar[int]
    total_bytes: int
    kept_bytes: int
    dropped_bytes: int
    def __init__(self, total_bytes: _Optional[int] = ..., kept_bytes: _Optional[int] = ..., dropped_bytes: _Optional[int] = ...) -> None: ...

class Exited(_message.Message):
    __slots__ = ("outcome", "exit_code", "signal", "signal_name", "message", "failed_step", "errno", "rusage", "peak_memory_bytes", "duration_seconds", "stdout", "stderr", "oom_kills", "tty", "input_writes", "input_bytes")
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    EXIT_CODE_FIELD_NUMBER: _ClassVar[int]
    SIGNAL_FIELD_NUMBER: _ClassVar[int]
    SIGNAL_NAME_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    FAILED_STEP_FIELD_NUMBER: _ClassVar[int]
    ERRNO_FIELD_NUMBER: _ClassVar[int]
    RUSAGE_FIELD_NUMBER: _ClassVar[int]
    PEAK_MEMORY_BYTES_FIELD_NUMBER: _ClassVar[int]
    DURATION_SECONDS_FIELD_NUMBER: _ClassVar[int]
    STDOUT_FIELD_NUMBER: _ClassVar[int]
    STDERR_FIELD_NUMBER: _ClassVar[int]
    OOM_KILLS_FIELD_NUMBER: _ClassVar[int]
    TTY_FIELD_NUMBER: _ClassVar[int]
    INPUT_WRITES_FIELD_NUMBER: _ClassVar[int]
    INPUT_BYTES_FIELD_NUMBER: _ClassVar[int]
    outcome: _common_pb2.Outcome
    exit_code: int
    signal: int
    signal_name: str
    message: str
    failed_step: str
    errno: int
    rusage: _common_pb2.Rusage
    peak_memory_bytes: int
    duration_seconds: float
    stdout: StreamStats
    stderr: StreamStats
    oom_kills: int
    tty: TerminalSize
    input_writes: int
    input_bytes: int
    def __init__(self, outcome: _Optional[_Union[_common_pb2.Outcome, str]] = ..., exit_code: _Optional[int] = ..., signal: _Optional[int] = ..., signal_name: _Optional[str] = ..., message: _Optional[str] = ..., failed_step: _Optional[str] = ..., errno: _Optional[int] = ..., rusage: _Optional[_Union[_common_pb2.Rusage, _Mapping]] = ..., peak_memory_bytes: _Optional[int] = ..., duration_seconds: _Optional[float] = ..., stdout: _Optional[_Union[StreamStats, _Mapping]] = ..., stderr: _Optional[_Union[StreamStats, _Mapping]] = ..., oom_kills: _Optional[int] = ..., tty: _Optional[_Union[TerminalSize, _Mapping]] = ..., input_writes: _Optional[int] = ..., input_bytes: _Optional[int] = ...) -> None: ...

class SpawnEvent(_message.Message):
    __slots__ = ("started", "output", "exited")
    STARTED_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_FIELD_NUMBER: _ClassVar[int]
    EXITED_FIELD_NUMBER: _ClassVar[int]
    started: Started
    output: Output
    exited: Exited
    def __init__(self, started: _Optional[_Union[Started, _Mapping]] = ..., output: _Optional[_Union[Output, _Mapping]] = ..., exited: _Optional[_Union[Exited, _Mapping]] = ...) -> None: ...

class RunResult(_message.Message):
    __slots__ = ("started", "stdout", "stderr", "exited")
    STARTED_FIELD_NUMBER: _ClassVar[int]
    STDOUT_FIELD_NUMBER: _ClassVar[int]
    STDERR_FIELD_NUMBER: _ClassVar[int]
    EXITED_FIELD_NUMBER: _ClassVar[int]
    started: Started
    stdout: bytes
    stderr: bytes
    exited: Exited
    def __init__(self, started: _Optional[_Union[Started, _Mapping]] = ..., stdout: _Optional[bytes] = ..., stderr: _Optional[bytes] = ..., exited: _Optional[_Union[Exited, _Mapping]] = ...) -> None: ...

class SignalRequest(_message.Message):
    __slots__ = ("spawn_id", "pid", "signal")
    SPAWN_ID_FIELD_NUMBER: _ClassVar[int]
    PID_FIELD_NUMBER: _ClassVar[int]
    SIGNAL_FIELD_NUMBER: _ClassVar[int]
    spawn_id: str
    pid: int
    signal: int
    def __init__(self, spawn_id: _Optional[str] = ..., pid: _Optional[int] = ..., signal: _Optional[int] = ...) -> None: ...

class SignalResponse(_message.Message):
    __slots__ = ("spawn_id",)
    SPAWN_ID_FIELD_NUMBER: _ClassVar[int]
    spawn_id: str
    def __init__(self, spawn_id: _Optional[str] = ...) -> None: ...

class ListRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class SpawnInfo(_message.Message):
    __slots__ = ("spawn_id", "tenant", "pid", "argv", "age_seconds", "limits", "labels", "request_id", "detached", "environment_id", "stdin_open", "tty")
    class LabelsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    SPAWN_ID_FIELD_NUMBER: _ClassVar[int]
    TENANT_FIELD_NUMBER: _ClassVar[int]
    PID_FIELD_NUMBER: _ClassVar[int]
    ARGV_FIELD_NUMBER: _ClassVar[int]
    AGE_SECONDS_FIELD_NUMBER: _ClassVar[int]
    LIMITS_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    DETACHED_FIELD_NUMBER: _ClassVar[int]
    ENVIRONMENT_ID_FIELD_NUMBER: _ClassVar[int]
    STDIN_OPEN_FIELD_NUMBER: _ClassVar[int]
    TTY_FIELD_NUMBER: _ClassVar[int]
    spawn_id: str
    tenant: str
    pid: int
    argv: _containers.RepeatedScalarFieldContainer[str]
    age_seconds: float
    limits: _common_pb2.Limits
    labels: _containers.ScalarMap[str, str]
    request_id: str
    detached: bool
    environment_id: str
    stdin_open: bool
    tty: TerminalSize
    def __init__(self, spawn_id: _Optional[str] = ..., tenant: _Optional[str] = ..., pid: _Optional[int] = ..., argv: _Optional[_Iterable[str]] = ..., age_seconds: _Optional[float] = ..., limits: _Optional[_Union[_common_pb2.Limits, _Mapping]] = ..., labels: _Optional[_Mapping[str, str]] = ..., request_id: _Optional[str] = ..., detached: _Optional[bool] = ..., environment_id: _Optional[str] = ..., stdin_open: _Optional[bool] = ..., tty: _Optional[_Union[TerminalSize, _Mapping]] = ...) -> None: ...

class ListResponse(_message.Message):
    __slots__ = ("spawns",)
    SPAWNS_FIELD_NUMBER: _ClassVar[int]
    spawns: _containers.RepeatedCompositeFieldContainer[SpawnInfo]
    def __init__(self, spawns: _Optional[_Iterable[_Union[SpawnInfo, _Mapping]]] = ...) -> None: ...

class ReadOutputRequest(_message.Message):
    __slots__ = ("spawn_id", "offset", "wait_ms")
    SPAWN_ID_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    WAIT_MS_FIELD_NUMBER: _ClassVar[int]
    spawn_id: str
    offset: int
    wait_ms: int
    def __init__(self, spawn_id: _Optional[str] = ..., offset: _Optional[int] = ..., wait_ms: _Optional[int] = ...) -> None: ...

class ReadOutputResponse(_message.Message):
    __slots__ = ("stdout", "stderr", "next_offset", "dropped_bytes", "running", "exited")
    STDOUT_FIELD_NUMBER: _ClassVar[int]
    STDERR_FIELD_NUMBER: _ClassVar[int]
    NEXT_OFFSET_FIELD_NUMBER: _ClassVar[int]
    DROPPED_BYTES_FIELD_NUMBER: _ClassVar[int]
    RUNNING_FIELD_NUMBER: _ClassVar[int]
    EXITED_FIELD_NUMBER: _ClassVar[int]
    stdout: bytes
    stderr: bytes
    next_offset: int
    dropped_bytes: int
    running: bool
    exited: Exited
    def __init__(self, stdout: _Optional[bytes] = ..., stderr: _Optional[bytes] = ..., next_offset: _Optional[int] = ..., dropped_bytes: _Optional[int] = ..., running: _Optional[bool] = ..., exited: _Optional[_Union[Exited, _Mapping]] = ...) -> None: ...

class OpenEnvironmentRequest(_message.Message):
    __slots__ = ("idle_timeout_seconds", "lifetime_seconds", "labels")
    class LabelsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    IDLE_TIMEOUT_SECONDS_FIELD_NUMBER: _ClassVar[int]
    LIFETIME_SECONDS_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    idle_timeout_seconds: float
    lifetime_seconds: float
    labels: _containers.ScalarMap[str, str]
    def __init__(self, idle_timeout_seconds: _Optional[float] = ..., lifetime_seconds: _Optional[float] = ..., labels: _Optional[_Mapping[str, str]] = ...) -> None: ...

class EnvironmentInfo(_message.Message):
    __slots__ = ("environment_id", "tenant", "idle_timeout_seconds", "lifetime_seconds", "age_seconds", "idle_seconds", "spawn_ids", "labels")
    class LabelsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    ENVIRONMENT_ID_FIELD_NUMBER: _ClassVar[int]
    TENANT_FIELD_NUMBER: _ClassVar[int]
    IDLE_TIMEOUT_SECONDS_FIELD_NUMBER: _ClassVar[int]
    LIFETIME_SECONDS_FIELD_NUMBER: _ClassVar[int]
    AGE_SECONDS_FIELD_NUMBER: _ClassVar[int]
    IDLE_SECONDS_FIELD_NUMBER: _ClassVar[int]
    SPAWN_IDS_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    environment_id: str
    tenant: str
    idle_timeout_seconds: float
    lifetime_seconds: float
    age_seconds: float
    idle_seconds: float
    spawn_ids: _containers.RepeatedScalarFieldContainer[str]
    labels: _containers.ScalarMap[str, str]
    def __init__(self, environment_id: _Optional[str] = ..., tenant: _Optional[str] = ..., idle_timeout_seconds: _Optional[float] = ..., lifetime_seconds: _Optional[float] = ..., age_seconds: _Optional[float] = ..., idle_seconds: _Optional[float] = ..., spawn_ids: _Optional[_Iterable[str]] = ..., labels: _Optional[_Mapping[str, str]] = ...) -> None: ...

class CloseEnvironmentRequest(_message.Message):
    __slots__ = ("environment_id",)
    ENVIRONMENT_ID_FIELD_NUMBER: _ClassVar[int]
    environment_id: str
    def __init__(self, environment_id: _Optional[str] = ...) -> None: ...

class CloseEnvironmentResponse(_message.Message):
    __slots__ = ("environment_id", "spawns_ended")
    ENVIRONMENT_ID_FIELD_NUMBER: _ClassVar[int]
    SPAWNS_ENDED_FIELD_NUMBER: _ClassVar[int]
    environment_id: str
    spawns_ended: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, environment_id: _Optional[str] = ..., spawns_ended: _Optional[_Iterable[str]] = ...) -> None: ...

class ListEnvironmentsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListEnvironmentsResponse(_message.Message):
    __slots__ = ("environments",)
    ENVIRONMENTS_FIELD_NUMBER: _ClassVar[int]
    environments: _containers.RepeatedCompositeFieldContainer[EnvironmentInfo]
    def __init__(self, environments: _Optional[_Iterable[_Union[EnvironmentInfo, _Mapping]]] = ...) -> None: ...

class WriteStdinRequest(_message.Message):
    __slots__ = ("spawn_id", "data", "close")
    SPAWN_ID_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    CLOSE_FIELD_NUMBER: _ClassVar[int]
    spawn_id: str
    data: bytes
    close: bool
    def __init__(self, spawn_id: _Optional[str] = ..., data: _Optional[bytes] = ..., close: _Optional[bool] = ...) -> None: ...

class WriteStdinResponse(_message.Message):
    __slots__ = ("spawn_id", "bytes_written", "total_bytes", "writes")
    SPAWN_ID_FIELD_NUMBER: _ClassVar[int]
    BYTES_WRITTEN_FIELD_NUMBER: _ClassVar[int]
    TOTAL_BYTES_FIELD_NUMBER: _ClassVar[int]
    WRITES_FIELD_NUMBER: _ClassVar[int]
    spawn_id: str
    bytes_written: int
    total_bytes: int
    writes: int
    def __init__(self, spawn_id: _Optional[str] = ..., bytes_written: _Optional[int] = ..., total_bytes: _Optional[int] = ..., writes: _Optional[int] = ...) -> None: ...

class ResizeRequest(_message.Message):
    __slots__ = ("spawn_id", "rows", "cols")
    SPAWN_ID_FIELD_NUMBER: _ClassVar[int]
    ROWS_FIELD_NUMBER: _ClassVar[int]
    COLS_FIELD_NUMBER: _ClassVar[int]
    spawn_id: str
    rows: int
    cols: int
    def __init__(self, spawn_id: _Optional[str] = ..., rows: _Optional[int] = ..., cols: _Optional[int] = ...) -> None: ...

class ResizeResponse(_message.Message):
    __slots__ = ("spawn_id",)
    SPAWN_ID_FIELD_NUMBER: _ClassVar[int]
    spawn_id: str
    def __init__(self, spawn_id: _Optional[str] = ...) -> None: ...
