"""The built-in tools.

Over hostcapd (the `process` and `fs` arms): `read_file`, `write_file`,
`list_directory`, `run_command`, `git_status`, `git_commit` (git runs as a
spawned process in the tenant's primary root). Registered with their policy
classes and failing `ToolUnavailableError` naming the missing arm until a
host provides it: `http_request`, `web_search` (egress), `mcp_call` (mcp),
`read_clipboard`, `notify` (os). `invoke_agent` runs through the dispatch
context's delegate. `read_media` (the 13th) attaches media the run's output
store holds, by handle, under the node's media scope (`media_scope_denied`
otherwise, the recoverable scope denial).
"""

from __future__ import annotations

import shlex
import uuid
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from hostcap.errors import HostError, ToolPolicyError, ToolUnavailableError
from hostcap.host import (
    DirEntry,
    EgressCapability,
    EgressRequest,
    FsCapability,
    McpCallInput,
    McpCapability,
    MediaHandle,
    OsCapability,
    Outcome,
    ProcessCapability,
    ProcessLimits,
    ProcessResult,
    SpawnOptions,
    ToolHost,
    ToolOutputStore,
)
from hostcap.output_store import OutputStoreError
from hostcap.policy import PolicyTarget, ToolPolicyClass
from hostcap.tooldef import ToolDef, ToolRunContext, require_arm


def _no_nul(value: str) -> str:
    if "\x00" in value:
        raise ValueError("must not contain NUL characters")
    return value


def _printable(value: str) -> str:
    if any(ord(ch) < 32 and ch not in "\t\n" for ch in value):
        raise ValueError("must not contain control characters")
    return value


PathArg = Annotated[str, Field(min_length=1, max_length=4096), AfterValidator(_no_nul)]
Arg = Annotated[str, Field(max_length=128 * 1024), AfterValidator(_no_nul)]


class _Args(BaseModel):
    # Frozen: the validated arguments are the one value the guardrails,
    # the approval card and the dispatch all see.
    model_config = ConfigDict(frozen=True, extra="forbid")


class _Result(BaseModel):
    model_config = ConfigDict(frozen=True)


# ---------------------------------------------------------------------- fs tools


class ReadFileArgs(_Args):
    path: PathArg = Field(
        description="File to read: relative to the workspace root, or absolute beneath a root."
    )
    max_bytes: int | None = Field(default=None, gt=0)


class ReadFileResult(_Result):
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


class WriteFileArgs(_Args):
    path: PathArg = Field(
        description="File to write: relative to the workspace root, or absolute beneath a root."
    )
    content: Annotated[str, Field(max_length=64 * 1024 * 1024)] = Field(
        description="The whole new content."
    )
    create_parents: bool = True


class WriteFileResult(_Result):
    path: str
    size: int
    sha256: str
    created: bool

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


class ListDirectoryArgs(_Args):
    path: PathArg = Field(
        description='Directory to list: relative to the workspace root ("." for the root).'
    )
    max_entries: int | None = Field(default=None, gt=0)
    depth: int | None = Field(default=None, gt=0)
    include_hidden: bool = True


class ListDirectoryResult(_Result):
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


# ----------------------------------------------------------------- process tools


class RunCommandArgs(_Args):
    command: Annotated[str, Field(min_length=1, max_length=1024, pattern=r"^[^\s\x00]+$")] = Field(
        description="The executable to run: a bare name on the host's PATH. Not a shell line: "
        "put every argument in `args`."
    )
    args: tuple[Arg, ...] = Field(
        default=(), max_length=4096, description="Arguments, one per item."
    )
    cwd: PathArg | None = Field(
        default=None, description="Working directory relative to the workspace root."
    )
    timeout_s: float | None = Field(
        default=None, gt=0, le=86_400, description="Wall-clock limit in seconds."
    )
    env: dict[str, str] = Field(default_factory=dict)


