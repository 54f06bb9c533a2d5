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
    HostDisposition,
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
        "mode_denied",  # the contract PR's
        "unsafe_repository",  # the client's own (decision 0025)
        "action_not_declared",  # the client's own: plan_safe_actions enforced
    } == POLICY_DENY_REASONS
    assert {"user_rejected", "no_approval_hook", "approval_error"} == USER_DENY_REASONS


# (reason, class, recoverable for an idempotent read, recoverable for a side-effecting tool,
#  retryable: a transient host condition; never a denial)
TABLE = [
    ("PATH_ESCAPES_ROOT", ToolHostDeniedError, True, True, False),
    ("SYMLINK_REFUSED", ToolHostDeniedError, False, False, False),
    ("PROTECTED_PATH", ToolHostDeniedError, False, False, False),
    ("SECRET_PATH", ToolHostDeniedError, False, False, False),
    ("READ_ONLY_TIER", ToolHostDeniedError, False, False, False),
    ("EXECUTABLE_NOT_ALLOWED", ToolHostDeniedError, False, False, False),
    ("ENV_NOT_ALLOWED", ToolHostDeniedError, False, False, False),
    ("EXECUTABLE_NOT_FOUND", ToolExecutionError, True, False, False),
    ("NOT_FOUND", ToolExecutionError, True, False, False),
    ("TOO_LARGE", ToolExecutionError, True, False, False),
    ("LIMIT_INVALID", ToolExecutionError, True, False, False),
    ("CONFLICT", ToolExecutionError, True, False, True),
    ("INVALID_ARGUMENT", ToolExecutionError, True, False, False),
    ("AUDIT_UNAVAILABLE", ToolUnavailableError, False, False, True),
    ("PROTECTION_UNAVAILABLE", ToolUnavailableError, False, False, False),
    ("QUOTA_EXCEEDED", ToolUnavailableError, False, False, True),
    ("UNREACHABLE", ToolUnavailableError, False, False, True),
    ("UNIMPLEMENTED", ToolUnavailableError, False, False, False),
    ("DAEMON_SHUTDOWN", ToolUnavailableError, False, False, True),
    ("SPAWN_FAILED", ToolExecutionError, True, False, True),
    ("CANCELLED", ToolCancelledError, False, False, False),
    ("HOST_FAILURE", ToolExecutionError, True, False, True),
    (
        "SOMETHING_NEW",
        ToolExecutionError,
        True,
        False,
        True,
    ),  # an unknown reason is a plain failure
]


@pytest.mark.parametrize(
    ("reason", "cls", "read_recoverable", "effect_recoverable", "retryable"),
    TABLE,
    ids=[r[0] for r in TABLE],
)
def test_host_reason_mapping(
    reason: str,
    cls: type[ToolDispatchError],
    read_recoverable: bool,
    effect_recoverable: bool,
    retryable: bool,
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
        assert error.retryable is retryable
        # The host's own message (which may name paths) never reaches the model-facing message.
        assert "alice" not in error.message and "id_ed25519" not in error.message
        assert error.message.startswith("t: ")


def test_a_denial_is_never_retryable() -> None:
    for reason, entry in HOST_REASONS.items():
        if entry.disposition in (HostDisposition.DENIAL, HostDisposition.SCOPE_DENIAL):
            assert not entry.retryable, reason


def test_only_the_fs_arms_root_escape_is_recoverable() -> None:
    """The seed names exactly two recoverable scope denials: media_scope_denied
    and the fs arm's scope-tier escape. A process's cwd escaping the roots is
    the same wire reason, and stays fatal."""
    for arm, recoverable in (("fs", True), ("process", False)):
        error = from_host_error(
            HostError("PATH_ESCAPES_ROOT"), tool_id="t", arm=arm, idempotent_read=False
        )
        assert isinstance(error, ToolHostDeniedError)
        assert error.recoverable is recoverable and not error.retryable


@pytest.mark.parametrize(
    ("error", "code", "recoverable", "correctable", "retryable"),
    [
        (UnknownToolError("x", ["a"]), "tool_failed", False, True, False),
        (ToolArgsInvalidError("bad", tool_id="t"), "tool_failed", False, True, False),
        (ToolPolicyError("not_granted", tool_id="t"), "tool_denied", False, False, False),
        (ToolPolicyError("mode_denied", tool_id="t"), "tool_denied", False, False, False),
        (ToolPolicyError("media_scope_denied", tool_id="t"), "tool_denied", True, False, False),
        (ToolDeniedByUserError("user_rejected", tool_id="t"), "tool_denied", False, False, False),
        (
            ToolDeniedByUserError("no_approval_hook", tool_id="t"),
            "tool_denied",
            False,
            False,
            False,
        ),
        (ToolDeniedByUserError("approval_error", tool_id="t"), "tool_denied", False, False, False),
        (ToolUnavailableError(tool_id="t", arm="egress"), "tool_unavailable", False, False, False),
        (ToolExecutionError("x", tool_id="t", recoverable=True), "tool_failed", True, False, True),
        (ToolCancelledError(tool_id="t"), "cancelled", False, False, False),
    ],
    ids=lambda v: v if isinstance(v, str) else None,
)
def test_each_error_class_carries_its_code(
    error: ToolDispatchError, code: str, recoverable: bool, correctable: bool, retryable: bool
) -> None:
    assert isinstance(error, ToolDispatchError)
    assert error.code == code
    assert error.recoverable is recoverable
    assert error.loop_correctable is correctable
    assert error.retryable is retryable


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
