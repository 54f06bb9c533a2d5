"""`edit_file` (issue 34, item 7): exact replacement, refused when the old
text is absent or ambiguous, applied with the expected sha256 so a change
made since the read is detected and kept, and a compact diff back."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest
from client_support import MakeCtx
from hostcap import (
    BUILTIN_TOOLS,
    ApprovalPolicy,
    StaticToolHost,
    ToolArgsInvalidError,
    ToolCall,
    ToolExecutionError,
    ToolPolicyError,
    create_tool_registry,
)
from hostcap.host import FileRead
from hostcap.testing import MemoryFs, MemoryToolHost

SOURCE = "def greet():\n    return 'hello'\n\n\ndef part():\n    return 'bye'\n"


def _host() -> MemoryToolHost:
    host = MemoryToolHost()
    assert host.fs is not None
    host.fs.put("app.py", SOURCE)
    return host


def _edit(**args: Any) -> ToolCall:
    return ToolCall("e", "edit_file", {"path": "app.py", **args})


async def test_an_exact_replacement_returns_a_compact_diff(make_ctx: MakeCtx) -> None:
    host = _host()
    registry = create_tool_registry(tools=BUILTIN_TOOLS, host=host)
    outcome = await registry.dispatch(
        _edit(old_text="return 'hello'", new_text="return 'hi'"), make_ctx()
    )
    assert host.fs is not None
    assert host.fs.content("app.py") == SOURCE.replace("'hello'", "'hi'").encode()
    text = outcome.tool_result.unwrap()
    assert text.startswith("edited app.py: 1 replacement")
    assert "-    return 'hello'\n+    return 'hi'\n" in text
    assert "bye" not in text  # only the change and a little context
    assert outcome.result.unwrap().replacements == 1


@pytest.mark.parametrize(
    ("args", "said"),
    [
        ({"old_text": "return 'howdy'", "new_text": "x"}, "does not occur"),
        ({"old_text": "    return", "new_text": "    yield"}, "occurs 2 times"),
        ({"old_text": "def", "new_text": "def"}, "the same"),
    ],
)
async def test_an_absent_or_ambiguous_old_text_is_refused_and_nothing_is_written(
    args: dict[str, Any], said: str, make_ctx: MakeCtx
) -> None:
    host = _host()
    registry = create_tool_registry(tools=BUILTIN_TOOLS, host=host)
    with pytest.raises(ToolArgsInvalidError, match=said) as refused:
        await registry.dispatch(_edit(**args), make_ctx())
    assert refused.value.loop_correctable  # the model can fix its call
    assert host.fs is not None and host.fs.writes == []
    assert host.fs.content("app.py") == SOURCE.encode()


async def test_replace_all_replaces_every_occurrence(make_ctx: MakeCtx) -> None:
    host = _host()
    registry = create_tool_registry(tools=BUILTIN_TOOLS, host=host)
    outcome = await registry.dispatch(
        _edit(old_text="    return", new_text="    yield", replace_all=True), make_ctx()
    )
    assert outcome.result.unwrap().replacements == 2
    assert (
        host.fs is not None
        and host.fs.content("app.py") == SOURCE.replace("    return", "    yield").encode()
    )


class _ChangedUnderneath:
    """The host's own fs arm; another writer changes the file right after the read."""

    def __init__(self, fs: MemoryFs) -> None:
        self.fs = fs

    async def read_file(self, path: str, *, max_bytes: int | None = None) -> FileRead:
        read = await self.fs.read_file(path, max_bytes=max_bytes)
        self.fs.put(path, "someone else's version\n")
        return read

    def __getattr__(self, name: str) -> Any:
        return getattr(self.fs, name)


async def test_a_change_made_since_the_read_is_detected_and_kept(make_ctx: MakeCtx) -> None:
    memory = _host()
    assert memory.fs is not None
    host = StaticToolHost(fs=_ChangedUnderneath(memory.fs))  # type: ignore[arg-type]
    registry = create_tool_registry(tools=BUILTIN_TOOLS, host=host)
    with pytest.raises(ToolExecutionError) as failed:
        await registry.dispatch(_edit(old_text="'hello'", new_text="'hi'"), make_ctx())
    assert failed.value.host_reason == "CONFLICT"
    assert memory.fs.content("app.py") == b"someone else's version\n"  # not lost


async def test_binary_is_refused(make_ctx: MakeCtx) -> None:
    host = _host()
    assert host.fs is not None
    host.fs.put("blob.bin", b"\x00\x01hello\x00")
    registry = create_tool_registry(tools=BUILTIN_TOOLS, host=host)
    with pytest.raises(ToolArgsInvalidError, match="not UTF-8 text"):
        await registry.dispatch(
            ToolCall("e", "edit_file", {"path": "blob.bin", "old_text": "hello", "new_text": "x"}),
            make_ctx(),
        )


async def test_edit_file_is_governed_like_write_file(make_ctx: MakeCtx) -> None:
    host = _host()
    registry = create_tool_registry(tools=BUILTIN_TOOLS, host=host)
    call = _edit(old_text="'hello'", new_text="'hi'")
    with pytest.raises(ToolPolicyError, match="mode_denied"):
        await registry.dispatch(call, make_ctx(approval=ApprovalPolicy("auto", "plan").context()))
    # accept-edits approves an edit inside the workspace, as it does a write.
    await registry.dispatch(call, make_ctx(approval=ApprovalPolicy("accept-edits").context()))
    assert host.fs is not None and b"'hi'" in (host.fs.content("app.py") or b"")


def test_edit_file_is_offered_to_the_models(make_ctx: MakeCtx) -> None:
    from hostcap.adapters import anthropic, openai

    registry = create_tool_registry(tools=BUILTIN_TOOLS, host=_host())
    ctx = make_ctx()
    names = [t["function"]["name"] for t in openai.chat_tools(registry, ctx, strict=True)]
    assert "edit_file" in names
    schema: Mapping[str, Any] = next(
        t["input_schema"]
        for t in anthropic.anthropic_tools(registry, ctx)
        if t["name"] == "edit_file"
    )
    assert set(schema["required"]) == {"path", "old_text", "new_text"}
