"""The wire contract's vocabulary, each concept once: how a spawn ends
(`Outcome`), the sandbox's protections (`ProtectionName`), the reasons a call
is refused (`ReasonName`) and a finished spawn's resource usage (`Rusage`).

Each mirrors hostcap.v1 (common.proto): `Outcome` and `ReasonName` its
enums, `Rusage` its message's fields, `SPAWN_PROTECTIONS` the names its
``Protection.name`` documents. The tests of tests/unit/proto hold each to the
generated code. This module imports nothing of gRPC or protobuf: the fs
worker and the spawner, which never load them, use it too.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Literal, NamedTuple, get_args

# --- how a spawn ends -------------------------------------------------------

#: The names of ``hostcap.v1.Outcome`` (without OUTCOME_UNSPECIFIED).
OutcomeName = Literal[
    "EXITED",
    "SIGNALED",
    "TIMEOUT",
    "CPU_LIMIT",
    "MEMORY_LIMIT",
    "OUTPUT_LIMIT",
    "PIDS_LIMIT",
    "CANCELLED",
    "DAEMON_SHUTDOWN",
    "SPAWN_FAILED",
]
OUTCOMES: tuple[OutcomeName, ...] = get_args(OutcomeName)


class Outcome(StrEnum):
    """Every way a spawn ends; a member's value is its hostcap.v1.Outcome
    name (what the audit log records and the wire's enum spells)."""

    EXITED = "EXITED"
    SIGNALED = "SIGNALED"
    TIMEOUT = "TIMEOUT"
    CPU_LIMIT = "CPU_LIMIT"
    MEMORY_LIMIT = "MEMORY_LIMIT"
    OUTPUT_LIMIT = "OUTPUT_LIMIT"
    PIDS_LIMIT = "PIDS_LIMIT"
    CANCELLED = "CANCELLED"
    DAEMON_SHUTDOWN = "DAEMON_SHUTDOWN"
    SPAWN_FAILED = "SPAWN_FAILED"


assert tuple(o.value for o in Outcome) == OUTCOMES, "Outcome and OutcomeName differ"

# --- protections ------------------------------------------------------------

#: The protections of a spawn's sandbox profile, in the order the daemon
#: reports them (``hostcap.v1.Protection.name``).
SpawnProtectionName = Literal[
    "pid_namespace",
    "net_namespace",
    "ipc_namespace",
    "uts_namespace",
    "mount_namespace",
    "cgroup",
    "landlock",
    "seccomp",
    "rlimits",
    "no_new_privs",
    "uid_drop",
    "exec_by_fd",
    "fs_changes",
]
SPAWN_PROTECTIONS: tuple[SpawnProtectionName, ...] = get_args(SpawnProtectionName)

#: The protections of a confined helper process of the daemon (a front-end,
#: the fs worker), as ``Capabilities.frontend_protections`` reports them.
HelperProtectionName = Literal[
    "uid_drop",
    "not_dumpable",
    "no_new_privs",
    "no_capabilities",
    "landlock",
    "seccomp",
]
HELPER_PROTECTIONS: tuple[HelperProtectionName, ...] = get_args(HelperProtectionName)

#: Any protection name the daemon reports.
ProtectionName = SpawnProtectionName | HelperProtectionName
PROTECTIONS: frozenset[str] = frozenset(SPAWN_PROTECTIONS) | frozenset(HELPER_PROTECTIONS)

# --- refusal reasons --------------------------------------------------------

#: The names of ``hostcap.v1.ErrorReason`` (without ERROR_REASON_UNSPECIFIED):
#: the reason of every refused call, in google.rpc.ErrorInfo.reason.
ReasonName = Literal[
    "PATH_ESCAPES_ROOT",
    "SYMLINK_REFUSED",
    "PROTECTED_PATH",
    "SECRET_PATH",
    "READ_ONLY_TIER",
    "NOT_FOUND",
    "TOO_LARGE",
    "EXECUTABLE_NOT_FOUND",
    "EXECUTABLE_NOT_ALLOWED",
    "ENV_NOT_ALLOWED",
    "LIMIT_INVALID",
    "QUOTA_EXCEEDED",
    "CONFLICT",
    "AUDIT_UNAVAILABLE",
    "PROTECTION_UNAVAILABLE",
    "INVALID_ARGUMENT",
    "ACCESS_DENIED",
    "STDIN_NOT_OPEN",
    "SPAWN_ENDED",
    "NOT_A_TERMINAL",
]
REASONS: tuple[ReasonName, ...] = get_args(ReasonName)

#: Not wire reasons: an unexpected failure (gRPC INTERNAL), a mechanism that
#: is not there right now, such as the fs worker (gRPC UNAVAILABLE), and the
#: admin socket's waits and followers (DEADLINE_EXCEEDED, RESOURCE_EXHAUSTED).
#: They travel as gRPC's own status codes, without an ErrorInfo.
TransportReason = Literal["INTERNAL", "UNAVAILABLE", "DEADLINE_EXCEEDED", "RESOURCE_EXHAUSTED"]
TRANSPORT_REASONS: tuple[TransportReason, ...] = get_args(TransportReason)

#: What the daemon may refuse (or fail) a call with.
RefusalReason = ReasonName | TransportReason
REFUSAL_REASONS: frozenset[str] = frozenset(REASONS) | frozenset(TRANSPORT_REASONS)

# --- resource usage ---------------------------------------------------------


class Rusage(NamedTuple):
    """Resource usage of a finished spawn, from wait4(2); the fields are
    ``hostcap.v1.Rusage``'s (and the audit record's), in its order, so
    ``_asdict()`` is the one mapping to field names."""

    user_seconds: float
    system_seconds: float
    #: Peak resident set size, in bytes (wait4 gives KiB: see `from_wait4`).
    max_rss_bytes: int
    voluntary_context_switches: int
    involuntary_context_switches: int
    block_input_ops: int
    block_output_ops: int

    @classmethod
    def from_wait4(
        cls,
        utime: float,
        stime: float,
        maxrss_kib: int,
        nvcsw: int,
        nivcsw: int,
        inblock: int,
        oublock: int,
    ) -> Rusage:
        """The usage of wait4's ``struct rusage`` (ru_maxrss in KiB)."""
        return cls(utime, stime, maxrss_kib * 1024, nvcsw, nivcsw, inblock, oublock)


#: The usage of a spawn that never ran.
NO_USAGE = Rusage(0.0, 0.0, 0, 0, 0, 0, 0)