class RunCommandResult(_Result):
    command: str
    args: tuple[str, ...]
    outcome: Outcome
    exit_code: int | None
    signal_name: str | None
    stdout: str
    stderr: str
    stdout_dropped_bytes: int
    stderr_dropped_bytes: int
    duration_seconds: float
    message: str

    def model_text(self) -> str:
        status = {
            Outcome.EXITED: f"exit code {self.exit_code}",
            Outcome.SIGNALED: f"killed by {self.signal_name}",
        }.get(self.outcome, self.message or self.outcome.value.lower())
        parts = [f"$ {shlex.join([self.command, *self.args])}", f"[{status}]"]
        for name, text, dropped in (
            ("stdout", self.stdout, self.stdout_dropped_bytes),
            ("stderr", self.stderr, self.stderr_dropped_bytes),
        ):
            if text or dropped:
                note = f" ({dropped} bytes dropped by the host)" if dropped else ""
                parts.append(f"--- {name}{note} ---\n{text.rstrip(chr(10))}")
        return "\n".join(parts)


def _finished(result: ProcessResult) -> ProcessResult:
    """A spawn that ended in a way that is not a command result becomes a host error."""
    if result.outcome is Outcome.SPAWN_FAILED:
        raise HostError("SPAWN_FAILED", result.message)
    if result.outcome is Outcome.DAEMON_SHUTDOWN:
        raise HostError("DAEMON_SHUTDOWN", result.message)
    if result.outcome is Outcome.CANCELLED:
        raise HostError("CANCELLED", result.message)
    return result


async def _spawn(
    host: ToolHost,
    ctx: ToolRunContext,
    command: str,
    args: tuple[str, ...],
    *,
    env: dict[str, str] | None = None,
    cwd: str | None = None,
    timeout_s: float | None = None,
) -> ProcessResult:
    process: ProcessCapability = require_arm(host, "process", ctx.tool_id)
    options = SpawnOptions(
        labels=ctx.labels,
        cwd=cwd,
        limits=ProcessLimits(wall_seconds=timeout_s),
        request_id=f"{ctx.tool_call_id}:{uuid.uuid4().hex[:12]}",
        deadline=ctx.deadline,
    )
    return _finished(await process.spawn(command, args, env or {}, options))


async def _run_command(
    args: RunCommandArgs, host: ToolHost, ctx: ToolRunContext
) -> RunCommandResult:
    done = await _spawn(
        host, ctx, args.command, args.args, env=args.env, cwd=args.cwd, timeout_s=args.timeout_s
    )
    return RunCommandResult(
        command=args.command, args=args.args, outcome=done.outcome, exit_code=done.exit_code,
        signal_name=done.signal_name, stdout=done.stdout, stderr=done.stderr,
        stdout_dropped_bytes=done.stdout_dropped_bytes, stderr_dropped_bytes=done.stderr_dropped_bytes,
        duration_seconds=done.duration_seconds, message=done.message,
    )  # fmt: skip


# git is run with hooks and fsmonitor disabled: both execute programs named by
# repository files the model may have written.
_GIT = ("-c", "core.hooksPath=/dev/null", "-c", "core.fsmonitor=false")


class GitStatusArgs(_Args):
    pass


class GitResult(_Result):
    exit_code: int | None
    stdout: str
    stderr: str

    def model_text(self) -> str:
        text = self.stdout.rstrip("\n")
        if self.exit_code != 0:
            text = f"[git exited {self.exit_code}]\n{self.stderr.rstrip(chr(10))}\n{text}".rstrip(
                "\n"
            )
        return text or "(clean)"


async def _git_status(args: GitStatusArgs, host: ToolHost, ctx: ToolRunContext) -> GitResult:
    done = await _spawn(host, ctx, "git", (*_GIT, "status", "--porcelain=v1", "--branch"))
    return GitResult(exit_code=done.exit_code, stdout=done.stdout, stderr=done.stderr)


class GitCommitArgs(_Args):
    message: Annotated[str, Field(min_length=1, max_length=16 * 1024), AfterValidator(_no_nul)] = (
        Field(description="The commit message.")
    )
    author_name: str = "hostcap agent"
    author_email: str = "agent@hostcap.invalid"


async def _git_commit(args: GitCommitArgs, host: ToolHost, ctx: ToolRunContext) -> GitResult:
    env = {
        "GIT_AUTHOR_NAME": args.author_name,
        "GIT_AUTHOR_EMAIL": args.author_email,
        "GIT_COMMITTER_NAME": args.author_name,
        "GIT_COMMITTER_EMAIL": args.author_email,
    }
    staged = await _spawn(host, ctx, "git", (*_GIT, "add", "--all"), env=env)
    if staged.exit_code != 0:
        return GitResult(exit_code=staged.exit_code, stdout=staged.stdout, stderr=staged.stderr)
    done = await _spawn(
        host, ctx, "git", (*_GIT, "commit", "--no-verify", "-m", args.message), env=env
    )
    return GitResult(exit_code=done.exit_code, stdout=done.stdout, stderr=done.stderr)


