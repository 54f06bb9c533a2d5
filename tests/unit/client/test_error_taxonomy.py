"""The error taxonomy: codes, recoverability, and the host-reason table."""

from __future__ import annotations

import pytest
from hostcap import (
    ToolArgsInvalidError,
    ToolCancelledError,
    ToolDeniedByUserError,
    ToolDispatchError,
    ToolExecutionError,
    ToolHostDeniedError,
    ToolPolicyError,
    ToolUnavailableError,
    UnknownToolError,
)
from hostcap.errors import (
    CLIENT_HOST_REASONS,
    HOST_REASONS,
    POLICY_DENY_REASONS,
    USER_DENY_REASONS,
    HostError,
    from_host_error,
)
from hostcap_proto.errors import REASONS


def test_every_wire_reason_has_a_place_in_the_taxonomy() -> None:
    assert set(REASONS) <= set(HOST_REASONS)
    assert set(HOST_REASONS) == set(REASONS) | CLIENT_HOST_REASONS


def test_reason_sets_are_the_seeds() -> None:
    assert {
        "provider_executed",
        "not_granted",
        "command_not_allowed",
        "domain_not_allowed",
        "insecure_url",
        "gate_required",
        "media_scope_denied",
        "mode_denied",
    } == POLICY_DENY_REASONS
    assert {"user_rejected", "no_approval_hook", "approval_error"} == USER_DENY_REASONS


# (reason, class, recoverable for an idempotent read, recoverable for a side-effecting tool)
TABLE = [
    ("PATH_ESCAPES_ROOT", ToolHostDeniedError, True, True),
    ("SYMLINK_REFUSED", ToolHostDeniedError, False, False),
    ("PROTECTED_PATH", ToolHostDeniedError, False, False),
    ("SECRET_PATH", ToolHostDeniedError, False, False),
    ("READ_ONLY_TIER", ToolHostDeniedError, False, False),
    ("EXECUTABLE_NOT_ALLOWED", ToolHostDeniedError, False, False),
    ("ENV_NOT_ALLOWED", ToolHostDeniedError, False, False),
    ("EXECUTABLE_NOT_FOUND", ToolExecutionError, True, False),
    ("NOT_FOUND", ToolExecutionError, True, False),
    ("TOO_LARGE", ToolExecutionError, True, False),
    ("LIMIT_INVALID", ToolExecutionError, True, False),
    ("CONFLICT", ToolExecutionError, True, False),
    ("INVALID_ARGUMENT", ToolExecutionError, True, False),
    ("AUDIT_UNAVAILABLE", ToolUnavailableError, False, False),
    ("PROTECTION_UNAVAILABLE", ToolUnavailableError, False, False),
    ("QUOTA_EXCEEDED", ToolUnavailableError, False, False),
    ("UNREACHABLE", ToolUnavailableError, False, False),
    ("UNIMPLEMENTED", ToolUnavailableError, False, False),
    ("DAEMON_SHUTDOWN", ToolUnavailableError, False, False),
    ("SPAWN_FAILED", ToolExecutionError, True, False),
    ("CANCELLED", ToolCancelledError, False, False),
    ("HOST_FAILURE", ToolExecutionError, True, False),
    ("SOMETHING_NEW", ToolExecutionError, True, False),  # an unknown reason is a plain failure
]


@pytest.mark.parametrize(
    ("reason", "cls", "read_recoverable", "effect_recoverable"), TABLE, ids=[r[0] for r in TABLE]
)
def test_host_reason_mapping(
    reason: str, cls: type[ToolDispatchError], read_recoverable: bool, effect_recoverable: bool
) -> None:
    secret_message = "/home/alice/.ssh/id_ed25519 is protected"
    for idempotent_read, recoverable in ((True, read_recoverable), (False, effect_recoverable)):
        error = from_host_error(
            HostError(reason, secret_message),
            tool_id="t",
            arm="fs",
            idempotent_read=idempotent_read,
        )
        assert type(error) is cls
        assert error.recoverable is recoverable
        # The host's own message (which may name paths) never reaches the model-facing message.
        assert "alice" not in error.message and "id_ed25519" not in error.message
        assert error.message.startswith("t: ")


@pytest.mark.parametrize(
    ("error", "code", "recoverable", "correctable"),
    [
        (UnknownToolError("x", ["a"]), "tool_failed", False, True),
        (ToolArgsInvalidError("bad", tool_id="t"), "tool_failed", False, True),
        (ToolPolicyError("not_granted", tool_id="t"), "tool_denied", False, False),
        (ToolPolicyError("mode_denied", tool_id="t"), "tool_denied", False, False),
        (ToolPolicyError("media_scope_denied", tool_id="t"), "tool_denied", True, False),
        (ToolDeniedByUserError("user_rejected", tool_id="t"), "tool_denied", False, False),
        (ToolDeniedByUserError("no_approval_hook", tool_id="t"), "tool_denied", False, False),
        (ToolDeniedByUserError("approval_error", tool_id="t"), "tool_denied", False, False),
        (ToolUnavailableError(tool_id="t", arm="egress"), "tool_unavailable", False, False),
        (ToolExecutionError("x", tool_id="t", recoverable=True), "tool_failed", True, False),
        (ToolCancelledError(tool_id="t"), "cancelled", False, False),
    ],
    ids=lambda v: v if isinstance(v, str) else None,
)
def test_each_error_class_carries_its_code(
    error: ToolDispatchError, code: str, recoverable: bool, correctable: bool
) -> None:
    assert isinstance(error, ToolDispatchError)
    assert error.code == code
    assert error.recoverable is recoverable
    assert error.loop_correctable is correctable


def test_unavailable_names_the_missing_arm() -> None:
    error = ToolUnavailableError(tool_id="http_request", arm="egress")
    assert error.arm == "egress"
    assert "egress" in error.message and "http_request" in error.message


def test_reasons_outside_the_closed_sets_are_refused() -> None:
    with pytest.raises(ValueError):
        ToolPolicyError("because", tool_id="t")  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        ToolDeniedByUserError("meh", tool_id="t")  # type: ignore[arg-type]


def test_an_unknown_tool_name_is_shown_escaped_and_bounded() -> None:
    error = UnknownToolError("x\n" * 100, ["read_file"])
    assert "\n" not in error.message
    assert len(error.message) < 200
