"""exec_command, read_output and kill_session (issue 30) through the whole
pipeline against a real hostcapd: allowlist, detached spawns, output by
offset, and an environment the engine opened for its session."""

from __future__ import annotations

from typing import Any

import hostcap
import pytest
from client_daemon import Daemon, make_ctx
from hostcap import (
    ToolArgsInvalidError,
    ToolCall,
    ToolExecutionError,
    ToolPolicyError,
    ToolRegistry,
)


async def test_a_short_command_returns_its_result(registry: ToolRegistry) -> None:
    outcome = await registry.dispatch(
        ToolCall("s-echo", "exec_command", {"command": "echo", "args": ["hi"]}), make_ctx()
    )
    result: Any = outcome.result.unwrap()
    assert (result.running, result.session_id, result.exit_code) == (False, None, 0)
    assert result.stdout == "hi\n"
    text = outcome.tool_result.unwrap()
    assert "hi" in text and "exit code 0" in text


async def test_a_long_command_gives_a_session_read_then_killed(
    daemon: Daemon, registry: ToolRegistry
) -> None:
    script = "echo one; sleep 1; echo two; sleep 300"
    outcome = await registry.dispatch(
        ToolCall("s-long", "exec_command",
                 {"command": "sh", "args": ["-c", script], "yield_time_ms": 300}),
        make_ctx(),
    )  # fmt: skip
    first: Any = outcome.result.unwrap()
    assert first.running and first.session_id and first.stdout == "one\n"
    assert first.session_id in outcome.tool_result.unwrap()
    later = await registry.dispatch(
        ToolCall("s-read", "read_output",
                 {"session_id": first.session_id, "yield_time_ms": 2500}),
        make_ctx(),
    )  # fmt: skip
    second: Any = later.result.unwrap()
    assert second.running and second.stdout == "two\n"  # only what is new
    killed = await registry.dispatch(
        ToolCall("s-kill", "kill_session", {"session_id": first.session_id}), make_ctx()
    )
    end: Any = killed.result.unwrap()
    assert not end.running and end.outcome == "SIGNALED"
    exits = [r for r in daemon.records_for("s-long") if r["event"] == "process.exit"]
    assert [r["outcome"] for r in exits] == ["SIGNALED"]


async def test_background_returns_at_once(registry: ToolRegistry) -> None:
    outcome = await registry.dispatch(
        ToolCall("s-bg", "exec_command",
                 {"command": "sleep", "args": ["300"], "background": True}),
        make_ctx(),
    )  # fmt: skip
    result: Any = outcome.result.unwrap()
    assert result.running and result.session_id
    await registry.dispatch(
        ToolCall("s-bg-kill", "kill_session", {"session_id": result.session_id}), make_ctx()
    )


async def test_the_allowlist_holds_and_foreign_sessions_are_not_found(
    registry: ToolRegistry, daemon: Daemon
) -> None:
    with pytest.raises(ToolPolicyError) as denied:
        await registry.dispatch(
            ToolCall("s-denied", "exec_command", {"command": "rm", "args": ["-rf", "."]}),
            make_ctx(),
        )
    assert denied.value.reason == "command_not_allowed"
    assert daemon.records_for("s-denied") == []
    for tool in ("read_output", "kill_session"):
        with pytest.raises(ToolExecutionError) as missing:
            await registry.dispatch(
                ToolCall(f"s-{tool}", tool, {"session_id": "not-a-session-of-ours"}), make_ctx()
            )
        assert missing.value.host_reason == "NOT_FOUND"


async def test_an_engine_environment_is_shared_by_its_commands(
    host: hostcap.GrpcToolHost, registry: ToolRegistry
) -> None:
    env = await host.process.open_environment(idle_timeout_s=60)
    ctx = make_ctx(config={"environment_id": env})
    try:
        await registry.dispatch(
            ToolCall("s-env-1", "exec_command",
                     {"command": "sh", "args": ["-c", "echo kept > /tmp/note"]}),
            ctx,
        )  # fmt: skip
        outcome = await registry.dispatch(
            ToolCall("s-env-2", "exec_command", {"command": "cat", "args": ["/tmp/note"]}), ctx
        )
        assert outcome.result.unwrap().stdout == "kept\n"  # type: ignore[attr-defined]
        # The model cannot pick an environment itself.
        with pytest.raises(ToolArgsInvalidError):
            await registry.dispatch(
                ToolCall("s-env-3", "exec_command",
                         {"command": "cat", "args": ["/tmp/note"], "environment_id": env}),
                make_ctx(),
            )  # fmt: skip
    finally:
        assert await host.process.close_environment(env) == []
