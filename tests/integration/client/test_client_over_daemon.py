"""The client's pipeline through `hostcap.connect` against a real hostcapd."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import hostcap
import psutil
import pytest
from client_daemon import Daemon, make_ctx, require_fs, start_daemon, stop_daemon
from hostcap import (
    ApprovalPolicy,
    ToolCall,
    ToolCancelledError,
    ToolExecutionError,
    ToolHostDeniedError,
    ToolPolicyError,
    ToolRegistry,
    ToolUnavailableError,
)
from hostcap.approval import ApprovalCard
from hostcap.host import Outcome

#: Generous correctness deadline for the daemon to finish killing a tree.
CLEANUP_DEADLINE_S = 30.0


async def test_connect_gives_the_daemon_arms_and_no_others(host: hostcap.GrpcToolHost) -> None:
    assert isinstance(host, hostcap.ToolHost)
    assert host.process is not None and host.fs is not None and host.output_store is not None
    assert host.egress is None and host.os is None and host.mcp is None
    assert (await host.capabilities()).tenant == "dev"


async def test_run_command_of_an_allowed_command(daemon: Daemon, registry: ToolRegistry) -> None:
    outcome = await registry.dispatch(
        ToolCall("it-echo-1", "run_command", {"command": "echo", "args": ["hello", "daemon"]}),
        make_ctx(),
    )
    result: Any = outcome.result.unwrap()
    assert result.outcome is Outcome.EXITED and result.exit_code == 0
    assert result.stdout == "hello daemon\n"
    assert "hello daemon" in outcome.tool_result.unwrap()
    # The audit log ties the daemon's events to the engine's decision.
    (executed,) = daemon.records_for("it-echo-1", "process.exec")
    assert executed["argv"] == ["echo", "hello", "daemon"]
    assert executed["labels"] == {
        "session": make_ctx().session_id,
        "node_id": "it-node",
        "tool_call_id": "it-echo-1",
    }


async def test_a_denied_command_never_reaches_the_daemon(
    daemon: Daemon, registry: ToolRegistry
) -> None:
    with pytest.raises(ToolPolicyError) as caught:
        await registry.dispatch(
            ToolCall("it-denied-1", "run_command", {"command": "rm", "args": ["-rf", "."]}),
            make_ctx(),
        )
    assert caught.value.reason == "command_not_allowed"
    # A later allowed call proves the log is written up to now; the denied one left nothing.
    await registry.dispatch(
        ToolCall("it-after-denied", "run_command", {"command": "echo"}), make_ctx()
    )
    assert daemon.records_for("it-after-denied", "process.exec")
    assert daemon.records_for("it-denied-1") == []
    assert not any(r.get("argv", [None])[0] == "rm" for r in daemon.audit())


async def test_an_executable_missing_on_the_tenant_path(registry: ToolRegistry) -> None:
    with pytest.raises(ToolExecutionError) as caught:
        await registry.dispatch(
            ToolCall("it-missing", "run_command", {"command": "nonexistent-tool-xyz"}), make_ctx()
        )
    assert caught.value.host_reason == "EXECUTABLE_NOT_FOUND"
    assert not caught.value.recoverable  # a process tool: never retried by the model


async def test_a_non_zero_exit_is_a_result(registry: ToolRegistry) -> None:
    outcome = await registry.dispatch(
        ToolCall(
            "it-exit-3", "run_command", {"command": "sh", "args": ["-c", "echo oops >&2; exit 3"]}
        ),
        make_ctx(),
    )
    result: Any = outcome.result.unwrap()
    assert result.exit_code == 3 and result.stderr == "oops\n"
    assert "[exit code 3]" in outcome.tool_result.unwrap()


async def test_a_wall_clock_limit_ends_the_command(registry: ToolRegistry) -> None:
    outcome = await registry.dispatch(
        ToolCall(
            "it-timeout", "run_command", {"command": "sleep", "args": ["300"], "timeout_s": 1}
        ),
        make_ctx(),
    )
    result: Any = outcome.result.unwrap()
    assert result.outcome is Outcome.TIMEOUT, result


def _tree_of(daemon: Daemon) -> list[psutil.Process]:
    try:
        children: list[psutil.Process] = psutil.Process(daemon.process.pid).children(recursive=True)
        return children
    except psutil.NoSuchProcess:
        return []


def _sleepers(daemon: Daemon, marker: str) -> list[psutil.Process]:
    found = []
    for process in _tree_of(daemon):
        try:
            if marker in process.cmdline():
                found.append(process)
        except psutil.Error:
            continue
    return found


async def test_cancellation_mid_command_leaves_no_process(
    daemon: Daemon, host: hostcap.GrpcToolHost
) -> None:
    registry = hostcap.create_tool_registry(tools=hostcap.BUILTIN_TOOLS, host=host)
    signal = asyncio.Event()
    marker = "4321"  # sleep's argument: finds the child among the daemon's descendants
    task = asyncio.create_task(
        registry.dispatch(
            ToolCall(
                "it-cancel-1",
                "run_command",
                {"command": "sh", "args": ["-c", f"sleep {marker} & sleep {marker}"]},
            ),
            make_ctx(signal=signal),
        )
    )
    deadline = time.monotonic() + CLEANUP_DEADLINE_S
    while not (await host.process.live_spawns()) or len(_sleepers(daemon, marker)) < 2:
        assert time.monotonic() < deadline, "the command never started"
        assert not task.done(), task
        await asyncio.sleep(0.05)
    signal.set()
    with pytest.raises(ToolCancelledError):
        await task
    # The daemon kills the whole tree (the backgrounded grandchild too).
    while _sleepers(daemon, marker) or await host.process.live_spawns():
        assert time.monotonic() < deadline, f"left behind: {_sleepers(daemon, marker)}"
        await asyncio.sleep(0.05)
    while not daemon.records_for("it-cancel-1", "process.exit"):
        assert time.monotonic() < deadline, "no process.exit record"
        await asyncio.sleep(0.05)
    (exited,) = daemon.records_for("it-cancel-1", "process.exit")
    assert exited["outcome"] == "CANCELLED"


async def test_plan_with_auto_still_asks_before_a_command(registry: ToolRegistry) -> None:
    cards: list[ApprovalCard] = []

    async def approve(card: ApprovalCard) -> str:
        cards.append(card)
        return "approve"

    policy = ApprovalPolicy("auto", "plan", prompt=approve)
    ctx = make_ctx(approval=policy.context())
    await registry.dispatch(
        ToolCall("it-plan-1", "run_command", {"command": "echo", "args": ["planned"]}), ctx
    )
    assert [card.preview.command for card in cards] == ["echo planned"]
    with pytest.raises(ToolPolicyError) as caught:
        await registry.dispatch(
            ToolCall("it-plan-2", "write_file", {"path": "x.txt", "content": "x"}), ctx
        )
    assert caught.value.reason == "mode_denied"


async def test_a_large_output_is_bounded_and_spilled_and_swept_with_the_run(daemon: Daemon) -> None:
    async with hostcap.connect(daemon.socket) as host:
        registry = hostcap.create_tool_registry(tools=hostcap.BUILTIN_TOOLS, host=host)
        ctx = make_ctx(config={"output_mapping": {"stdout": "numbers"}})
        outcome = await registry.dispatch(
            ToolCall("it-big", "run_command", {"command": "seq", "args": ["20000"]}), ctx
        )
        assert outcome.state_updates["numbers"].unwrap() == "".join(
            f"{i}\n" for i in range(1, 20001)
        )
        assert outcome.truncated and outcome.spilled is not None
        assert outcome.spilled.handle in outcome.tool_result.unwrap()
        store: Any = host.output_store
        directory = store.directory
        assert directory.exists()
    assert not directory.exists()


# -------------------------------------------------------------------------- fs


async def test_read_file_outside_the_scope_is_the_recoverable_scope_denial(
    host: hostcap.GrpcToolHost, registry: ToolRegistry
) -> None:
    await require_fs(host)
    for path in ("../../../etc/passwd", "/etc/passwd"):
        with pytest.raises(ToolHostDeniedError) as caught:
            await registry.dispatch(ToolCall("it-escape", "read_file", {"path": path}), make_ctx())
        assert caught.value.reason == "path_escapes_root"
        assert caught.value.code == "tool_denied" and caught.value.recoverable
        assert "passwd" not in caught.value.message


async def test_write_then_read_then_list_through_the_daemon(
    daemon: Daemon, host: hostcap.GrpcToolHost, registry: ToolRegistry
) -> None:
    await require_fs(host)
    ctx = make_ctx()
    await registry.dispatch(
        ToolCall("it-write-1", "write_file", {"path": "notes/plan.md", "content": "# plan\n"}), ctx
    )
    read = await registry.dispatch(
        ToolCall("it-read-1", "read_file", {"path": "notes/plan.md"}), ctx
    )
    assert read.tool_result.unwrap() == "# plan\n"
    listing = await registry.dispatch(
        ToolCall("it-list-1", "list_directory", {"path": "notes"}), ctx
    )
    assert "plan.md" in listing.tool_result.unwrap()
    (written,) = daemon.records_for("it-write-1", "file.write")
    assert written["labels"]["node_id"] == "it-node"


async def test_a_write_to_the_read_only_root_is_refused(
    host: hostcap.GrpcToolHost, registry: ToolRegistry
) -> None:
    await require_fs(host)
    reference = [root.path for root in (await host.capabilities()).roots if root.tier == 1]
    with pytest.raises(ToolHostDeniedError) as caught:
        await registry.dispatch(
            ToolCall("it-ro", "write_file", {"path": f"{reference[0]}/x.txt", "content": "x"}),
            make_ctx(),
        )
    assert caught.value.reason == "read_only_tier" and not caught.value.recoverable


async def test_a_binary_file_comes_back_as_a_handle(
    host: hostcap.GrpcToolHost, registry: ToolRegistry
) -> None:
    await require_fs(host)
    data = b"\x89PNG\r\n\x1a\n\x00\x00\x00\x0dIHDR" + bytes(range(256))
    await host.fs.write_file(
        "logo.png", data, labels={"session": "s", "node_id": "n", "tool_call_id": "it-png"}
    )
    outcome = await registry.dispatch(
        ToolCall("it-png-read", "read_file", {"path": "logo.png"}), make_ctx()
    )
    assert outcome.media is not None
    media = outcome.media.unwrap()
    assert media.byte_length == len(data)
    assert host.output_store is not None
    assert await host.output_store.open(media.handle) == data


# ------------------------------------------------------------------ reachability


async def test_connecting_to_no_daemon_is_a_clear_error(tmp_path: Any) -> None:
    with pytest.raises(hostcap.HostUnreachableError):
        async with hostcap.connect(tmp_path / "nothing.sock"):
            pass


async def test_a_daemon_that_went_away_is_unavailable() -> None:
    daemon = start_daemon()
    try:
        async with hostcap.connect(daemon.socket) as host:
            registry = hostcap.create_tool_registry(tools=hostcap.BUILTIN_TOOLS, host=host)
            stop_daemon(daemon)
            with pytest.raises(ToolUnavailableError) as caught:
                await registry.dispatch(
                    ToolCall("it-gone", "run_command", {"command": "echo"}), make_ctx()
                )
            assert caught.value.host_reason == "UNREACHABLE"
    finally:
        stop_daemon(daemon)


async def test_output_streams_through_dispatch_while_the_command_runs(
    registry: ToolRegistry, host: hostcap.GrpcToolHost
) -> None:
    from hostcap.dispatch_context import OutputChunk

    chunks: list[OutputChunk] = []
    live_at_first_chunk: list[bool] = []

    async def on_output(chunk: OutputChunk) -> None:
        if not chunks:
            spawns = await host.process.live_spawns()
            live_at_first_chunk.append(any(s.argv[0] == "sh" for s in spawns))
        chunks.append(chunk)

    outcome = await registry.dispatch(
        ToolCall("it-stream-1", "run_command",
                 {"command": "sh", "args": ["-c", "echo early; sleep 1; echo late"]}),
        make_ctx(on_output=on_output),
    )  # fmt: skip
    assert live_at_first_chunk == [True]  # the first chunk came while sh still ran
    assert "".join(c.text.unwrap() for c in chunks) == "early\nlate\n"
    assert "late" in outcome.tool_result.unwrap()


async def test_a_write_the_daemon_would_refuse_never_reaches_a_card(
    registry: ToolRegistry,
) -> None:
    # The review's case: the card came, then path_escapes_root.
    cards: list[ApprovalCard] = []

    async def prompt(card: ApprovalCard) -> str:
        cards.append(card)
        return "approve"

    policy = hostcap.ApprovalPolicy("accept-edits", prompt=prompt)
    with pytest.raises(hostcap.ToolHostDeniedError) as refused:
        await registry.dispatch(
            ToolCall("it-scope-1", "write_file", {"path": "../reference/x.txt", "content": "x"}),
            make_ctx(approval=policy.context()),
        )
    assert refused.value.reason == "path_escapes_root"
    assert cards == []


async def test_edit_file_over_the_daemon_keeps_a_change_made_since_its_read(
    daemon: Daemon, host: hostcap.GrpcToolHost
) -> None:
    target = daemon.workspace / "edited.txt"
    target.write_text("one\ntwo\n")
    target.chmod(0o666)

    class ChangedUnderneath:
        async def read_file(self, path: str, **kwargs: Any) -> Any:
            read = await host.fs.read_file(path, **kwargs)
            target.write_text("another writer\n")  # lands between the read and the write
            return read

        def __getattr__(self, name: str) -> Any:
            return getattr(host.fs, name)

    raced = hostcap.StaticToolHost(fs=ChangedUnderneath(), process=host.process)  # type: ignore[arg-type]
    registry = hostcap.create_tool_registry(tools=hostcap.BUILTIN_TOOLS, host=raced)
    call = ToolCall(
        "it-edit-1", "edit_file", {"path": "edited.txt", "old_text": "two", "new_text": "2"}
    )
    with pytest.raises(hostcap.ToolExecutionError) as failed:
        await registry.dispatch(call, make_ctx())
    assert failed.value.host_reason == "CONFLICT"
    assert target.read_text() == "another writer\n"
    # Without the race the same edit applies.
    target.write_text("one\ntwo\n")
    plain = hostcap.create_tool_registry(tools=hostcap.BUILTIN_TOOLS, host=host)
    outcome = await plain.dispatch(call, make_ctx())
    assert target.read_text() == "one\n2\n"
    assert "-two\n+2" in outcome.tool_result.unwrap()
