"""The fs tools: `read_file`, `write_file`, `list_directory` (the `fs` arm)."""

from __future__ import annotations

from typing import Annotated, ClassVar

from pydantic import Field

from hostcap.builtins.common import FrozenArgs, FrozenResult, PathArg
from hostcap.host import (
    DirEntry,
    FsCapability,
    MediaHandle,
    ToolHost,
    ToolOutputStore,
)
from hostcap.policy import PolicyTarget, ToolPolicyClass
from hostcap.tooldef import ToolDef, ToolRunContext, require_arm


class ReadFileArgs(FrozenArgs):
    path: PathArg = Field(
        description="File to read: relative to the workspace root, or absolute beneath a root."
    )
    max_bytes: int | None = Field(default=None, gt=0)


class ReadFileResult(FrozenResult):
    path: str
    size: int
    truncated: bool
    is_binary: bool
    media_type: str
    sha256: str
    content: str | None = None
    media: MediaHandle | None = None

    def model_text(self) -> str:
        if self.media is not None:
            return (
                f"[binary file {self.path}: {self.media_type}, {self.size} bytes; "
                f"stored as output handle {self.media.handle}]"
            )
        note = f"\n[file continues: {self.size} bytes in all]" if self.truncated else ""
        return (self.content or "") + note


async def _read_file(args: ReadFileArgs, host: ToolHost, ctx: ToolRunContext) -> ReadFileResult:
    fs: FsCapability = require_arm(host, "fs", ctx.tool_id)
    read = await fs.read_file(args.path, max_bytes=args.max_bytes)
    if read.is_binary:
        # Binary content never goes inline (no base64 in a model-facing result):
        # it is stored and referenced by handle with its media type.
        store: ToolOutputStore = require_arm(host, "output_store", ctx.tool_id)
        media = await store.store_media(read.data, read.media_type)
        return ReadFileResult(
            path=args.path, size=read.size, truncated=read.truncated, is_binary=True,
            media_type=read.media_type, sha256=read.sha256, media=media,
        )  # fmt: skip
    return ReadFileResult(
        path=args.path, size=read.size, truncated=read.truncated, is_binary=False,
        media_type=read.media_type, sha256=read.sha256, content=read.data.decode("utf-8", errors="replace"),
    )  # fmt: skip


class WriteFileArgs(FrozenArgs):
    path: PathArg = Field(
        description="File to write: relative to the workspace root, or absolute beneath a root."
    )
    content: Annotated[str, Field(max_length=64 * 1024 * 1024)] = Field(
        description="The whole new content."
    )
    create_parents: bool = True


class WriteFileResult(FrozenResult):
    path: str
    size: int
    sha256: str
    created: bool

    untrusted_content: ClassVar[bool] = False

    def model_text(self) -> str:
        return f"{'created' if self.created else 'wrote'} {self.path} ({self.size} bytes, sha256 {self.sha256})"


async def _write_file(args: WriteFileArgs, host: ToolHost, ctx: ToolRunContext) -> WriteFileResult:
    fs: FsCapability = require_arm(host, "fs", ctx.tool_id)
    written = await fs.write_file(
        args.path, args.content.encode(), labels=ctx.labels, create_parents=args.create_parents
    )
    return WriteFileResult(
        path=args.path, size=written.size, sha256=written.sha256, created=written.created
    )


class ListDirectoryArgs(FrozenArgs):
    path: PathArg = Field(
        description='Directory to list: relative to the workspace root ("." for the root).'
    )
    max_entries: int | None = Field(default=None, gt=0)
    depth: int | None = Field(default=None, gt=0)
    include_hidden: bool = True


class ListDirectoryResult(FrozenResult):
    path: str
    entries: tuple[DirEntry, ...]
    truncated: bool

    def model_text(self) -> str:
        lines = [
            f"{entry.name}/" if entry.type == "directory" else f"{entry.name}  ({entry.size} bytes)"
            for entry in self.entries
        ]
        if self.truncated:
            lines.append("[listing truncated by the host]")
        return "\n".join(lines) if lines else "(empty directory)"


async def _list_directory(
    args: ListDirectoryArgs, host: ToolHost, ctx: ToolRunContext
) -> ListDirectoryResult:
    fs: FsCapability = require_arm(host, "fs", ctx.tool_id)
    listing = await fs.list_directory(
        args.path,
        max_entries=args.max_entries,
        depth=args.depth,
        include_hidden=args.include_hidden,
    )
    return ListDirectoryResult(path=args.path, entries=listing.entries, truncated=listing.truncated)


READ_FILE = ToolDef(
    id="read_file", source="builtin",
    description="Read a file beneath the workspace. Binary files come back as a stored handle.",
    args_model=ReadFileArgs, result_model=ReadFileResult, dispatch=_read_file,
    policy=ToolPolicyClass(fs_scoped=True), arms=frozenset({"fs"}),
    config_only_params=frozenset({"max_bytes"}), policy_target=lambda a: PolicyTarget(path=a.path),
)  # fmt: skip

WRITE_FILE = ToolDef(
    id="write_file", source="builtin", description="Write a whole file beneath the workspace (atomic).",
    args_model=WriteFileArgs, result_model=WriteFileResult, dispatch=_write_file,
    policy=ToolPolicyClass(fs_scoped=True, fs_write=True), arms=frozenset({"fs"}),
    config_only_params=frozenset({"create_parents"}), policy_target=lambda a: PolicyTarget(path=a.path),
)  # fmt: skip

LIST_DIRECTORY = ToolDef(
    id="list_directory", source="builtin", description="List a directory beneath the workspace.",
    args_model=ListDirectoryArgs, result_model=ListDirectoryResult, dispatch=_list_directory,
    policy=ToolPolicyClass(fs_scoped=True), arms=frozenset({"fs"}),
    config_only_params=frozenset({"max_entries", "depth", "include_hidden"}),
    policy_target=lambda a: PolicyTarget(path=a.path),
)  # fmt: skip
