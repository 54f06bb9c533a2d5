from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Optional as _Optional

DESCRIPTOR: _descriptor.FileDescriptor

class Outcome(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    OUTCOME_UNSPECIFIED: _ClassVar[Outcome]
    EXITED: _ClassVar[Outcome]
    SIGNALED: _ClassVar[Outcome]
    TIMEOUT: _ClassVar[Outcome]
    CPU_LIMIT: _ClassVar[Outcome]
    MEMORY_LIMIT: _ClassVar[Outcome]
    OUTPUT_LIMIT: _ClassVar[Outcome]
    PIDS_LIMIT: _ClassVar[Outcome]
    CANCELLED: _ClassVar[Outcome]
    DAEMON_SHUTDOWN: _ClassVar[Outcome]
    SPAWN_FAILED: _ClassVar[Outcome]

class Stream(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    STREAM_UNSPECIFIED: _ClassVar[Stream]
    STDOUT: _ClassVar[Stream]
    STDERR: _ClassVar[Stream]

class ErrorReason(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ERROR_REASON_UNSPECIFIED: _ClassVar[ErrorReason]
    PATH_ESCAPES_ROOT: _ClassVar[ErrorReason]
    SYMLINK_REFUSED: _ClassVar[ErrorReason]
    PROTECTED_PATH: _ClassVar[ErrorReason]
    SECRET_PATH: _ClassVar[ErrorReason]
    READ_ONLY_TIER: _ClassVar[ErrorReason]
    NOT_FOUND: _ClassVar[ErrorReason]
    TOO_LARGE: _ClassVar[ErrorReason]
    EXECUTABLE_NOT_FOUND: _ClassVar[ErrorReason]
    EXECUTABLE_NOT_ALLOWED: _ClassVar[ErrorReason]
    ENV_NOT_ALLOWED: _ClassVar[ErrorReason]
    LIMIT_INVALID: _ClassVar[ErrorReason]
    QUOTA_EXCEEDED: _ClassVar[ErrorReason]
    CONFLICT: _ClassVar[ErrorReason]
    AUDIT_UNAVAILABLE: _ClassVar[ErrorReason]
    PROTECTION_UNAVAILABLE: _ClassVar[ErrorReason]
    INVALID_ARGUMENT: _ClassVar[ErrorReason]
    ACCESS_DENIED: _ClassVar[ErrorReason]
    STDIN_NOT_OPEN: _ClassVar[ErrorReason]
    SPAWN_ENDED: _ClassVar[ErrorReason]
    NOT_A_TERMINAL: _ClassVar[ErrorReason]
OUTCOME_UNSPECIFIED: Outcome
EXITED: Outcome
SIGNALED: Outcome
TIMEOUT: Outcome
CPU_LIMIT: Outcome
MEMORY_LIMIT: Outcome
OUTPUT_LIMIT: Outcome
PIDS_LIMIT: Outcome
CANCELLED: Outcome
DAEMON_SHUTDOWN: Outcome
SPAWN_FAILED: Outcome
STREAM_UNSPECIFIED: Stream
STDOUT: Stream
STDERR: Stream
ERROR_REASON_UNSPECIFIED: ErrorReason
PATH_ESCAPES_ROOT: ErrorReason
SYMLINK_REFUSED: ErrorReason
PROTECTED_PATH: ErrorReason
SECRET_PATH: ErrorReason
READ_ONLY_TIER: ErrorReason
NOT_FOUND: ErrorReason
TOO_LARGE: ErrorReason
EXECUTABLE_NOT_FOUND: ErrorReason
EXECUTABLE_NOT_ALLOWED: ErrorReason
ENV_NOT_ALLOWED: ErrorReason
LIMIT_INVALID: ErrorReason
QUOTA_EXCEEDED: ErrorReason
CONFLICT: ErrorReason
AUDIT_UNAVAILABLE: ErrorReason
PROTECTION_UNAVAILABLE: ErrorReason
INVALID_ARGUMENT: ErrorReason
ACCESS_DENIED: ErrorReason
STDIN_NOT_OPEN: ErrorReason
SPAWN_ENDED: ErrorReason
NOT_A_TERMINAL: ErrorReason

class Limits(_message.Message):
    __slots__ = ("cpu_seconds", "memory_bytes", "wall_seconds", "pids", "output_bytes", "file_size_bytes", "open_files", "total_output_bytes")
    CPU_SECONDS_FIELD_NUMBER: _ClassVar[int]
    MEMORY_BYTES_FIELD_NUMBER: _ClassVar[int]
    WALL_SECONDS_FIELD_NUMBER: _ClassVar[int]
    PIDS_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_BYTES_FIELD_NUMBER: _ClassVar[int]
    FILE_SIZE_BYTES_FIELD_NUMBER: _ClassVar[int]
    OPEN_FILES_FIELD_NUMBER: _ClassVar[int]
    TOTAL_OUTPUT_BYTES_FIELD_NUMBER: _ClassVar[int]
    cpu_seconds: float
    memory_bytes: int
    wall_seconds: float
    pids: int
    output_bytes: int
    file_size_bytes: int
    open_files: int
    total_output_bytes: int
    def __init__(self, cpu_seconds: _Optional[float] = ..., memory_bytes: _Optional[int] = ..., wall_seconds: _Optional[float] = ..., pids: _Optional[int] = ..., output_bytes: _Optional[int] = ..., file_size_bytes: _Optional[int] = ..., open_files: _Optional[int] = ..., total_output_bytes: _Optional[int] = ...) -> None: ...

class Protection(_message.Message):
    __slots__ = ("name", "applied", "reason", "required")
    NAME_FIELD_NUMBER: _ClassVar[int]
    APPLIED_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    REQUIRED_FIELD_NUMBER: _ClassVar[int]
    name: str
    applied: bool
    reason: str
    required: bool
    def __init__(self, name: _Optional[str] = ..., applied: _Optional[bool] = ..., reason: _Optional[str] = ..., required: _Optional[bool] = ...) -> None: ...

class Rusage(_message.Message):
    __slots__ = ("user_seconds", "system_seconds", "max_rss_bytes", "voluntary_context_switches", "involuntary_context_switches", "block_input_ops", "block_output_ops")
    USER_SECONDS_FIELD_NUMBER: _ClassVar[int]
    SYSTEM_SECONDS_FIELD_NUMBER: _ClassVar[int]
    MAX_RSS_BYTES_FIELD_NUMBER: _ClassVar[int]
    VOLUNTARY_CONTEXT_SWITCHES_FIELD_NUMBER: _ClassVar[int]
    INVOLUNTARY_CONTEXT_SWITCHES_FIELD_NUMBER: _ClassVar[int]
    BLOCK_INPUT_OPS_FIELD_NUMBER: _ClassVar[int]
    BLOCK_OUTPUT_OPS_FIELD_NUMBER: _ClassVar[int]
    user_seconds: float
    system_seconds: float
    max_rss_bytes: int
    voluntary_context_switches: int
    involuntary_context_switches: int
    block_input_ops: int
    block_output_ops: int
    def __init__(self, user_seconds: _Optional[float] = ..., system_seconds: _Optional[float] = ..., max_rss_bytes: _Optional[int] = ..., voluntary_context_switches: _Optional[int] = ..., involuntary_context_switches: _Optional[int] = ..., block_input_ops: _Optional[int] = ..., block_output_ops: _Optional[int] = ...) -> None: ...
