"""Issue 16 (6): spill() takes the limits and the cancel signal; a full store
says so; a ToolCall's args may be the JSON text OpenAI sends."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from client_support import MakeCtx
from hostcap import (
    BUILTIN_TOOLS,
    DEFAULT_TOOL_RESULT_LIMITS,
    LocalOutputStore,
    MemoryOutputStore,
    ToolArgsInvalidError,
    ToolCall,
    ToolCancelledError,
    ToolRegistry,
    ToolResultLimits,
    UnknownToolError,
    create_tool_registry,
)
from hostcap.host import SpilledResult
from hostcap.output_store import OutputStoreError
from hostcap.testing import MemoryToolHost

BIG = ToolCall("c1", "run_command", {"command": "seq", "args": ["20000"]})


class RecordingStore(MemoryOutputStore):
    """A real memory store that remembers what spill() was given."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple[ToolResultLimits, asyncio.Event | None]] = []

    async def spill(
        self,
        text: str,
        limits: ToolResultLimits = DEFAULT_TOOL_RESULT_LIMITS,
        signal: asyncio.Event | None = None,
    ) -> SpilledResult:
        self.calls.append((limits, signal))
        return await super().spill(text, limits, signal)


async def test_spill_is_given_the_limits_and_the_cancel_signal(make_ctx: MakeCtx) -> None:
    store = RecordingStore()
    registry = create_tool_registry(tools=BUILTIN_TOOLS, host=MemoryToolHost(output_store=store))
    limits = ToolResultLimits(max_bytes=4096, max_lines=50)
    signal = asyncio.Event()
    outcome = await registry.dispatch(BIG, make_ctx(limits=limits, signal=signal))
    assert outcome.spilled is not None
    assert store.calls == [(limits, signal)]


@pytest.mark.parametrize("store_type", [MemoryOutputStore, LocalOutputStore])
async def test_a_store_honours_the_spill_limit_and_a_fired_signal(store_type: Any) -> None:
    store = store_type()
    try:
        with pytest.raises(OutputStoreError) as too_large:
            await store.spill("x" * 2000, ToolResultLimits(max_spill_bytes=1000))
        assert too_large.value.kind == "too_large"
        fired = asyncio.Event()
        fired.set()
        with pytest.raises(OutputStoreError) as cancelled:
            await store.spill("x", ToolResultLimits(), fired)
        assert cancelled.value.kind == "cancelled"
        assert (await store.spill("x" * 500, ToolResultLimits(max_spill_bytes=1000))).byte_length
    finally:
        await store.sweep()


async def test_a_full_store_says_store_full_not_no_store(make_ctx: MakeCtx) -> None:
    host = MemoryToolHost(output_store=MemoryOutputStore(max_total_bytes=1000))
    registry = create_tool_registry(tools=BUILTIN_TOOLS, host=host)
    outcome = await registry.dispatch(BIG, make_ctx())
    text = outcome.tool_result.unwrap()
    assert outcome.truncated and outcome.spilled is None
    assert "(output store full)" in text
    assert "no output store" not in text


async def test_no_store_still_says_no_store(make_ctx: MakeCtx) -> None:
    registry = create_tool_registry(
        tools=BUILTIN_TOOLS, host=MemoryToolHost(without={"output_store"})
    )
    outcome = await registry.dispatch(BIG, make_ctx())
    assert "(no output store)" in outcome.tool_result.unwrap()


async def test_a_signal_fired_during_the_spill_takes_the_cancel_path(make_ctx: MakeCtx) -> None:
    signal = asyncio.Event()

    class SlowStore(MemoryOutputStore):
        async def spill(
            self,
            text: str,
            limits: ToolResultLimits = DEFAULT_TOOL_RESULT_LIMITS,
            signal_: asyncio.Event | None = None,
        ) -> SpilledResult:
            signal.set()
            await asyncio.Event().wait()
            raise AssertionError("unreachable")

    registry = create_tool_registry(
        tools=BUILTIN_TOOLS, host=MemoryToolHost(output_store=SlowStore())
    )
    with pytest.raises(ToolCancelledError):
        await registry.dispatch(BIG, make_ctx(signal=signal))


# ---------------------------------------------------------------- JSON arguments


async def test_json_text_arguments_are_parsed(registry: ToolRegistry, make_ctx: MakeCtx) -> None:
    call = ToolCall("c1", "run_command", '{"command": "echo", "args": ["from", "json"]}')
    assert dict(call.args) == {"command": "echo", "args": ["from", "json"]}
    outcome = await registry.dispatch(call, make_ctx())
    assert "from json" in outcome.tool_result.unwrap()
    assert dict(ToolCall("c2", "git_status", "").args) == {}
    assert dict(ToolCall("c3", "git_status", b'{"x": 1}').args) == {"x": 1}


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ('{"command": "echo",', "not valid JSON"),
        ('["echo"]', "must be a JSON object"),
        ("42", "must be a JSON object"),
        ("[" * 100_000, "not valid JSON"),
    ],
    ids=["truncated", "array", "number", "deeply nested"],
)
async def test_bad_json_text_is_a_clear_args_error_never_a_type_error(
    text: str, why: str, registry: ToolRegistry, make_ctx: MakeCtx
) -> None:
    call = ToolCall("c1", "run_command", text)  # no TypeError here
    with pytest.raises(ToolArgsInvalidError) as caught:
        await registry.dispatch(call, make_ctx())
    assert why in caught.value.message and caught.value.loop_correctable
    # An unknown name is still the unknown-tool answer, not an argument error.
    with pytest.raises(UnknownToolError):
        await registry.dispatch(ToolCall("c2", "nope", text), make_ctx())
