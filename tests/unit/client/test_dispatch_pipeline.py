"""The dispatch pipeline, step by step, through the in-memory ToolHost."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest
from client_support import MakeCtx
from hostcap import (
    BUILTIN_TOOLS,
    ToolArgsInvalidError,
    ToolCall,
    ToolDef,
    ToolDispatchError,
    ToolExecutionError,
    ToolHostDeniedError,
    ToolPolicy,
    ToolPolicyClass,
    ToolPolicyError,
    ToolRegistry,
    ToolUnavailableError,
    UnknownToolError,
    create_tool_registry,
)
from hostcap.testing import MemoryEgress, MemoryToolHost


@dataclass
class Case:
    """One refusal of the pipeline: the call, the context, what must come back,
    and proof that no side effect happened."""

    name: str
    call: ToolCall
    error: type[ToolDispatchError]
    code: str
    reason: str | None = None
    recoverable: bool = False
    ctx: dict[str, Any] = field(default_factory=dict)


CASES = [
    Case("provider-executed call refused before resolution, even for an unknown name",
         ToolCall("c1", "no_such_tool", {}, provider_executed=True), ToolPolicyError, "tool_denied",
         "provider_executed"),
    Case("provider-executed call of a real tool",
         ToolCall("c1", "run_command", {"command": "echo"}, provider_executed=True), ToolPolicyError,
         "tool_denied", "provider_executed"),
    Case("unknown tool id", ToolCall("c1", "run_comand", {"command": "echo"}), UnknownToolError, "tool_failed"),
    Case("tool ids match exactly, not case-insensitively",
         ToolCall("c1", "Run_Command", {"command": "echo"}), UnknownToolError, "tool_failed"),
    Case("registered but not granted", ToolCall("c1", "run_command", {"command": "echo"}), ToolPolicyError,
         "tool_denied", "not_granted", ctx={"granted_tool_ids": {"read_file"}}),
    Case("a config-only parameter set by the model",
         ToolCall("c1", "run_command", {"command": "echo", "env": {"TERM": "xterm"}}), ToolArgsInvalidError,
         "tool_failed"),
    Case("a config-only parameter set by input_mapping",
         ToolCall("c1", "read_file", {"path": "notes.txt"}), ToolArgsInvalidError, "tool_failed",
         ctx={"config": {"input_mapping": {"max_bytes": 1}}, "secret_arg_keys": set()}),
    Case("input_mapping producing a disallowed command is denied: policy runs on effective args",
         ToolCall("c1", "run_command", {"command": "echo"}), ToolPolicyError, "tool_denied",
         "command_not_allowed", ctx={"config": {"input_mapping": {"command": "rm"}}, "secret_arg_keys": set()}),
    Case("input_mapping without secret provenance is refused",
         ToolCall("c1", "run_command", {}), ToolArgsInvalidError, "tool_failed",
         ctx={"config": {"input_mapping": {"command": "echo"}}}),
    Case("a secret-tainted value reaching an argument",
         ToolCall("c1", "run_command", {"command": "echo", "args": ["x"]}), ToolArgsInvalidError,
         "tool_failed", ctx={"secret_arg_keys": {"args[0]"}}),
    Case("missing required argument", ToolCall("c1", "read_file", {}), ToolArgsInvalidError, "tool_failed"),
    Case("an argument the tool does not have", ToolCall("c1", "read_file", {"path": "a", "mode": "x"}),
         ToolArgsInvalidError, "tool_failed"),
    Case("a shell line instead of a command",
         ToolCall("c1", "run_command", {"command": "echo hi; rm -rf /"}), ToolArgsInvalidError, "tool_failed"),
    Case("command not on the allowlist", ToolCall("c1", "run_command", {"command": "rm", "args": ["-rf", "."]}),
         ToolPolicyError, "tool_denied", "command_not_allowed"),
    Case("an empty allowlist denies every command", ToolCall("c1", "run_command", {"command": "echo"}),
         ToolPolicyError, "tool_denied", "command_not_allowed", ctx={"tool_policy": ToolPolicy()}),
    Case("http is refused: https only", ToolCall("c1", "http_request", {"url": "http://api.example.com/x"}),
         ToolPolicyError, "tool_denied", "insecure_url"),
    Case("a host not on the allowed domains",
         ToolCall("c1", "http_request", {"url": "https://evil.example.net/"}), ToolPolicyError, "tool_denied",
         "domain_not_allowed"),
    Case("a subdomain of an allowed domain is not allowed",
         ToolCall("c1", "http_request", {"url": "https://x.api.example.com/"}), ToolPolicyError, "tool_denied",
         "domain_not_allowed"),
    Case("credentials in the URL are refused",
         ToolCall("c1", "http_request", {"url": "https://u:p@api.example.com/"}), ToolPolicyError,
         "tool_denied", "insecure_url"),
    Case("git_commit without the human gate", ToolCall("c1", "git_commit", {"message": "m"}), ToolPolicyError,
         "tool_denied", "gate_required"),
    Case("a tool whose arm the host lacks", ToolCall("c1", "http_request", {"url": "https://api.example.com/"}),
         ToolUnavailableError, "tool_unavailable"),
    Case("invoke_agent without a delegate", ToolCall("c1", "invoke_agent", {"node_id": "n2"}),
         ToolUnavailableError, "tool_unavailable"),
    Case("output_mapping naming a field the result lacks is refused before the host call",
         ToolCall("c1", "run_command", {"command": "echo"}), ToolArgsInvalidError, "tool_failed",
         ctx={"config": {"output_mapping": {"no_such_field": "x"}}}),
]  # fmt: skip


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
async def test_refusals_happen_before_any_side_effect(
    case: Case, host: MemoryToolHost, registry: ToolRegistry, make_ctx: MakeCtx
) -> None:
    with pytest.raises(case.error) as caught:
        await registry.dispatch(case.call, make_ctx(**case.ctx))
    error = caught.value
    assert error.code == case.code
    assert error.recoverable is case.recoverable
    if case.reason is not None:
        assert getattr(error, "reason", None) == case.reason
    assert host.process is not None and host.fs is not None
    assert host.process.spawns == []
    assert host.fs.writes == []


async def test_unknown_tool_lists_the_available_ids_and_never_guesses(
    registry: ToolRegistry, make_ctx: MakeCtx
) -> None:
    with pytest.raises(UnknownToolError) as caught:
        await registry.dispatch(ToolCall("c1", "read_fil", {"path": "notes.txt"}), make_ctx())
    # The host has no egress: its tools are not offered, so not listed either.
    offered = (t.id for t in BUILTIN_TOOLS if "egress" not in t.arms)
    assert caught.value.available == tuple(sorted(offered))
    assert "read_file" in caught.value.message
    assert caught.value.loop_correctable


async def test_argument_errors_name_fields_never_values(
    registry: ToolRegistry, make_ctx: MakeCtx
) -> None:
    secret = "sk-live-SECRETVALUE1234567890"
    with pytest.raises(ToolArgsInvalidError) as caught:
        await registry.dispatch(
            ToolCall("c1", "run_command", {"command": "echo", "timeout_s": secret}), make_ctx()
        )
    assert "timeout_s" in caught.value.message
    assert secret not in caught.value.message
    with pytest.raises(ToolArgsInvalidError) as tainted:
        await registry.dispatch(
            ToolCall("c1", "run_command", {"command": "echo", "args": [secret]}),
            make_ctx(secret_arg_keys={"args"}),
        )
    assert "args" in tainted.value.fields
    assert secret not in tainted.value.message


async def test_a_credential_parameter_may_carry_a_tainted_value(make_ctx: MakeCtx) -> None:
    egress = MemoryEgress({"https://api.example.com/v1": _ok_response()})
    registry = create_tool_registry(tools=BUILTIN_TOOLS, host=MemoryToolHost(egress=egress))
    ctx = make_ctx(config={"credential_ref": "vault:api-token"}, secret_arg_keys={"credential_ref"})
    await registry.dispatch(
        ToolCall("c1", "http_request", {"url": "https://api.example.com/v1"}), ctx
    )
    assert egress.requests[0].credential_ref == "vault:api-token"


async def test_run_command_reaches_the_host_with_labels(
    host: MemoryToolHost, registry: ToolRegistry, make_ctx: MakeCtx
) -> None:
    outcome = await registry.dispatch(
        ToolCall("call-7", "run_command", {"command": "echo", "args": ["hi"]}), make_ctx()
    )
    text = outcome.tool_result.unwrap()
    assert "hi" in text and "exit code 0" in text
    assert host.process is not None
    (spawn,) = host.process.spawns
    assert spawn.argv == ("echo", "hi")
    assert dict(spawn.labels) == {
        "session": "session-1",
        "node_id": "node-1",
        "tool_call_id": "call-7",
    }


async def test_write_file_carries_labels_to_the_host(
    host: MemoryToolHost, registry: ToolRegistry, make_ctx: MakeCtx
) -> None:
    await registry.dispatch(
        ToolCall("call-8", "write_file", {"path": "out/a.txt", "content": "x"}), make_ctx()
    )
    assert host.fs is not None
    (write,) = host.fs.writes
    assert write.path == "/workspace/out/a.txt"
    assert dict(write.labels) == {
        "session": "session-1",
        "node_id": "node-1",
        "tool_call_id": "call-8",
    }


async def test_config_only_values_are_merged_last(
    host: MemoryToolHost, registry: ToolRegistry, make_ctx: MakeCtx
) -> None:
    ctx = make_ctx(config={"max_bytes": 5})
    outcome = await registry.dispatch(ToolCall("c1", "read_file", {"path": "notes.txt"}), ctx)
    assert outcome.tool_result.unwrap().startswith("hello\n[file continues")


async def test_input_mapping_supplies_arguments_of_a_tool_node(
    host: MemoryToolHost, registry: ToolRegistry, make_ctx: MakeCtx
) -> None:
    ctx = make_ctx(
        config={"input_mapping": {"command": "echo", "args": ["mapped"]}}, secret_arg_keys=set()
    )
    outcome = await registry.dispatch(ToolCall("c1", "run_command", {}), ctx)
    assert "mapped" in outcome.tool_result.unwrap()


async def test_input_mapping_wins_over_model_arguments(
    host: MemoryToolHost, registry: ToolRegistry, make_ctx: MakeCtx
) -> None:
    ctx = make_ctx(config={"input_mapping": {"args": ["from-mapping"]}}, secret_arg_keys=set())
    outcome = await registry.dispatch(
        ToolCall("c1", "run_command", {"command": "echo", "args": ["from-model"]}), ctx
    )
    assert host.process is not None
    assert host.process.spawns[0].argv == ("echo", "from-mapping")
    assert "from-model" not in outcome.tool_result.unwrap()


async def test_opt_in_glob_admits_a_command(
    host: MemoryToolHost, registry: ToolRegistry, make_ctx: MakeCtx
) -> None:
    ctx = make_ctx(tool_policy=ToolPolicy(allowed_command_globs=["ec*"]))
    await registry.dispatch(ToolCall("c1", "run_command", {"command": "echo"}), ctx)
    assert host.process is not None and len(host.process.spawns) == 1


async def test_git_status_is_pre_approved_and_needs_no_allowlist_entry(make_ctx: MakeCtx) -> None:
    async def git(io: Any) -> int:
        io.out("## main\n")
        return 0

    host = MemoryToolHost()
    assert host.process is not None
    host.process.programs["git"] = git
    registry = create_tool_registry(tools=BUILTIN_TOOLS, host=host)
    outcome = await registry.dispatch(
        ToolCall("c1", "git_status", {}), make_ctx(tool_policy=ToolPolicy())
    )
    assert outcome.tool_result.unwrap() == "## main"
    argv = host.process.spawns[0].argv
    assert argv[0] == "git" and "core.hooksPath=/dev/null" in argv
    assert argv[-4:] == ("status", "--porcelain=v1", "--branch", "--ignore-submodules=all")
    assert host.process.spawns[0].env_names == ("GIT_CONFIG_GLOBAL", "GIT_CONFIG_NOSYSTEM")


async def test_git_commit_runs_with_the_gate(make_ctx: MakeCtx) -> None:
    async def git(io: Any) -> int:
        return 0

    host = MemoryToolHost()
    assert host.process is not None
    host.process.programs["git"] = git
    registry = create_tool_registry(tools=BUILTIN_TOOLS, host=host)
    await registry.dispatch(
        ToolCall("c1", "git_commit", {"message": "-rf fix"}), make_ctx(gate_approved=True)
    )
    commit = host.process.spawns[-1].argv
    # The message is one argv element after -m, so a leading dash is never an option.
    assert commit[-3:] == ("-m", "-rf fix") or commit[-2:] == ("-m", "-rf fix")
    assert "GIT_AUTHOR_NAME" in host.process.spawns[-1].env_names


async def test_invoke_agent_runs_through_the_delegate(
    registry: ToolRegistry, make_ctx: MakeCtx
) -> None:
    seen: list[tuple[str, Any]] = []

    async def delegate(node_id: str, value: Any) -> Any:
        seen.append((node_id, value))
        return {"answer": 42}

    outcome = await registry.dispatch(
        ToolCall("c1", "invoke_agent", {"node_id": "researcher", "input": {"q": 1}}),
        make_ctx(invoke_agent=delegate),
    )
    assert seen == [("researcher", {"q": 1})]
    assert '"answer": 42' in outcome.tool_result.unwrap()


# ------------------------------------------------------------------ host errors


@dataclass
class HostCase:
    name: str
    call: ToolCall
    error: type[ToolDispatchError]
    reason: str
    recoverable: bool


HOST_CASES = [
    HostCase("read outside the scope is the recoverable scope denial",
             ToolCall("c1", "read_file", {"path": "../../etc/passwd"}), ToolHostDeniedError, "path_escapes_root", True),
    HostCase("absolute path outside every root", ToolCall("c1", "read_file", {"path": "/etc/shadow"}),
             ToolHostDeniedError, "path_escapes_root", True),
    # Not one of the seed's two recoverable scope denials (issue 16): fatal.
    HostCase("run_command with a cwd outside the scope is fatal",
             ToolCall("c1", "run_command", {"command": "echo", "cwd": "../.."}),
             ToolHostDeniedError, "path_escapes_root", False),
    HostCase("secret path is fatal", ToolCall("c1", "read_file", {"path": "config/.env"}), ToolHostDeniedError,
             "secret_path", False),
    HostCase("symlink leaving the roots is fatal", ToolCall("c1", "read_file", {"path": "link/passwd"}),
             ToolHostDeniedError, "symlink_refused", False),
    HostCase("write to a read-only root is fatal", ToolCall("c1", "write_file", {"path": "/reference/a", "content": "x"}),
             ToolHostDeniedError, "read_only_tier", False),
    HostCase("write to a daemon-protected path is fatal",
             ToolCall("c1", "write_file", {"path": ".git/config", "content": "x"}), ToolHostDeniedError,
             "protected_path", False),
    HostCase("a missing file is recoverable for an idempotent read",
             ToolCall("c1", "read_file", {"path": "missing.txt"}), ToolExecutionError, "NOT_FOUND", True),
    HostCase("a missing directory is recoverable for an idempotent read",
             ToolCall("c1", "list_directory", {"path": "nope"}), ToolExecutionError, "NOT_FOUND", True),
    HostCase("an executable not on PATH fails a side-effecting tool fatally",
             ToolCall("c1", "run_command", {"command": "seq"}), ToolExecutionError, "EXECUTABLE_NOT_FOUND", False),
    HostCase("a limit above the ceiling", ToolCall("c1", "run_command", {"command": "echo", "timeout_s": 7200}),
             ToolExecutionError, "LIMIT_INVALID", False),
]  # fmt: skip


@pytest.mark.parametrize("case", HOST_CASES, ids=[c.name for c in HOST_CASES])
async def test_host_refusals_map_onto_the_taxonomy(case: HostCase, make_ctx: MakeCtx) -> None:
    host = MemoryToolHost()
    assert host.fs is not None and host.process is not None
    host.fs.symlink("link", "/etc")
    del host.process.programs["seq"]
    registry = create_tool_registry(tools=BUILTIN_TOOLS, host=host)
    with pytest.raises(case.error) as caught:
        await registry.dispatch(case.call, make_ctx())
    error = caught.value
    reason = (
        error.reason
        if isinstance(error, ToolHostDeniedError)
        else getattr(error, "host_reason", None)
    )
    assert reason == case.reason
    assert error.recoverable is case.recoverable
    assert error.code == (
        "tool_denied" if isinstance(error, ToolHostDeniedError) else "tool_failed"
    )
    # Secret-free: the message names the tool and the refusal, never the path.
    assert "passwd" not in error.message and "shadow" not in error.message


async def test_the_daemon_floor_is_not_overridden_by_an_approval(make_ctx: MakeCtx) -> None:
    from hostcap import ApprovalPolicy

    host = MemoryToolHost()
    registry = create_tool_registry(tools=BUILTIN_TOOLS, host=host)
    cards: list[Any] = []

    async def approve(card: Any) -> str:
        cards.append(card)
        return "approve"

    # The client's own protected paths put a card in front of the write, and the
    # human approves it; the daemon's floor still refuses.
    policy = ApprovalPolicy("auto", prompt=approve)
    with pytest.raises(ToolHostDeniedError) as caught:
        await registry.dispatch(
            ToolCall("c1", "write_file", {"path": ".git/hooks/pre-commit", "content": "x"}),
            make_ctx(approval=policy.context()),
        )
    assert caught.value.reason == "protected_path"
    assert len(cards) == 1


@pytest.mark.parametrize(
    ("flag", "host_reason"),
    [("audit_available", "AUDIT_UNAVAILABLE"), ("protections_available", "PROTECTION_UNAVAILABLE")],
)
async def test_a_host_that_cannot_audit_or_protect_is_unavailable(
    flag: str, host_reason: str, make_ctx: MakeCtx
) -> None:
    host = MemoryToolHost()
    assert host.process is not None
    setattr(host.process, flag, False)
    registry = create_tool_registry(tools=BUILTIN_TOOLS, host=host)
    with pytest.raises(ToolUnavailableError) as caught:
        await registry.dispatch(ToolCall("c1", "run_command", {"command": "echo"}), make_ctx())
    assert caught.value.host_reason == host_reason
    assert caught.value.arm == "process"
    assert host.process.spawns == []


async def test_quota_exceeded_is_unavailable(make_ctx: MakeCtx) -> None:
    host = MemoryToolHost()
    assert host.process is not None
    host.process.max_concurrent_spawns = 0
    registry = create_tool_registry(tools=BUILTIN_TOOLS, host=host)
    with pytest.raises(ToolUnavailableError) as caught:
        await registry.dispatch(ToolCall("c1", "run_command", {"command": "echo"}), make_ctx())
    assert caught.value.host_reason == "QUOTA_EXCEEDED"


async def test_a_raw_host_exception_becomes_an_execution_error_with_the_cause_kept(
    make_ctx: MakeCtx,
) -> None:
    class BrokenFs:
        async def read_file(self, path: str, *, max_bytes: int | None = None) -> Any:
            raise OSError("disk on fire at /secret/location")

    from hostcap import StaticToolHost

    registry = create_tool_registry(tools=BUILTIN_TOOLS, host=StaticToolHost(fs=BrokenFs()))  # type: ignore[arg-type]
    with pytest.raises(ToolExecutionError) as caught:
        await registry.dispatch(ToolCall("c1", "read_file", {"path": "a"}), make_ctx())
    assert caught.value.recoverable  # an idempotent read
    assert "/secret/location" not in caught.value.message
    assert isinstance(caught.value.__cause__, OSError)


async def test_a_host_raising_a_typed_error_passes_through_verbatim(make_ctx: MakeCtx) -> None:
    class DenyingFs:
        async def read_file(self, path: str, *, max_bytes: int | None = None) -> Any:
            raise ToolPolicyError("media_scope_denied", tool_id="read_file")

    from hostcap import StaticToolHost

    registry = create_tool_registry(tools=BUILTIN_TOOLS, host=StaticToolHost(fs=DenyingFs()))  # type: ignore[arg-type]
    with pytest.raises(ToolPolicyError) as caught:
        await registry.dispatch(ToolCall("c1", "read_file", {"path": "a"}), make_ctx())
    assert caught.value.reason == "media_scope_denied" and caught.value.recoverable


async def test_a_failed_side_effecting_call_is_never_recoverable(make_ctx: MakeCtx) -> None:
    class FlakyProcess:
        async def spawn(self, *args: Any) -> Any:
            raise RuntimeError("connection reset mid-run")

    from hostcap import StaticToolHost

    fake = StaticToolHost(process=FlakyProcess())
    registry = create_tool_registry(tools=BUILTIN_TOOLS, host=fake)
    with pytest.raises(ToolExecutionError) as caught:
        await registry.dispatch(ToolCall("c1", "run_command", {"command": "echo"}), make_ctx())
    assert not caught.value.recoverable


# ---------------------------------------------------------------- registration


def _tool(**overrides: Any) -> ToolDef[Any, Any]:
    from pydantic import BaseModel

    class Args(BaseModel):
        command: str = "x"

    class Result(BaseModel):
        ok: bool = True

    async def dispatch(args: Args, host: Any, ctx: Any) -> Result:
        return Result()

    fields: dict[str, Any] = {
        "id": "custom", "source": "plugin", "description": "d", "args_model": Args, "result_model": Result,
        "policy": ToolPolicyClass(), "dispatch": dispatch,
    }  # fmt: skip
    fields.update(overrides)
    return ToolDef(**fields)


@pytest.mark.parametrize(
    "overrides",
    [
        {"policy": ToolPolicyClass(spawns_process=True)},
        {"policy": ToolPolicyClass(egress="http")},
        {"policy": ToolPolicyClass(egress="mcp")},
        {"config_only_params": frozenset({"not_a_field"})},
        {"id": "bad id!"},
    ],
    ids=[
        "process-without-target",
        "http-without-target",
        "mcp-without-target",
        "unknown-config-only",
        "bad-id",
    ],
)
def test_registration_refuses_a_fail_open_or_malformed_tooldef(overrides: dict[str, Any]) -> None:
    from hostcap import ToolRegistrationError

    with pytest.raises(ToolRegistrationError):
        _tool(**overrides)


def test_registration_refuses_duplicate_ids() -> None:
    from hostcap import ToolRegistrationError

    with pytest.raises(ToolRegistrationError):
        create_tool_registry(tools=[_tool(), _tool()], host=MemoryToolHost())


def _ok_response() -> Any:
    from hostcap.host import EgressResponse

    return EgressResponse(status=200, headers={}, body="ok")