# ------------------------------------------------------------------ egress tools


class HttpRequestArgs(_Args):
    url: Annotated[str, Field(min_length=1, max_length=8192)] = Field(description="An https URL.")
    method: Literal["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE"] = "GET"
    headers: dict[str, Annotated[str, AfterValidator(_printable)]] | None = None
    body: Annotated[str, Field(max_length=16 * 1024 * 1024)] | None = None
    credential_ref: str | None = None


class HttpResponseResult(_Result):
    status: int
    headers: dict[str, str]
    body: str
    media_type: str

    def model_text(self) -> str:
        return f"HTTP {self.status} ({self.media_type})\n{self.body}"


async def _http_request(
    args: HttpRequestArgs, host: ToolHost, ctx: ToolRunContext
) -> HttpResponseResult:
    egress: EgressCapability = require_arm(host, "egress", ctx.tool_id)
    response = await egress.fetch(
        EgressRequest(
            method=args.method, url=args.url, headers=dict(args.headers or {}), body=args.body,
            credential_ref=args.credential_ref,
        )
    )  # fmt: skip
    return HttpResponseResult(
        status=response.status,
        headers=dict(response.headers),
        body=response.body,
        media_type=response.media_type,
    )


class WebSearchArgs(_Args):
    query: Annotated[str, Field(min_length=1, max_length=1000), AfterValidator(_printable)] = Field(
        description="The search query."
    )
    provider_url: str = ""
    credential_ref: str | None = None


async def _web_search(
    args: WebSearchArgs, host: ToolHost, ctx: ToolRunContext
) -> HttpResponseResult:
    egress: EgressCapability = require_arm(host, "egress", ctx.tool_id)
    if not args.provider_url:
        raise ToolUnavailableError(
            tool_id=ctx.tool_id, arm="egress", detail="no search provider is configured"
        )
    response = await egress.fetch(
        EgressRequest(
            method="POST",
            url=args.provider_url,
            body=args.query,
            credential_ref=args.credential_ref,
        )
    )
    return HttpResponseResult(
        status=response.status,
        headers=dict(response.headers),
        body=response.body,
        media_type=response.media_type,
    )


class McpCallArgs(_Args):
    server: Annotated[str, Field(min_length=1, max_length=256)] = Field(
        description="A configured MCP server."
    )
    tool: Annotated[str, Field(min_length=1, max_length=256)] = Field(
        description="The server's tool name."
    )
    arguments: dict[str, Any] = Field(default_factory=dict)


class McpCallResult(_Result):
    output: Any


async def _mcp_call(args: McpCallArgs, host: ToolHost, ctx: ToolRunContext) -> McpCallResult:
    mcp: McpCapability = require_arm(host, "mcp", ctx.tool_id)
    return McpCallResult(
        output=await mcp.call(
            McpCallInput(server=args.server, tool=args.tool, arguments=args.arguments)
        )
    )


# ---------------------------------------------------------------------- os tools


class ReadClipboardArgs(_Args):
    pass


class ClipboardResult(_Result):
    text: str

    def model_text(self) -> str:
        return self.text


async def _read_clipboard(
    args: ReadClipboardArgs, host: ToolHost, ctx: ToolRunContext
) -> ClipboardResult:
    os_arm: OsCapability = require_arm(host, "os", ctx.tool_id)
    return ClipboardResult(text=await os_arm.read_clipboard())


class NotifyArgs(_Args):
    title: Annotated[str, Field(min_length=1, max_length=256), AfterValidator(_printable)]
    body: Annotated[str, Field(max_length=4096), AfterValidator(_printable)] = ""


class NotifyResult(_Result):
    delivered: bool

    def model_text(self) -> str:
        return "notification delivered" if self.delivered else "notification not delivered"


async def _notify(args: NotifyArgs, host: ToolHost, ctx: ToolRunContext) -> NotifyResult:
    os_arm: OsCapability = require_arm(host, "os", ctx.tool_id)
    await os_arm.notify(args.title, args.body)
    return NotifyResult(delivered=True)


# ------------------------------------------------------------------------ media


