"""Tool ids (issue 34, item 4): exactly `[A-Za-z0-9_-]`, 1 to 64 characters,
and every id list and field-only refusal list in UTF-16 code-unit order."""

from __future__ import annotations

import pytest
from client_support import MakeCtx
from hostcap import (
    BUILTIN_TOOLS,
    ToolArgsInvalidError,
    ToolCall,
    ToolDef,
    ToolPolicyClass,
    ToolRegistrationError,
    UnknownToolError,
    create_tool_registry,
)
from hostcap.builtins import ReadFileArgs, ReadFileResult
from hostcap.ids import utf16_sorted
from hostcap.testing import MemoryEgress, MemoryToolHost


def _tool(tool_id: str) -> ToolDef[ReadFileArgs, ReadFileResult]:
    async def dispatch(args: object, host: object, ctx: object) -> ReadFileResult:
        raise AssertionError("never dispatched")

    return ToolDef(
        id=tool_id, source="builtin", description="x", args_model=ReadFileArgs,
        result_model=ReadFileResult, policy=ToolPolicyClass(), dispatch=dispatch,  # type: ignore[arg-type]
    )  # fmt: skip


@pytest.mark.parametrize(
    "tool_id",
    [
        "r\u00e9ad",  # a Latin letter with an accent: isalnum() admits it
        "\uff21tool",  # a full-width A
        "\U0001d400tool",  # a mathematical bold A, outside the BMP
        "read\u0661",  # an Arabic-Indic digit
        "tool\n",  # a trailing newline (`$` would admit it)
        "a tool",
        "a.tool",
        "",
        "a" * 65,
    ],
)
def test_an_id_outside_the_ascii_alphabet_or_the_length_is_refused(tool_id: str) -> None:
    with pytest.raises(ToolRegistrationError) as refused:
        _tool(tool_id)
    assert "[A-Za-z0-9_-]" in str(refused.value)


@pytest.mark.parametrize("tool_id", ["a", "read_file", "mcp-github_list", "A" * 64, "_-09"])
def test_an_id_of_the_alphabet_within_the_length_is_accepted(tool_id: str) -> None:
    assert _tool(tool_id).id == tool_id


def test_utf16_order_differs_from_code_point_order_above_the_bmp() -> None:
    words = ["\uffff", "\U0001d400", "a", "Z"]
    # Code points: U+1D400 > U+FFFF. UTF-16 code units: 0xD835 < 0xFFFF.
    assert sorted(words) == ["Z", "a", "\uffff", "\U0001d400"]
    assert utf16_sorted(words) == ["Z", "a", "\U0001d400", "\uffff"]


def test_the_registry_and_the_unknown_tool_list_are_in_utf16_order(make_ctx: MakeCtx) -> None:
    tools = [*BUILTIN_TOOLS, _tool("Zeta"), _tool("alpha"), _tool("_under")]
    registry = create_tool_registry(tools=tools, host=MemoryToolHost(egress=MemoryEgress()))
    ids = list(registry.tool_ids)
    assert ids == utf16_sorted(ids)
    assert ids.index("Zeta") < ids.index("_under") < ids.index("alpha")
    assert [t.id for t in registry.catalogue()] == ids
    error = UnknownToolError("nope", ["b", "\U0001d400x", "\uffffx", "a"])
    assert error.available == ("a", "b", "\U0001d400x", "\uffffx")


async def test_a_field_only_refusal_list_is_in_utf16_order(make_ctx: MakeCtx) -> None:
    registry = create_tool_registry(tools=BUILTIN_TOOLS, host=MemoryToolHost())
    keys = {"\uffff", "\U0001d400", "path"}
    ctx = make_ctx(secret_arg_keys=keys)
    with pytest.raises(ToolArgsInvalidError) as refused:
        await registry.dispatch(
            ToolCall("t", "read_file", {"path": "x", "\uffff": 1, "\U0001d400": 2}), ctx
        )
    assert refused.value.fields == ("path", "\U0001d400", "\uffff")
