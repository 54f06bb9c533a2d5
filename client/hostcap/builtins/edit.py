"""`edit_file`: exact string replacement in a file, applied with the fs
arm's expected sha256 so a change made since the read is detected, never
lost (the coding agents' Edit; whole-file writes stay `write_file`).

The old text must occur exactly once (or `replace_all`): an absent or
ambiguous old text is refused before anything is written, as a correctable
argument error, so the model can give more context. The result is a
compact diff of what changed.
"""

from __future__ import annotations

import difflib
from typing import Annotated

from pydantic import AfterValidator, Field

from hostcap.builtins.common import FrozenArgs, FrozenResult, PathArg, no_nul
from hostcap.errors import ToolArgsInvalidError
from hostcap.host import FsCapability, ToolHost
from hostcap.policy import PolicyTarget, ToolPolicyClass
from hostcap.tooldef import ToolDef, ToolRunContext, require_arm

#: Lines of context around each change in the diff.
DIFF_CONTEXT = 2
#: The longest diff returned in full (characters); past it, its head and a note.
MAX_DIFF_CHARS = 8 * 1024
EditText = Annotated[str, Field(max_length=8 * 1024 * 1024), AfterValidator(no_nul)]


class EditFileArgs(FrozenArgs):
    path: PathArg = Field(
        description="File to edit: relative to the workspace root, or absolute beneath a root."
    )
    old_text: EditText = Field(
        min_length=1,
        description="The exact text to replace, whitespace included. It must occur exactly "
        "once unless replace_all is true: include enough surrounding lines to make it unique.",
    )
    new_text: EditText = Field(description="The text to put in its place.")
    replace_all: bool = Field(
        default=False, description="Replace every occurrence of old_text, not just one."
    )


class EditFileResult(FrozenResult):
    path: str
    replacements: int
    size: int
    sha256: str
    diff: str

    def model_text(self) -> str:
        times = "1 replacement" if self.replacements == 1 else f"{self.replacements} replacements"
        return f"edited {self.path}: {times} (sha256 {self.sha256})\n{self.diff}"


async def _edit_file(args: EditFileArgs, host: ToolHost, ctx: ToolRunContext) -> EditFileResult:
    fs: FsCapability = require_arm(host, "fs", ctx.tool_id)
    if args.old_text == args.new_text:
        raise ToolArgsInvalidError(
            "old_text and new_text are the same: nothing to edit", tool_id=ctx.tool_id,
            fields=["new_text"],
        )  # fmt: skip
    read = await fs.read_file(args.path)
    if read.truncated:
        raise ToolArgsInvalidError(
            f"{args.path} is larger than one read ({read.size} bytes): it cannot be edited whole",
            tool_id=ctx.tool_id, fields=["path"],
        )  # fmt: skip
    try:
        before = read.data.decode("utf-8")
    except UnicodeDecodeError:
        before = None
    if read.is_binary or before is None:
        raise ToolArgsInvalidError(
            f"{args.path} is not UTF-8 text: edit_file edits text", tool_id=ctx.tool_id,
            fields=["path"],
        )  # fmt: skip
    count = before.count(args.old_text)
    if count == 0:
        raise ToolArgsInvalidError(
            "old_text does not occur in the file (it must match exactly, whitespace included); "
            "read the file again and copy the text to replace",
            tool_id=ctx.tool_id, fields=["old_text"],
        )  # fmt: skip
    if count > 1 and not args.replace_all:
        raise ToolArgsInvalidError(
            f"old_text occurs {count} times: include more surrounding text to make it unique, "
            "or set replace_all to replace every occurrence",
            tool_id=ctx.tool_id, fields=["old_text"],
        )  # fmt: skip
    after = before.replace(args.old_text, args.new_text, -1 if args.replace_all else 1)
    # Conditional on what was read: a change made since is a CONFLICT, never overwritten.
    written = await fs.write_file(
        args.path, after.encode("utf-8"), labels=ctx.labels, create_parents=False,
        expected_sha256=read.sha256,
    )  # fmt: skip
    return EditFileResult(
        path=args.path, replacements=count if args.replace_all else 1, size=written.size,
        sha256=written.sha256, diff=compact_diff(before, after),
    )  # fmt: skip


def compact_diff(before: str, after: str) -> str:
    """A unified diff of the change with a little context, bounded."""
    lines = difflib.unified_diff(
        before.splitlines(keepends=True), after.splitlines(keepends=True),
        "before", "after", n=DIFF_CONTEXT,
    )  # fmt: skip
    text = "".join(line if line.endswith("\n") else line + "\n" for line in list(lines)[2:])
    if len(text) > MAX_DIFF_CHARS:
        cut = text[:MAX_DIFF_CHARS].rsplit("\n", 1)[0]
        text = f"{cut}\n[diff cut: {len(text) - len(cut)} more characters]\n"
    return text


EDIT_FILE = ToolDef(
    id="edit_file", source="builtin",
    description="Replace exact text in a file beneath the workspace: old_text must occur exactly "
    "once (or set replace_all). Returns the diff. A file changed since it was read is not "
    "overwritten.",
    args_model=EditFileArgs, result_model=EditFileResult, dispatch=_edit_file,
    policy=ToolPolicyClass(fs_scoped=True, fs_write=True), arms=frozenset({"fs"}),
    policy_target=lambda a: PolicyTarget(path=a.path),
)  # fmt: skip