class ReadMediaArgs(_Args):
    handle: Annotated[str, Field(min_length=1, max_length=512), AfterValidator(_printable)] = Field(
        description="A media handle an earlier result named (e.g. a binary file read_file stored)."
    )


class ReadMediaResult(_Result):
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


class InvokeAgentArgs(_Args):
    node_id: Annotated[str, Field(min_length=1, max_length=256)] = Field(
        description="The agent node to run."
    )
    input: Any = Field(default=None, description="Input for that node.")


class InvokeAgentResult(_Result):
    output: Any


async def _invoke_agent(
    args: InvokeAgentArgs, host: ToolHost, ctx: ToolRunContext
) -> InvokeAgentResult:
    if ctx.invoke_agent is None:
        raise ToolUnavailableError(tool_id=ctx.tool_id, arm="invoke_agent")
    return InvokeAgentResult(output=await ctx.invoke_agent(args.node_id, args.input))


# --------------------------------------------------------------------- catalogue

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
RUN_COMMAND = ToolDef(
    id="run_command", source="builtin",
    description="Run one program (no shell) in the workspace and return its exit status and output.",
    args_model=RunCommandArgs, result_model=RunCommandResult, dispatch=_run_command,
    policy=ToolPolicyClass(spawns_process=True), arms=frozenset({"process"}),
    config_only_params=frozenset({"env"}),
    policy_target=lambda a: PolicyTarget(command=a.command, args=a.args, path=a.cwd),
)  # fmt: skip
GIT_STATUS = ToolDef(
    id="git_status", source="builtin", description="Show the git status of the workspace.",
    args_model=GitStatusArgs, result_model=GitResult, dispatch=_git_status,
    policy=ToolPolicyClass(spawns_process=True, fixed_command=True), arms=frozenset({"process"}),
    policy_target=lambda a: PolicyTarget(command="git", args=("status",), command_fixed=True),
)  # fmt: skip
GIT_COMMIT = ToolDef(
    id="git_commit", source="builtin", description="Commit every change in the workspace with a message.",
    args_model=GitCommitArgs, result_model=GitResult, dispatch=_git_commit,
    policy=ToolPolicyClass(spawns_process=True, requires_gate_approval=True, fixed_command=True),
    arms=frozenset({"process"}),
    config_only_params=frozenset({"author_name", "author_email"}),
    policy_target=lambda a: PolicyTarget(command="git", args=("commit",), command_fixed=True),
)  # fmt: skip
HTTP_REQUEST = ToolDef(
    id="http_request", source="builtin", description="Make an HTTPS request to an allowed host.",
    args_model=HttpRequestArgs, result_model=HttpResponseResult, dispatch=_http_request,
    policy=ToolPolicyClass(egress="http"), arms=frozenset({"egress"}),
    config_only_params=frozenset({"credential_ref"}), credential_params=frozenset({"credential_ref"}),
    policy_target=lambda a: PolicyTarget(url=a.url),
)  # fmt: skip
WEB_SEARCH = ToolDef(
    id="web_search", source="builtin", description="Search the web through the configured provider.",
    args_model=WebSearchArgs, result_model=HttpResponseResult, dispatch=_web_search,
    policy=ToolPolicyClass(egress="search"), arms=frozenset({"egress"}),
    config_only_params=frozenset({"provider_url", "credential_ref"}), credential_params=frozenset({"credential_ref"}),
    policy_target=lambda a: PolicyTarget(host="search provider"),
)  # fmt: skip
MCP_CALL = ToolDef(
    id="mcp_call", source="builtin", description="Call a tool of a configured MCP server.",
    args_model=McpCallArgs, result_model=McpCallResult, dispatch=_mcp_call,
    policy=ToolPolicyClass(egress="mcp"), arms=frozenset({"mcp"}),
    policy_target=lambda a: PolicyTarget(host=a.server),
)  # fmt: skip
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

#: Every built-in tool, in catalogue order.
BUILTIN_TOOLS: tuple[ToolDef[Any, Any], ...] = (
    READ_FILE, WRITE_FILE, LIST_DIRECTORY, RUN_COMMAND, GIT_STATUS, GIT_COMMIT,
    HTTP_REQUEST, WEB_SEARCH, MCP_CALL, READ_CLIPBOARD, NOTIFY, INVOKE_AGENT, READ_MEDIA,
)  # fmt: skip
