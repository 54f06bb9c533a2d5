"""The gRPC status code each refusal reason travels with, as plain values:
importable where gRPC and protobuf are not (the daemon's root side and its fs
worker). The reasons themselves are `hostcap_proto.names.ReasonName` (the one
list); this module is how each travels. `hostcap_proto.errors` builds the
statuses from this table; tests/unit/proto/test_reasons.py keeps it equal to
grpc's code numbers, and tests/unit/proto/test_names.py the reasons to the
proto's `hostcap.v1.ErrorReason`.
"""

from __future__ import annotations

from hostcap_proto.names import REASONS, ReasonName

#: gRPC status code numbers (grpc.StatusCode's values), by name.
CODES: dict[str, int] = {
    "OK": 0,
    "CANCELLED": 1,
    "UNKNOWN": 2,
    "INVALID_ARGUMENT": 3,
    "DEADLINE_EXCEEDED": 4,
    "NOT_FOUND": 5,
    "ALREADY_EXISTS": 6,
    "PERMISSION_DENIED": 7,
    "RESOURCE_EXHAUSTED": 8,
    "FAILED_PRECONDITION": 9,
    "ABORTED": 10,
    "OUT_OF_RANGE": 11,
    "UNIMPLEMENTED": 12,
    "INTERNAL": 13,
    "UNAVAILABLE": 14,
    "DATA_LOSS": 15,
    "UNAUTHENTICATED": 16,
}

#: The name of the gRPC status code each `hostcap.v1.ErrorReason` travels with.
STATUS_CODE_NAME: dict[ReasonName, str] = {
    "PATH_ESCAPES_ROOT": "PERMISSION_DENIED",
    "SYMLINK_REFUSED": "PERMISSION_DENIED",
    "PROTECTED_PATH": "PERMISSION_DENIED",
    "SECRET_PATH": "PERMISSION_DENIED",
    "READ_ONLY_TIER": "PERMISSION_DENIED",
    "NOT_FOUND": "NOT_FOUND",
    "TOO_LARGE": "OUT_OF_RANGE",
    "EXECUTABLE_NOT_FOUND": "NOT_FOUND",
    "EXECUTABLE_NOT_ALLOWED": "PERMISSION_DENIED",
    "ENV_NOT_ALLOWED": "PERMISSION_DENIED",
    "LIMIT_INVALID": "INVALID_ARGUMENT",
    "QUOTA_EXCEEDED": "RESOURCE_EXHAUSTED",
    "CONFLICT": "ABORTED",
    "AUDIT_UNAVAILABLE": "UNAVAILABLE",
    "PROTECTION_UNAVAILABLE": "FAILED_PRECONDITION",
    "INVALID_ARGUMENT": "INVALID_ARGUMENT",
    "ACCESS_DENIED": "PERMISSION_DENIED",
    "STDIN_NOT_OPEN": "FAILED_PRECONDITION",
    "SPAWN_ENDED": "FAILED_PRECONDITION",
    "NOT_A_TERMINAL": "FAILED_PRECONDITION",
}

assert set(STATUS_CODE_NAME) == set(REASONS), "a reason without its status code"
