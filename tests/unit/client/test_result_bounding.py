"""Model-facing bounding, spill to the output store, output mapping on the full result."""

from __future__ import annotations

from typing import Any

import pytest
from client_support import MakeCtx
from hostcap import (
    BUILTIN_TOOLS,
    ToolCall,
    ToolRegistry,
    ToolResultLimits,
    ToolUnavailableError,
    create_tool_registry,
)
from hostcap.bounding import bound_text, fits
from hostcap.output_store import MemoryOutputStore
from hostcap.testing import MemoryToolHost
from hostcap.untrusted import Untrusted
from hypothesis import given, settings
from hypothesis import strategies as st


async def test_a_result_over_the_ceiling_is_bounded_spilled_and_still_mapped_whole(
    host: MemoryToolHost, registry: ToolRegistry, make_ctx: MakeCtx
) -> None:
    ctx = make_ctx(config={"output_mapping": {"stdout": "numbers", "exit_code": "status"}})
    outcome = await registry.dispatch(
        ToolCall("c1", "run_command", {"command": "seq", "args": ["5000"]}), ctx
    )
    full_stdout = "".join(f"{i}\n" for i in range(1, 5001))

    # output_mapping saw the full result; it is still tool output (issue 16).
    assert outcome.state_updates == {"numbers": Untrusted(full_stdout), "status": Untrusted(0)}

    # The model sees head + one marker line + tail, within the default ceilings.
    text = outcome.tool_result.unwrap()
    assert outcome.truncated
    assert len(text.encode()) <= 32 * 1024 and text.count("\n") + 1 <= 400
    lines = text.splitlines()
    assert lines[0] == "$ seq 5000"
    assert lines[-1] == "5000"
    (marker,) = [line for line in lines if line.startswith("[... hostcap:")]
    assert outcome.spilled is not None
    assert outcome.spilled.handle in marker
    assert "omitted" in marker

    # The spill holds the full model-facing text.
    store = host.output_store
    assert store is not None
    spilled = (await store.open(outcome.spilled.handle)).decode()
    assert spilled.endswith("5000")
    assert full_stdout.rstrip("\n") in spilled
    assert outcome.spilled.byte_length == len(spilled.encode())


async def test_a_result_within_the_ceiling_is_untouched(
    registry: ToolRegistry, make_ctx: MakeCtx
) -> None:
    outcome = await registry.dispatch(
        ToolCall("c1", "run_command", {"command": "seq", "args": ["3"]}), make_ctx()
    )
    assert outcome.tool_result.unwrap() == "$ seq 3\n[exit code 0]\n--- stdout ---\n1\n2\n3"
    assert not outcome.truncated and outcome.spilled is None


async def test_custom_limits_apply(registry: ToolRegistry, make_ctx: MakeCtx) -> None:
    limits = ToolResultLimits(max_bytes=2048, max_lines=10)
    outcome = await registry.dispatch(
        ToolCall("c1", "run_command", {"command": "seq", "args": ["100"]}), make_ctx(limits=limits)
    )
    text = outcome.tool_result.unwrap()
    assert fits(text, limits)
    assert outcome.truncated


async def test_without_an_output_store_the_marker_says_the_text_was_not_kept(
    make_ctx: MakeCtx,
) -> None:
    registry = create_tool_registry(
        tools=BUILTIN_TOOLS, host=MemoryToolHost(without={"output_store"})
    )
    outcome = await registry.dispatch(
        ToolCall("c1", "run_command", {"command": "seq", "args": ["9000"]}), make_ctx()
    )
    assert outcome.truncated and outcome.spilled is None
    assert "not kept" in outcome.tool_result.unwrap()


async def test_a_swept_store_does_not_fail_a_finished_call(make_ctx: MakeCtx) -> None:
    store = MemoryOutputStore()
    await store.sweep()
    registry = create_tool_registry(tools=BUILTIN_TOOLS, host=MemoryToolHost(output_store=store))
    outcome = await registry.dispatch(
        ToolCall("c1", "run_command", {"command": "seq", "args": ["9000"]}), make_ctx()
    )
    assert outcome.truncated and outcome.spilled is None


async def test_a_binary_read_is_a_handle_with_its_media_type_never_inline(
    make_ctx: MakeCtx,
) -> None:
    host = MemoryToolHost()
    assert host.fs is not None
    png = b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(range(256))
    host.fs.put("logo.png", png)
    registry = create_tool_registry(tools=BUILTIN_TOOLS, host=host)
    outcome = await registry.dispatch(ToolCall("c1", "read_file", {"path": "logo.png"}), make_ctx())
    assert outcome.media is not None
    media = outcome.media.unwrap()
    assert media.media_type == "image/png"
    assert media.byte_length == len(png)
    text = outcome.tool_result.unwrap()
    assert media.handle in text and "image/png" in text
    assert "PNG" not in text.replace("image/png", "")  # no bytes, no base64
    result: Any = outcome.result.unwrap()
    assert result.content is None
    assert host.output_store is not None
    assert await host.output_store.open(media.handle) == png


async def test_a_binary_read_without_an_output_store_is_unavailable(make_ctx: MakeCtx) -> None:
    host = MemoryToolHost(without={"output_store"})
    assert host.fs is not None
    host.fs.put("blob.bin", b"\x00\x01\x02")
    registry = create_tool_registry(tools=BUILTIN_TOOLS, host=host)
    with pytest.raises(ToolUnavailableError) as caught:
        await registry.dispatch(ToolCall("c1", "read_file", {"path": "blob.bin"}), make_ctx())
    assert caught.value.arm == "output_store"


def test_limits_below_the_minimum_are_refused() -> None:
    with pytest.raises(ValueError):
        ToolResultLimits(max_bytes=10)
    with pytest.raises(ValueError):
        ToolResultLimits(max_lines=1)


@settings(max_examples=300, deadline=None)
@given(
    text=st.lists(
        st.sampled_from(["a", "é", "😀", "\n", " ", "x" * 50, "y" * 700]), max_size=400
    ).map("".join),
    max_bytes=st.integers(min_value=512, max_value=4096),
    max_lines=st.integers(min_value=4, max_value=60),
    handle=st.sampled_from([None, "hostcap-spill:run/0001"]),
)
def test_bounded_text_always_fits_and_keeps_head_and_tail(
    text: str, max_bytes: int, max_lines: int, handle: str | None
) -> None:
    limits = ToolResultLimits(max_bytes=max_bytes, max_lines=max_lines)
    bounded = bound_text(text, limits, handle)
    assert fits(bounded.text, limits)
    if not bounded.truncated:
        assert bounded.text == text
        return
    head, _, rest = bounded.text.partition("[... hostcap:")
    marker, _, tail = rest.partition("\n")
    # The head is the start of the original, the tail its end (a byte-cut
    # fragment has its line break shown as a space), and the marker accounts
    # for exactly what is missing between them.
    assert text.startswith(head.removesuffix("\n"))
    assert text.replace("\n", " ").endswith(tail.replace("\n", " "))
    shown = len(head.encode()) + len(tail.encode())
    assert bounded.omitted_bytes + shown in (len(text.encode()), len(text.encode()) + 1)
    assert f" {bounded.omitted_bytes} bytes in {bounded.omitted_lines} lines omitted" in marker
    if handle:
        assert handle in marker
