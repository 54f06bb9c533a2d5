"""The os tools (`read_clipboard`, `notify`), `read_media` (the output store) and `invoke_agent` (the engine's delegate)."""

from __future__ import annotations

from typing import Annotated, Any, ClassVar

from pydantic import AfterValidator, Field

from hostcap.builtins.common import FrozenArgs, FrozenResult, printable
from hostcap.errors import ToolPolicyError, ToolUnavailableError
from hostcap.host import (
    MediaHandle,
    OsCapability,
    ToolHost,
    ToolOutputStore,
)
from hostcap.output_store import OutputStoreError
from hostcap.policy import PolicyTarget, ToolPolicyClass
from hostcap.tooldef import ToolDef, ToolRunContext, require_arm


class ReadClipboardArgs(FrozenArgs):
    pass


class ClipboardResult(FrozenResult):
    text: str

    def model_text(self) -> str:
        return self.text


async def _read_clipboard(
    args: ReadClipboardArgs, host: ToolHost, ctx: ToolRunContext
) -> ClipboardResult:
    os_arm: OsCapability = require_arm(host, "os", ctx.tool_id)
    return ClipboardResult(text=await os_arm.read_clipboard())


class NotifyArgs(FrozenArgs):
    title: Annotated[str, Field(min_length=1, max_length=256), AfterValidator(printable)]
    body: Annotated[str, Field(max_length=4096), AfterValidator(printable)] = ""


class NotifyResult(FrozenResult):
    delivered: bool

    untrusted_content: ClassVar[bool] = False

    def model_text(self) -> str:
        return "notification delivered" if self.delivered else "notification not delivered"


async def _notify(args: NotifyArgs, host: ToolHost, ctx: ToolRunContext) -> NotifyResult:
    os_arm: OsCapability = require_arm(host, "os", ctx.tool_id)
    await os_arm.notify(args.title, args.body)
    return NotifyResult(delivered=True)


# ------------------------------------------------------------------------ media


class ReadMediaArgs(FrozenArgs):
    handle: Annotated[str, Field(min_length=1, max_length=512), AfterValidator(printable)] = Field(
        description="A media handle an earlier result named (e.g. a binary file read_file stored)."
    )


class ReadMediaResult(FrozenResult):
    media: MediaHandle

    def model_text(self) -> str:
        # Never the bytes, never base64: the engine delivers the handle as an
        # attachment, fenced as untrusted content.
        return (
            f"[media {self.media.handle}: {self.media.media_type}, {self.media.byte_length} bytes; "
            "attached by handle as untrusted content]"
        )


async def _read_media(args: ReadMediaArgs, host: ToolHost, ctx: ToolRunContext) -> ReadMediaResult:
    store: ToolOutputStore = require_arm(host, "output_store", ctx.tool_id)
    try:
        media = await store.media(args.handle)
    except OutputStoreError:
        # Not media this run holds: the scope-set denial (refused before any effect).
        raise ToolPolicyError("media_scope_denied", tool_id=ctx.tool_id) from None
    return ReadMediaResult(media=media)


# ------------------------------------------------------------------ delegation


class InvokeAgentArgs(FrozenArgs):
    node_id: Annotated[str, Field(min_length=1, max_length=256)] = Field(
        description="The agent node to run."
    )
    input: Any = Field(default=None, description="Input for that node.")


class InvokeAgentResult(FrozenResult):
    output: Any


async def _invoke_agent(
    args: InvokeAgentArgs, host: ToolHost, ctx: ToolRunContext
) -> InvokeAgentResult:
    if ctx.invoke_agent is None:
        raise ToolUnavailableError(tool_id=ctx.tool_id, arm="invoke_agent")
    return InvokeAgentResult(output=await ctx.invoke_agent(args.node_id, args.input))


READ_CLIPBOARD = ToolDef(
    id="read_clipboard", source="builtin", description="Read the text on the user's clipboard.",
    args_model=ReadClipboardArgs, result_model=ClipboardResult, dispatch=_read_clipboard,
    policy=ToolPolicyClass(os=True), arms=frozenset({"os"}),
)  # fmt: skip

NOTIFY = ToolDef(
    id="notify", source="builtin", description="Show the user a desktop notification.",
    args_model=NotifyArgs, result_model=NotifyResult, dispatch=_notify,
    policy=ToolPolicyClass(os=True), arms=frozenset({"os"}),
)  # fmt: skip

READ_MEDIA = ToolDef(
    id="read_media", source="builtin",
    description="Attach stored media (an image, a PDF) to the conversation by its handle.",
    args_model=ReadMediaArgs, result_model=ReadMediaResult, dispatch=_read_media,
    policy=ToolPolicyClass(media=True), arms=frozenset({"output_store"}),
    policy_target=lambda a: PolicyTarget(media_handle=a.handle),
)  # fmt: skip

INVOKE_AGENT = ToolDef(
    id="invoke_agent", source="builtin", description="Run another agent node with an input and return its output.",
    args_model=InvokeAgentArgs, result_model=InvokeAgentResult, dispatch=_invoke_agent,
    policy=ToolPolicyClass(), arms=frozenset({"invoke_agent"}),
)  # fmt: skip
