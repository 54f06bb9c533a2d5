"""The wire's refusal reasons and the gRPC status code each travels with, as
plain values: importable where gRPC and protobuf are not (the daemon's root
side and its fs worker). `hostcap_proto.errors` builds the statuses from this
table; tests/unit/proto/test_reasons.py keeps it equal to the proto's
`hostcap.v1.ErrorReason` and to grpc's code numbers.
"""

from __future__ import annotations

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
STATUS_CODE_NAME: dict[str, str] = {
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
}

#: Every reason the daemon may send, by name (ERROR_REASON_UNSPECIFIED aside).
REASONS: frozenset[str] = frozenset(STATUS_CODE_NAME)
