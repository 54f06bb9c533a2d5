"""The typed error taxonomy of a tool dispatch.

Every error a dispatch raises is a `ToolDispatchError`: it carries the run
error `code` it maps to (`tool_failed`, `tool_denied`, `tool_unavailable`,
`cancelled`), whether it is `recoverable` (safe to feed back to the model
within the turn), whether it is `retryable` (a transient condition: a fresh
retry of the node may succeed) and, for denials, a `reason` from a closed
set. The two flags are distinct: `recoverable` is the stricter, within-turn
one; a denial is never `retryable`, and exactly two denials are
`recoverable` (the seed's scope denials: `media_scope_denied` and the fs
arm's root escape). Messages are
secret-free: they name a tool id or an argument name, never an argument
value, a resolved path or a host's own message.

A host arm reports a refusal as a `HostError` carrying the daemon's wire
reason (`PATH_ESCAPES_ROOT`, ...); `from_host_error` maps it onto the
taxonomy with the table `HOST_REASONS`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import ClassVar, Literal, get_args

from hostcap_proto.names import REASONS, ReasonName

from hostcap.ids import utf16_sorted

ErrorCode = Literal["tool_failed", "tool_denied", "tool_unavailable", "cancelled"]

#: Why the engine's own guardrails refused a call (`ToolPolicyError.reason`).
ToolPolicyDenyReason = Literal[
    "provider_executed",
    "not_granted",
    "command_not_allowed",
    "domain_not_allowed",
    "insecure_url",
    "gate_required",
    "media_scope_denied",
    "mode_denied",
    "unsafe_repository",
    "action_not_declared",
    "egress_rule_denied",
]
POLICY_DENY_REASONS: frozenset[str] = frozenset(ToolPolicyDenyReason.__args__)  # type: ignore[attr-defined]

#: Why the interactive approval refused a call (`ToolDeniedByUserError.reason`).
UserDenyReason = Literal["user_rejected", "no_approval_hook", "approval_error"]
USER_DENY_REASONS: frozenset[str] = frozenset(UserDenyReason.__args__)  # type: ignore[attr-defined]

#: The arms of a ToolHost, plus the engine delegate `invoke_agent` uses.
Arm = Literal["process", "fs", "egress", "os", "mcp", "output_store", "invoke_agent"]


class ToolDispatchError(Exception):
    """Base of every error a dispatch raises.

    `code` is the run error code, `recoverable` says whether the error may
    be fed back to the model as an error result within the turn (only the
    two scope denials, and failures of idempotent reads), `retryable`
    whether a fresh retry of the node may succeed (a transient host
    condition: the daemon restarting or unreachable, a quota used up, a
    host failure with no deterministic reason; never a denial), and
    `loop_correctable` whether the agent loop should let the model correct
    its call (an unknown tool, invalid arguments).
    """

    code: ClassVar[ErrorCode] = "tool_failed"
    loop_correctable: ClassVar[bool] = False

    def __init__(
        self,
        message: str,
        *,
        tool_id: str | None,
        recoverable: bool = False,
        retryable: bool = False,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.tool_id = tool_id
        self.recoverable = recoverable
        self.retryable = retryable

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}({self.message!r}, code={self.code!r}, "
            f"recoverable={self.recoverable}, retryable={self.retryable})"
        )


class UnknownToolError(ToolDispatchError):
    """The call names no registered tool (exact match only; never a nearest name)."""

    code: ClassVar[ErrorCode] = "tool_failed"
    loop_correctable: ClassVar[bool] = True

    def __init__(self, name: str, available: Iterable[str]) -> None:
        self.available = tuple(utf16_sorted(available))
        shown = (
            name
            if len(name) <= 64 and name.isprintable()
            else name[:64].encode("unicode_escape").decode()
        )
        super().__init__(
            f"unknown tool {shown!r}; available tools: {', '.join(self.available) or '(none)'}",
            tool_id=None,
        )


class ToolPolicyError(ToolDispatchError):
    """A guardrail or grant of the engine refused the call before any side effect."""

    code: ClassVar[ErrorCode] = "tool_denied"

    _TEXT: ClassVar[Mapping[str, str]] = {
        "provider_executed": "a provider-executed tool call is never dispatched",
        "not_granted": "the tool is not granted to this node",
        "command_not_allowed": "the command is not on the allowed commands list",
        "domain_not_allowed": "the host is not on the allowed domains list",
        "insecure_url": "only https URLs are allowed",
        "gate_required": "the tool requires a human-gate approval",
        "media_scope_denied": "the media is outside the allowed scope",
        "mode_denied": "the active contract mode does not permit this tool",
        "unsafe_repository": "the repository's config or attributes name a program git would run",
        "action_not_declared": "the tool's declared plan-safe actions do not include this effect",
        "egress_rule_denied": "the host's egress rules for this tenant refused the destination",
    }

    def __init__(
        self, reason: ToolPolicyDenyReason, *, tool_id: str | None, detail: str | None = None
    ) -> None:
        if reason not in POLICY_DENY_REASONS:
            raise ValueError(f"unknown policy deny reason {reason!r}")
        self.reason: ToolPolicyDenyReason = reason
        #: What exactly was refused, when the reason alone does not say (no values).
        self.detail = detail
        suffix = f": {detail}" if detail else ""
        # Only a scope denial is safe to feed back (refused before any effect, and
        # the model can adapt to an in-bounds target).
        super().__init__(
            f"{tool_id or 'tool call'}: {self._TEXT[reason]} ({reason}){suffix}",
            tool_id=tool_id,
            recoverable=reason == "media_scope_denied",
        )


class ToolDeniedByUserError(ToolDispatchError):
    """The interactive approval refused the call: rejected, no hook, or the hook failed."""

    code: ClassVar[ErrorCode] = "tool_denied"

    _TEXT: ClassVar[Mapping[str, str]] = {
        "user_rejected": "the call was rejected",
        "no_approval_hook": "the call needs approval and no approval hook is wired",
        "approval_error": "approval could not be obtained",
    }

    def __init__(self, reason: UserDenyReason, *, tool_id: str, label: str | None = None) -> None:
        if reason not in USER_DENY_REASONS:
            raise ValueError(f"unknown user deny reason {reason!r}")
        self.reason: UserDenyReason = reason
        #: A display-safe label the approver gave (e.g. "ask mode is read-only").
        self.label = label
        suffix = f": {label}" if label else ""
        super().__init__(f"{tool_id}: {self._TEXT[reason]} ({reason}){suffix}", tool_id=tool_id)


class ToolArgsInvalidError(ToolDispatchError):
    """The effective arguments failed validation or the secret-taint check."""

    code: ClassVar[ErrorCode] = "tool_failed"
    loop_correctable: ClassVar[bool] = True

    def __init__(self, message: str, *, tool_id: str, fields: Iterable[str] = ()) -> None:
        self.fields = tuple(fields)
        super().__init__(f"{tool_id}: invalid arguments: {message}", tool_id=tool_id)


class ToolUnavailableError(ToolDispatchError):
    """A capability the tool needs is not provided (a host or wiring gap, not
    the model's fault). `retryable` when the gap is transient (the daemon is
    restarting or unreachable, its quota is used up), not when the arm is
    absent or a protection missing."""

    code: ClassVar[ErrorCode] = "tool_unavailable"

    def __init__(
        self,
        *,
        tool_id: str | None,
        arm: str,
        detail: str | None = None,
        host_reason: str | None = None,
        retryable: bool = False,
    ) -> None:
        self.arm = arm
        self.host_reason = host_reason
        text = detail or f"the host provides no {arm!r} capability"
        super().__init__(
            f"{tool_id or 'tool'}: unavailable: {text}", tool_id=tool_id, retryable=retryable
        )


class ToolExecutionError(ToolDispatchError):
    """The host capability failed. The cause is kept on `__cause__` for logs, off the message.

    `retryable` by default (the seed's "retryable (node budget)"): a raw
    host failure may be transient. A failure whose host reason says the same
    call would fail the same way again (not found, too large, invalid) is
    not (see `HOST_REASONS`)."""

    code: ClassVar[ErrorCode] = "tool_failed"

    def __init__(
        self,
        message: str,
        *,
        tool_id: str,
        recoverable: bool,
        host_reason: str | None = None,
        retryable: bool = True,
    ) -> None:
        self.host_reason = host_reason
        super().__init__(
            f"{tool_id}: {message}", tool_id=tool_id, recoverable=recoverable, retryable=retryable
        )


class ToolHostDeniedError(ToolDispatchError):
    """The host (its floor: roots, tiers, protected and secret paths, executable
    and environment allowlists) refused the call before any side effect.

    `reason` is the lower-case wire reason (`path_escapes_root`, ...), and
    `host_reason` the wire name. Only the fs arm's `path_escapes_root` is
    recoverable (the seed's fs scope-tier escape): the model can adapt to an
    in-bounds path, while feeding back a protected, secret or symlink
    refusal would only re-deny or give a probe oracle. A process's working
    directory escaping the roots is the same host reason and stays fatal:
    the seed names exactly two recoverable scope denials. Never retryable.
    """

    code: ClassVar[ErrorCode] = "tool_denied"

    def __init__(self, host_reason: str, text: str, *, tool_id: str, recoverable: bool) -> None:
        self.host_reason = host_reason
        self.reason = host_reason.lower()
        super().__init__(
            f"{tool_id}: {text} ({self.reason})", tool_id=tool_id, recoverable=recoverable
        )


class ToolDispatchVetoedError(ToolDispatchError):
    """The engine's `before_dispatch` hook vetoed the call, after every other
    check and before the host call (reason `dispatch_vetoed`). `label` is
    the hook's reason, bounded and scrubbed. Fatal, never retryable."""

    code: ClassVar[ErrorCode] = "tool_denied"

    def __init__(self, *, tool_id: str, label: str) -> None:
        self.reason = "dispatch_vetoed"
        self.label = label
        super().__init__(
            f"{tool_id}: the call was vetoed before dispatch: {label}", tool_id=tool_id
        )


class ToolCancelledError(ToolDispatchError):
    """The dispatch was cancelled (its signal fired, or the host call was cancelled)."""

    code: ClassVar[ErrorCode] = "cancelled"

    def __init__(self, *, tool_id: str | None, detail: str = "the call was cancelled") -> None:
        super().__init__(f"{tool_id or 'tool call'}: {detail}", tool_id=tool_id)


class ToolRegistrationError(ValueError):
    """A ToolDef cannot be registered (duplicate id, a process or network tool
    without a policy target, a config-only parameter the args model lacks, ...)."""


# --------------------------------------------------------------------------- host errors


class HostError(Exception):
    """A host arm refused or failed a call, with the daemon's wire reason.

    `reason` is a `hostcap.v1.ErrorReason` name, or one of the client-side
    reasons in `CLIENT_HOST_REASONS`. `host_message` is the host's own text,
    for logs only: it never reaches a model-facing error message.
    """

    def __init__(self, reason: HostReasonName, host_message: str = "") -> None:
        super().__init__(f"{reason}: {host_message}" if host_message else reason)
        self.reason: HostReasonName = reason
        self.host_message = host_message


class HostDisposition(StrEnum):
    """What a host refusal becomes in the taxonomy."""

    #: ToolHostDeniedError, recoverable on the fs arm: refused before any effect, model may adapt.
    SCOPE_DENIAL = "scope_denial"
    #: ToolHostDeniedError, fatal.
    DENIAL = "denial"
    #: ToolExecutionError, recoverable only for an idempotent read.
    EXECUTION = "execution"
    #: ToolUnavailableError.
    UNAVAILABLE = "unavailable"
    #: ToolCancelledError.
    CANCELLED = "cancelled"


@dataclass(frozen=True)
class HostReason:
    disposition: HostDisposition
    text: str
    #: A transient condition: a fresh retry of the node may succeed. Never for a denial.
    retryable: bool = False


#: Reasons the client itself produces for a host failure that carries no wire reason.
ClientHostReason = Literal[
    "UNREACHABLE",
    "UNIMPLEMENTED",
    "DAEMON_SHUTDOWN",
    "SPAWN_FAILED",
    "CANCELLED",
    "DEADLINE_EXCEEDED",
    "HOST_FAILURE",
]
CLIENT_HOST_REASONS: frozenset[str] = frozenset(get_args(ClientHostReason))
#: Every reason a HostError carries: the wire's (`hostcap_proto.names`) and the client's.
HostReasonName = ReasonName | ClientHostReason
_HOST_REASON_NAMES: frozenset[str] = frozenset(REASONS) | CLIENT_HOST_REASONS


def host_reason(name: str) -> HostReasonName:
    """`name` (a reason the daemon sent) as a HostError's reason: a reason
    this client does not know (a newer daemon's) is HOST_FAILURE."""
    if name in _HOST_REASON_NAMES:
        return name  # type: ignore[return-value]
    return "HOST_FAILURE"


_D = HostDisposition
#: The one table from a host reason to its place in the taxonomy. A test checks
#: it covers every reason of the wire contract.
HOST_REASONS: Mapping[HostReasonName, HostReason] = {
    "PATH_ESCAPES_ROOT": HostReason(
        _D.SCOPE_DENIAL, "the path escapes the allowed filesystem scope"
    ),
    "SYMLINK_REFUSED": HostReason(_D.DENIAL, "a symlink on the path is refused by the host"),
    "PROTECTED_PATH": HostReason(_D.DENIAL, "the path is protected by the host"),
    "SECRET_PATH": HostReason(_D.DENIAL, "the path is a secret path the host never exposes"),
    "READ_ONLY_TIER": HostReason(_D.DENIAL, "the path lies in a read-only root"),
    "ACCESS_DENIED": HostReason(
        _D.DENIAL, "the host's file permissions refuse the tenant's identity"
    ),
    "EXECUTABLE_NOT_ALLOWED": HostReason(_D.DENIAL, "the executable is not allowed by the host"),
    "ENV_NOT_ALLOWED": HostReason(
        _D.DENIAL, "a declared environment variable is not allowed by the host"
    ),
    "EXECUTABLE_NOT_FOUND": HostReason(
        _D.EXECUTION, "the executable was not found on the host's PATH"
    ),
    "NOT_FOUND": HostReason(_D.EXECUTION, "the path does not exist"),
    "TOO_LARGE": HostReason(_D.EXECUTION, "the content is larger than the host allows"),
    "LIMIT_INVALID": HostReason(
        _D.EXECUTION, "a requested limit is invalid or above the host's ceiling"
    ),
    "CONFLICT": HostReason(
        _D.EXECUTION, "the file changed since it was read (sha256 mismatch)", retryable=True
    ),
    "INVALID_ARGUMENT": HostReason(_D.EXECUTION, "the host refused the request as malformed"),
    "STDIN_NOT_OPEN": HostReason(
        _D.EXECUTION, "the session's input is not open (not started with it, or closed)"
    ),
    "SPAWN_ENDED": HostReason(_D.EXECUTION, "the session has ended"),
    "NOT_A_TERMINAL": HostReason(_D.EXECUTION, "the session has no terminal"),
    "AUDIT_UNAVAILABLE": HostReason(
        _D.UNAVAILABLE, "the host's audit log is unavailable; nothing was done", retryable=True
    ),
    "PROTECTION_UNAVAILABLE": HostReason(
        _D.UNAVAILABLE, "a sandbox protection the host requires is unavailable"
    ),
    "QUOTA_EXCEEDED": HostReason(
        _D.UNAVAILABLE, "the host's concurrency quota is used up", retryable=True
    ),
    "UNREACHABLE": HostReason(_D.UNAVAILABLE, "the host daemon is unreachable", retryable=True),
    "UNIMPLEMENTED": HostReason(_D.UNAVAILABLE, "the host does not serve this capability"),
    "DAEMON_SHUTDOWN": HostReason(
        _D.UNAVAILABLE, "the host daemon shut down during the call", retryable=True
    ),
    "SPAWN_FAILED": HostReason(_D.EXECUTION, "the process could not be started", retryable=True),
    "CANCELLED": HostReason(_D.CANCELLED, "the host call was cancelled"),
    # The engine's own deadline (host_call_options): the call was stopped; a
    # retry with a fresh deadline may finish.
    "DEADLINE_EXCEEDED": HostReason(
        _D.EXECUTION, "the host call passed its deadline", retryable=True
    ),
    "HOST_FAILURE": HostReason(_D.EXECUTION, "the host call failed", retryable=True),
}


def from_host_error(
    error: HostError, *, tool_id: str, arm: str, idempotent_read: bool
) -> ToolDispatchError:
    """The taxonomy error for a host refusal.

    `idempotent_read` is true for a tool with no write, process, egress or os
    effect: only such a tool's execution failure is recoverable, because a
    governed, side-effecting call may have half-run and must not be retried
    by the model.
    """
    entry = HOST_REASONS.get(error.reason, HOST_REASONS["HOST_FAILURE"])
    match entry.disposition:
        case HostDisposition.SCOPE_DENIAL:
            # Only the fs arm's escape is the seed's recoverable scope denial.
            return ToolHostDeniedError(
                error.reason, entry.text, tool_id=tool_id, recoverable=arm == "fs"
            )
        case HostDisposition.DENIAL:
            return ToolHostDeniedError(error.reason, entry.text, tool_id=tool_id, recoverable=False)
        case HostDisposition.UNAVAILABLE:
            return ToolUnavailableError(
                tool_id=tool_id,
                arm=arm,
                detail=entry.text,
                host_reason=error.reason,
                retryable=entry.retryable,
            )
        case HostDisposition.CANCELLED:
            return ToolCancelledError(tool_id=tool_id, detail=entry.text)
        case HostDisposition.EXECUTION:
            return ToolExecutionError(
                entry.text,
                tool_id=tool_id,
                recoverable=idempotent_read,
                host_reason=error.reason,
                retryable=entry.retryable,
            )
