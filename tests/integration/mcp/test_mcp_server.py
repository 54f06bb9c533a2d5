"""`hostcap mcp` driven by the mcp SDK's own client over stdio, against a real hostcapd.

The server runs as the subprocess an MCP client launches (`python -m
hostcap.mcp_cli mcp --socket ... --config ...`); the tests list its tools,
call them, and try what the policy refuses: a command off the allowlist,
a call needing approval from a client that cannot be asked, an approval
declined, a running command cancelled (its tree must be gone).
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import mcp_types as types
import pytest
from mcp import Client
from mcp.client.session import ClientRequestContext
from mcp.client.stdio import StdioServerParameters
from support.daemon import REPO, Daemon, processes_with, wait_gone


def write_policy(path: Path, **overrides: Any) -> Path:
    policy: dict[str, Any] = {
        "granted_tools": ["list_directory", "read_file", "write_file", "run_command"],
        "allowed_commands": ["echo", "seq", "sh"],
        "allowed_command_globs": [],
        "allowed_domains": [],
        "fs_scope": "workspace-write",
        "mode": "accept-edits",
    }
    policy.update(overrides)
    lines = []
    for key, value in policy.items():
        if isinstance(value, list):
            lines.append(f"{key} = [{', '.join(repr(v).replace(chr(39), chr(34)) for v in value)}]")
        else:
            lines.append(f'{key} = "{value}"')
    path.write_text("\n".join(lines) + "\n")
    return path


def server(daemon: Daemon, policy: Path) -> StdioServerParameters:
    return StdioServerParameters(
        command=sys.executable,
        args=[
            "-m",
            "hostcap.mcp_cli",
            "mcp",
            "--socket",
            str(daemon.socket),
            "--config",
            str(policy),
        ],
        cwd=str(REPO),
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": ""},
    )


def text_of(result: types.CallToolResult) -> str:
    return "\n".join(block.text for block in result.content if isinstance(block, types.TextContent))


def answering(decision: str | None) -> Any:
    async def elicit(
        context: ClientRequestContext, params: types.ElicitRequestParams
    ) -> types.ElicitResult:
        answered.append(params.message)
        if decision is None:
            return types.ElicitResult(action="decline")
        return types.ElicitResult(action="accept", content={"decision": decision})

    answered: list[str] = []
    elicit.answered = answered  # type: ignore[attr-defined]
    return elicit


@pytest.fixture
def mcp_daemon(start_daemon: Callable[..., Daemon]) -> Daemon:
    daemon = start_daemon()
    (daemon.root() / "notes.txt").write_text("hello over mcp\n")
    return daemon


async def test_lists_the_granted_tools_with_annotations(mcp_daemon: Daemon, tmp_path: Path) -> None:
    async with Client(
        server(mcp_daemon, write_policy(tmp_path / "p.toml")), mode="legacy"
    ) as client:
        listed = await client.list_tools()
    tools = {tool.name: tool for tool in listed.tools}
    assert set(tools) == {"list_directory", "read_file", "write_file", "run_command"}
    read = tools["read_file"].annotations
    assert read is not None and read.read_only_hint is True and read.destructive_hint is False
    run = tools["run_command"].annotations
    assert run is not None and run.read_only_hint is False and run.destructive_hint is True
    write = tools["write_file"].annotations
    assert write is not None and write.idempotent_hint is True and write.open_world_hint is False
    assert "max_bytes" not in tools["read_file"].input_schema["properties"]  # config-only


async def test_calls_run_through_the_policy_and_the_daemon(
    mcp_daemon: Daemon, tmp_path: Path
) -> None:
    async with Client(
        server(mcp_daemon, write_policy(tmp_path / "p.toml")), mode="legacy"
    ) as client:
        read = await client.call_tool("read_file", {"path": "notes.txt"})
        assert not read.is_error
        assert "hello over mcp" in text_of(read) and "untrusted data" in text_of(read)
        written = await client.call_tool("write_file", {"path": "out.txt", "content": "from mcp\n"})
        assert not written.is_error  # accept-edits approves a write inside the workspace
        escape = await client.call_tool("read_file", {"path": "../../../etc/shadow"})
        assert escape.is_error and "path_escapes_root" in text_of(escape)
        unknown = await client.call_tool("no_such_tool", {})
        assert unknown.is_error and "unknown tool" in text_of(unknown)
    assert (mcp_daemon.root() / "out.txt").read_text() == "from mcp\n"


async def test_a_command_off_the_allowlist_is_denied(mcp_daemon: Daemon, tmp_path: Path) -> None:
    policy = write_policy(tmp_path / "p.toml", mode="auto")
    async with Client(server(mcp_daemon, policy), mode="legacy") as client:
        denied = await client.call_tool("run_command", {"command": "rm", "args": ["-rf", "."]})
    assert denied.is_error and "command_not_allowed" in text_of(denied)
    assert (mcp_daemon.root() / "notes.txt").exists()


async def test_without_elicitation_a_card_is_a_denial_with_its_reason(
    mcp_daemon: Daemon, tmp_path: Path
) -> None:
    async with Client(
        server(mcp_daemon, write_policy(tmp_path / "p.toml")), mode="legacy"
    ) as client:
        denied = await client.call_tool("run_command", {"command": "echo", "args": ["never"]})
    text = text_of(denied)
    assert denied.is_error and "no_approval_hook" in text and "cannot be asked" in text


async def test_elicitation_accept_runs_the_call(mcp_daemon: Daemon, tmp_path: Path) -> None:
    elicit = answering("approve")
    policy = write_policy(tmp_path / "p.toml")
    async with Client(
        server(mcp_daemon, policy), mode="legacy", elicitation_callback=elicit
    ) as client:
        result = await client.call_tool(
            "run_command", {"command": "echo", "args": ["approved", "run"]}
        )
    assert not result.is_error and "approved run" in text_of(result)
    assert len(elicit.answered) == 1 and "echo approved run" in elicit.answered[0]


async def test_elicitation_decline_rejects_the_call(
    mcp_daemon: Daemon, tmp_path: Path, marker: str
) -> None:
    elicit = answering(None)
    policy = write_policy(tmp_path / "p.toml")
    async with Client(
        server(mcp_daemon, policy), mode="legacy", elicitation_callback=elicit
    ) as client:
        result = await client.call_tool(
            "run_command", {"command": "sh", "args": ["-c", f"echo {marker}"]}
        )
    assert result.is_error and "user_rejected" in text_of(result)
    assert marker not in mcp_daemon.audit_path.read_text()  # never reached the daemon


async def test_cancellation_kills_the_daemons_tree(
    mcp_daemon: Daemon, tmp_path: Path, marker: str
) -> None:
    policy = write_policy(tmp_path / "p.toml", mode="auto")
    async with Client(server(mcp_daemon, policy), mode="legacy") as client:
        call = asyncio.ensure_future(
            client.call_tool(
                "run_command", {"command": "sh", "args": ["-c", f"sleep 300; echo {marker}"]}
            )
        )
        for _ in range(400):
            if processes_with(marker):
                break
            await asyncio.sleep(0.05)
        assert processes_with(marker), "the command never started"
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call
        assert wait_gone(marker, timeout=15) == []
        # The server is still serving after the cancel.
        after = await client.call_tool("read_file", {"path": "notes.txt"})
        assert not after.is_error


async def test_progress_carries_streamed_output(mcp_daemon: Daemon, tmp_path: Path) -> None:
    policy = write_policy(tmp_path / "p.toml", mode="auto")
    messages: list[str] = []

    async def progress(value: float, total: float | None, message: str | None) -> None:
        messages.append(message or "")

    async with Client(server(mcp_daemon, policy), mode="legacy") as client:
        result = await client.call_tool(
            "run_command",
            {"command": "sh", "args": ["-c", "echo first; sleep 0.2; echo second"]},
            progress_callback=progress,
        )
    assert not result.is_error and "second" in text_of(result)
    streamed = "".join(messages)
    assert "first" in streamed and "second" in streamed


async def test_spilled_output_is_a_readable_resource(mcp_daemon: Daemon, tmp_path: Path) -> None:
    policy = write_policy(tmp_path / "p.toml", mode="auto")
    async with Client(server(mcp_daemon, policy), mode="legacy") as client:
        result = await client.call_tool("run_command", {"command": "seq", "args": ["20000"]})
        assert not result.is_error
        links = [block for block in result.content if isinstance(block, types.ResourceLink)]
        assert len(links) == 1 and links[0].uri in text_of(result)
        full = await client.read_resource(links[0].uri)
        content = full.contents[0]
        assert isinstance(content, types.TextResourceContents)
        assert content.text.splitlines()[-1] == "20000" and "\n1\n2\n3\n" in content.text
        with pytest.raises(Exception, match="unknown resource"):
            await client.read_resource("hostcap-spill:other/0001")


def test_print_config_snippet(tmp_path: Path) -> None:
    import json
    import subprocess

    out = subprocess.run(
        [sys.executable, "-m", "hostcap.mcp_cli", "mcp", "--socket", "x.sock", "--config", "p.toml",
         "--print-config-snippet"],
        cwd=tmp_path, capture_output=True, text=True, check=True,
    )  # fmt: skip
    entry = json.loads(out.stdout)["mcpServers"]["hostcap"]
    assert entry["args"] == [
        "mcp",
        "--socket",
        str(tmp_path / "x.sock"),
        "--config",
        str(tmp_path / "p.toml"),
    ]


def test_a_bad_policy_file_is_refused(tmp_path: Path) -> None:
    import subprocess

    policy = tmp_path / "p.toml"
    policy.write_text('granted_tools = ["read_file"]\nmode = "yolo"\n')
    out = subprocess.run(
        [sys.executable, "-m", "hostcap.mcp_cli", "mcp", "--socket", "x.sock", "--config", str(policy)],
        capture_output=True, text=True, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert out.returncode == 2 and "mode must be one of" in out.stderr
    policy.write_text('granted_tools = ["read_file"]\ngranted_tool = ["run_command"]\n')
    out = subprocess.run(
        [sys.executable, "-m", "hostcap.mcp_cli", "mcp", "--socket", "x.sock", "--config", str(policy)],
        capture_output=True, text=True, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert out.returncode == 2 and "unknown keys: granted_tool" in out.stderr


async def test_cancellation_while_streaming_kills_the_tree(
    mcp_daemon: Daemon, tmp_path: Path, marker: str
) -> None:
    policy = write_policy(tmp_path / "p.toml", mode="auto")
    seen: list[str] = []

    async def progress(value: float, total: float | None, message: str | None) -> None:
        seen.append(message or "")

    async with Client(server(mcp_daemon, policy), mode="legacy") as client:
        call = asyncio.ensure_future(
            client.call_tool(
                "run_command",
                {"command": "sh", "args": ["-c", f"echo started; sleep 300; echo {marker}"]},
                progress_callback=progress,
            )
        )
        for _ in range(400):
            if processes_with(marker) and seen:
                break
            await asyncio.sleep(0.05)
        assert processes_with(marker) and "started" in "".join(seen)
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call
        assert wait_gone(marker, timeout=15) == []


@pytest.mark.parametrize(
    ("decision", "runs"), [("approve", True), (None, False), ("not-a-choice", False)]
)
async def test_a_2026_connection_asks_through_input_required(
    mcp_daemon: Daemon, tmp_path: Path, decision: str | None, runs: bool
) -> None:
    # The modern era forbids server-to-client requests: the card rides an
    # InputRequiredResult and the client retries with the user's answer.
    elicit = answering(decision)
    policy = write_policy(tmp_path / "p.toml")
    async with Client(
        server(mcp_daemon, policy), mode="auto", elicitation_callback=elicit
    ) as client:
        assert client.protocol_version >= "2026-07-28"
        listed = await client.list_tools()
        assert "read_file" in {tool.name for tool in listed.tools}
        read = await client.call_tool("read_file", {"path": "notes.txt"})
        assert not read.is_error and "hello over mcp" in text_of(read)
        result = await client.call_tool(
            "run_command", {"command": "echo", "args": ["asked", "first"]}
        )
    assert len(elicit.answered) == 1 and "echo asked first" in elicit.answered[0]
    if runs:
        assert not result.is_error and "asked first" in text_of(result)
    else:
        assert result.is_error and "user_rejected" in text_of(result)


async def test_a_2026_connection_without_elicitation_fails_closed(
    mcp_daemon: Daemon, tmp_path: Path
) -> None:
    async with Client(server(mcp_daemon, write_policy(tmp_path / "p.toml")), mode="auto") as client:
        assert client.protocol_version >= "2026-07-28"
        denied = await client.call_tool("run_command", {"command": "echo", "args": ["x"]})
    assert denied.is_error and "no_approval_hook" in text_of(denied)


@pytest.mark.parametrize(
    ("args", "said"),
    [
        ({"args": ["-c", "sleep 30"], "timeout_s": 1}, "timeout"),  # the wall-clock limit
        ({"args": ["-c", "exit 3"]}, "exit code 3"),
        ({"args": ["-c", "kill -KILL $$"]}, "killed by"),
    ],
)
async def test_a_command_that_did_not_end_cleanly_is_an_error_result(
    mcp_daemon: Daemon, tmp_path: Path, args: dict[str, Any], said: str
) -> None:
    policy = write_policy(tmp_path / "p.toml", mode="auto")
    async with Client(server(mcp_daemon, policy), mode="legacy") as client:
        result = await client.call_tool("run_command", {"command": "sh", **args})
        clean = await client.call_tool("run_command", {"command": "sh", "args": ["-c", "true"]})
    assert result.is_error and said in text_of(result)
    assert not clean.is_error


async def test_edit_file_through_hostcap_mcp(mcp_daemon: Daemon, tmp_path: Path) -> None:
    policy = write_policy(
        tmp_path / "p.toml",
        granted_tools=["read_file", "write_file", "edit_file"],
        mode="accept-edits",
    )
    async with Client(server(mcp_daemon, policy), mode="legacy") as client:
        written = await client.call_tool(
            "write_file", {"path": "edit-me.txt", "content": "alpha\nbeta\nbeta\n"}
        )
        assert not written.is_error
        ambiguous = await client.call_tool(
            "edit_file", {"path": "edit-me.txt", "old_text": "beta", "new_text": "gamma"}
        )
        edited = await client.call_tool(
            "edit_file", {"path": "edit-me.txt", "old_text": "alpha", "new_text": "ALPHA"}
        )
    assert ambiguous.is_error and "occurs 2 times" in text_of(ambiguous)
    assert not edited.is_error and "-alpha\n+ALPHA" in text_of(edited)
    assert (mcp_daemon.root() / "edit-me.txt").read_text() == "ALPHA\nbeta\nbeta\n"


async def test_session_tools_over_mcp(mcp_daemon: Daemon, tmp_path: Path, marker: str) -> None:
    """exec_command, read_output and kill_session (issue 30) through hostcap mcp."""
    policy = write_policy(
        tmp_path / "p.toml",
        mode="auto",
        granted_tools=["exec_command", "read_output", "kill_session"],
    )
    async with Client(server(mcp_daemon, policy), mode="legacy") as client:
        started = await client.call_tool(
            "exec_command",
            {"command": "sh", "args": ["-c", f"echo up-{marker}; sleep 300"], "yield_time_ms": 500},
        )
        text = text_of(started)
        assert not started.is_error and f"up-{marker}" in text and "untrusted data" in text
        session = text.split("still running: session ", 1)[1].split("]", 1)[0]
        read = await client.call_tool("read_output", {"session_id": session, "yield_time_ms": 0})
        assert not read.is_error and "still running" in text_of(read)
        killed = await client.call_tool("kill_session", {"session_id": session})
        assert not killed.is_error and "killed by SIGKILL" in text_of(killed)
        denied = await client.call_tool("exec_command", {"command": "rm", "args": ["-rf", "."]})
        assert denied.is_error and "command_not_allowed" in text_of(denied)
    assert wait_gone(marker, 10) == []


async def test_write_stdin_over_mcp(mcp_daemon: Daemon, tmp_path: Path, marker: str) -> None:
    """exec_command on a terminal and write_stdin (issue 31) through hostcap mcp:
    a write into a shell takes a card (an elicitation) each time until the
    session is granted; a declined card writes nothing."""
    policy = write_policy(
        tmp_path / "p.toml",
        mode="accept-edits",
        granted_tools=["exec_command", "write_stdin", "kill_session"],
    )
    decisions = iter(["approve", None, "allow-session"])
    asked: list[str] = []

    async def elicit(
        context: ClientRequestContext, params: types.ElicitRequestParams
    ) -> types.ElicitResult:
        asked.append(params.message)
        decision = next(decisions)
        if decision is None:
            return types.ElicitResult(action="decline")
        return types.ElicitResult(action="accept", content={"decision": decision})

    async with Client(
        server(mcp_daemon, policy), mode="legacy", elicitation_callback=elicit
    ) as client:
        listed = {tool.name: tool for tool in (await client.list_tools()).tools}
        assert {"tty", "stdin_open"} <= set(listed["exec_command"].input_schema["properties"])
        hints = listed["write_stdin"].annotations
        assert hints is not None and hints.read_only_hint is False
        started = await client.call_tool(
            "exec_command", {"command": "sh", "tty": True, "yield_time_ms": 200}
        )
        text = text_of(started)
        assert not started.is_error, text
        session = text.split("still running: session ", 1)[1].split("]", 1)[0]
        declined = await client.call_tool(
            "write_stdin", {"session_id": session, "chars": f"echo no-{marker}\n"}
        )
        assert declined.is_error and "write_stdin" in asked[-1]
        typed = await client.call_tool(
            "write_stdin",
            {
                "session_id": session,
                "chars": f"echo yes-$((6*7))-{marker}\n",
                "yield_time_ms": 2000,
            },
        )
        out = text_of(typed)
        assert not typed.is_error and f"yes-42-{marker}" in out and "untrusted data" in out
        assert f"no-{marker}" not in out
        again = await client.call_tool(
            "write_stdin", {"session_id": session, "chars": "echo again\n", "yield_time_ms": 1000}
        )
        assert not again.is_error and len(asked) == 3  # the grant covered it
        await client.call_tool("kill_session", {"session_id": session})
