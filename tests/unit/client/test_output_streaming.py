"""A command's output through `dispatch` as it comes (issue 34, item 6):
`DispatchContext.on_output` receives bounded, `Untrusted` chunks while the
program runs; the outcome still carries the whole bounded result."""

from __future__ import annotations

import asyncio

import pytest
from client_support import MakeCtx
from hostcap import ToolCall, ToolPolicy, ToolResultLimits, create_tool_registry
from hostcap.builtins import BUILTIN_TOOLS
from hostcap.dispatch_context import OutputChunk
from hostcap.testing import MemoryToolHost, ProgramIO
from hostcap.untrusted import Untrusted, UntrustedValueError


def _host() -> tuple[MemoryToolHost, asyncio.Event]:
    host = MemoryToolHost()
    assert host.process is not None
    release = asyncio.Event()

    async def talk(io: ProgramIO) -> int:
        io.out("first line\n")
        io.err("a warning\n")
        await release.wait()  # the program is still running until the test says so
        io.out("last line\n")
        return 0

    async def flood(io: ProgramIO) -> int:
        for _ in range(64):
            io.out("x" * 1024 + "\n")
            await asyncio.sleep(0)
        return 0

    host.process.programs.update({"talk": talk, "flood": flood})
    return host, release


POLICY = ToolPolicy(allowed_commands={"talk", "flood", "echo"})


async def test_chunks_arrive_while_the_command_runs_and_are_untrusted(make_ctx: MakeCtx) -> None:
    host, release = _host()
    registry = create_tool_registry(tools=BUILTIN_TOOLS, host=host)
    chunks: list[OutputChunk] = []

    async def on_output(chunk: OutputChunk) -> None:
        chunks.append(chunk)
        assert host.process is not None
        if len(chunks) == 2:
            # Both early chunks came while the program was still live.
            assert host.process.live
            release.set()

    outcome = await registry.dispatch(
        ToolCall("s1", "run_command", {"command": "talk"}),
        make_ctx(tool_policy=POLICY, on_output=on_output),
    )
    assert [(c.stream, c.text.unwrap()) for c in chunks] == [
        ("stdout", "first line\n"), ("stderr", "a warning\n"), ("stdout", "last line\n"),
    ]  # fmt: skip
    assert all(isinstance(c.text, Untrusted) and c.tool_call_id == "s1" for c in chunks)
    with pytest.raises(UntrustedValueError):
        str(chunks[0].text)
    # The outcome is the whole result, as without streaming.
    assert "first line" in outcome.tool_result.unwrap()
    assert "last line" in outcome.tool_result.unwrap()


async def test_the_stream_is_bounded_and_says_where_it_stopped(make_ctx: MakeCtx) -> None:
    host, _ = _host()
    registry = create_tool_registry(tools=BUILTIN_TOOLS, host=host)
    chunks: list[OutputChunk] = []
    limits = ToolResultLimits(max_streamed_bytes=10_000)
    await registry.dispatch(
        ToolCall("s2", "run_command", {"command": "flood"}),
        make_ctx(tool_policy=POLICY, on_output=chunks.append, limits=limits),
    )
    streamed = [c for c in chunks if not c.final]
    assert sum(len(c.text.unwrap().encode()) for c in streamed) == 10_000
    assert chunks[-1].final and "streaming stopped after 10000 bytes" in chunks[-1].text.unwrap()
    assert sum(c.final for c in chunks) == 1


async def test_a_call_without_on_output_streams_nothing(make_ctx: MakeCtx) -> None:
    host, _ = _host()
    registry = create_tool_registry(tools=BUILTIN_TOOLS, host=host)
    outcome = await registry.dispatch(
        ToolCall("s3", "run_command", {"command": "echo", "args": ["hi"]}),
        make_ctx(tool_policy=POLICY),
    )
    assert "hi" in outcome.tool_result.unwrap()
