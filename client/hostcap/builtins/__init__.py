"""The built-in tools.

Over hostcapd (the `process` and `fs` arms): `read_file`, `write_file`,
`edit_file` (exact replacement, conditional on the sha read), `list_directory`, `run_command`, `git_status`, `git_commit` (git runs as a
spawned process in the tenant's primary root). Registered with their policy
classes and failing `ToolUnavailableError` naming the missing arm until a
host provides it: `http_request`, `web_search` (egress), `mcp_call` (mcp),
`read_clipboard`, `notify` (os). `invoke_agent` runs through the dispatch
context's delegate. `read_media` (the seeds' 13th; `edit_file` is a 14th) attaches media the run's output
store holds, by handle, under the node's media scope (`media_scope_denied`
otherwise, the recoverable scope denial). The sessions (issues 30, 31):
`exec_command` (on pipes or a terminal of its own), `read_output`,
`kill_session`, `write_stdin`.
"""

from __future__ import annotations

from typing import Any

from hostcap.builtins.edit import EDIT_FILE, EditFileArgs, EditFileResult
from hostcap.builtins.files import (
    LIST_DIRECTORY,
    READ_FILE,
    WRITE_FILE,
    ListDirectoryArgs,
    ListDirectoryResult,
    ReadFileArgs,
    ReadFileResult,
    WriteFileArgs,
    WriteFileResult,
)
from hostcap.builtins.local import (
    INVOKE_AGENT,
    NOTIFY,
    READ_CLIPBOARD,
    READ_MEDIA,
    ClipboardResult,
    InvokeAgentArgs,
    InvokeAgentResult,
    NotifyArgs,
    NotifyResult,
    ReadClipboardArgs,
    ReadMediaArgs,
    ReadMediaResult,
)
from hostcap.builtins.network import (
    HTTP_REQUEST,
    MCP_CALL,
    WEB_SEARCH,
    HttpRequestArgs,
    HttpResponseResult,
    McpCallArgs,
    McpCallResult,
    WebSearchArgs,
)
from hostcap.builtins.processes import (
    GIT_COMMIT,
    GIT_STATUS,
    RUN_COMMAND,
    GitCommitArgs,
    GitResult,
    GitStatusArgs,
    RunCommandArgs,
    RunCommandResult,
)
from hostcap.builtins.sessions import (
    EXEC_COMMAND,
    KILL_SESSION,
    READ_OUTPUT,
    WRITE_STDIN,
    ExecCommandArgs,
    KillSessionArgs,
    ReadOutputArgs,
    SessionResult,
    WriteStdinArgs,
)
from hostcap.tooldef import ToolDef

#: Every built-in tool, in catalogue order.
BUILTIN_TOOLS: tuple[ToolDef[Any, Any], ...] = (
    READ_FILE, WRITE_FILE, EDIT_FILE, LIST_DIRECTORY, RUN_COMMAND, GIT_STATUS, GIT_COMMIT,
    HTTP_REQUEST, WEB_SEARCH, MCP_CALL, READ_CLIPBOARD, NOTIFY, INVOKE_AGENT, READ_MEDIA,
    EXEC_COMMAND, READ_OUTPUT, KILL_SESSION, WRITE_STDIN,
)  # fmt: skip

__all__ = [
    "BUILTIN_TOOLS",
    "EDIT_FILE",
    "EXEC_COMMAND",
    "GIT_COMMIT",
    "GIT_STATUS",
    "HTTP_REQUEST",
    "INVOKE_AGENT",
    "KILL_SESSION",
    "LIST_DIRECTORY",
    "MCP_CALL",
    "NOTIFY",
    "READ_CLIPBOARD",
    "READ_FILE",
    "READ_MEDIA",
    "READ_OUTPUT",
    "RUN_COMMAND",
    "WEB_SEARCH",
    "WRITE_FILE",
    "WRITE_STDIN",
    "ClipboardResult",
    "EditFileArgs",
    "EditFileResult",
    "ExecCommandArgs",
    "GitCommitArgs",
    "GitResult",
    "GitStatusArgs",
    "HttpRequestArgs",
    "HttpResponseResult",
    "InvokeAgentArgs",
    "InvokeAgentResult",
    "KillSessionArgs",
    "ListDirectoryArgs",
    "ListDirectoryResult",
    "McpCallArgs",
    "McpCallResult",
    "NotifyArgs",
    "NotifyResult",
    "ReadClipboardArgs",
    "ReadFileArgs",
    "ReadFileResult",
    "ReadMediaArgs",
    "ReadMediaResult",
    "ReadOutputArgs",
    "RunCommandArgs",
    "RunCommandResult",
    "SessionResult",
    "WebSearchArgs",
    "WriteFileArgs",
    "WriteFileResult",
    "WriteStdinArgs",
]
