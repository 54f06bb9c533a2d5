"""The session tools (issue 30): `exec_command`, `read_output`, `kill_session`,
shaped like the tools models already know (Codex's exec_command and
write_stdin-less reads, Claude Code's background Bash).

`exec_command` runs one program as `run_command` does (no shell, the
command allowlist, approval) but on a detached spawn: it returns what the
program printed within `yield_time_ms`, and, when the program still runs, a
session id that `read_output` reads on from and `kill_session` ends. Only
sessions this host's arm started can be read or ended. An engine that
opened an environment for its session (`open_environment` on the process
arm) passes its id as the config-only `environment_id`: every command of
that session then shares a localhost, IPC and /tmp.
"""

from __future__ import annotations

import shlex
import uuid
from typing import Annotated

from pydantic import Field

from hostcap.builtins.common import Arg, FrozenArgs, FrozenResult, PathArg
from hostcap.errors import ToolUnavailableError
from hostcap.host import (
    Outcome,
    ProcessLimits,
    SessionCapability,
    SessionOutput,
    SpawnOptions,
    ToolHost,
)
from hostcap.policy import PolicyTarget, ToolPolicyClass
from hostcap.tooldef import ToolDef, ToolRunContext, require_arm

#: The longest a call waits for output (the model may ask for less).
MAX_YIELD_MS = 300_000
DEFAULT_YIELD_MS = 10_000

SessionId = Annotated[str, Field(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9_.:-]+$")]


def _sessions(host: ToolHost, tool_id: str) -> SessionCapability:
    arm = require_arm(host, "process", tool_id)
    if not hasattr(arm, "start_detached"):
        raise ToolUnavailableError(tool_id=tool_id, arm="process")
    session: SessionCapability = arm
    return session


class ExecCommandArgs(FrozenArgs):
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
    env: dict[str, str] = Field(default_factory=dict)
    background: bool = Field(
        default=False,
        description="Return at once with a session id (a server, a watcher); read it later with read_output.",
    )
    yield_time_ms: int = Field(
        default=DEFAULT_YIELD_MS,
        ge=0,
        le=MAX_YIELD_MS,
        description="How long to wait for the command before returning what it printed so far "
        "with a session id (ignored with background).",
    )
    #: The engine's environment for this session (config only).
    environment_id: str = ""


class SessionResult(FrozenResult):
    command: str
    session_id: str | None
    running: bool
    outcome: Outcome | None
    exit_code: int | None
    signal_name: str | None
    stdout: str
    stderr: str
    dropped_bytes: int
    message: str
    #: kill_session's answer: it ended because it was asked to.
    killed: bool = False

    @property
    def clean(self) -> bool:
        """Still running (nothing failed yet), ended by kill_session, or exited 0."""
        return (
            self.running or self.killed or (self.outcome is Outcome.EXITED and self.exit_code == 0)
        )

    def model_text(self) -> str:
        if self.running:
            status = f"still running: session {self.session_id}"
        elif self.outcome is Outcome.EXITED:
            status = f"exit code {self.exit_code}"
        elif self.outcome is Outcome.SIGNALED:
            status = f"killed by {self.signal_name}"
        else:
            status = f"{self.outcome.value if self.outcome else 'ended'}: {self.message}"
        parts = [f"$ {self.command}", f"[{status}]"]
        if self.dropped_bytes:
            parts.append(f"({self.dropped_bytes} bytes of output dropped by the host)")
        for name, text in (("stdout", self.stdout), ("stderr", self.stderr)):
            if text:
                parts.append(f"--- {name} ---\n{text.rstrip(chr(10))}")
        return "\n".join(parts)


def _result(command: str, read: SessionOutput) -> SessionResult:
    done = read.result
    return SessionResult(
        command=command,
        session_id=read.session_id if read.running else None,
        running=read.running,
        outcome=done.outcome if done else None,
        exit_code=done.exit_code if done else None,
        signal_name=done.signal_name if done else None,
        stdout=read.stdout,
        stderr=read.stderr,
        dropped_bytes=read.dropped_bytes,
        message=done.message if done else "",
    )


async def _exec_command(
    args: ExecCommandArgs, host: ToolHost, ctx: ToolRunContext
) -> SessionResult:
    sessions = _sessions(host, ctx.tool_id)
    options = SpawnOptions(
        labels=ctx.labels,
        cwd=args.cwd,
        limits=ProcessLimits(),
        request_id=f"{ctx.tool_call_id}:{uuid.uuid4().hex[:12]}",
        deadline=ctx.deadline,
    )
    session_id = await sessions.start_detached(
        args.command, args.args, args.env, options, environment_id=args.environment_id
    )
    read = await sessions.read_session(
        session_id, yield_ms=0 if args.background else args.yield_time_ms
    )
    return _result(shlex.join([args.command, *args.args]), read)


class ReadOutputArgs(FrozenArgs):
    session_id: SessionId = Field(description="The session id exec_command returned.")
    yield_time_ms: int = Field(
        default=DEFAULT_YIELD_MS,
        ge=0,
        le=MAX_YIELD_MS,
        description="How long to wait for the command to end before returning what it printed since the last read.",
    )


async def _read_output(args: ReadOutputArgs, host: ToolHost, ctx: ToolRunContext) -> SessionResult:
    read = await _sessions(host, ctx.tool_id).read_session(
        args.session_id, yield_ms=args.yield_time_ms
    )
    return _result(f"(session {args.session_id})", read)


class KillSessionArgs(FrozenArgs):
    session_id: SessionId = Field(description="The session id exec_command returned.")


async def _kill_session(
    args: KillSessionArgs, host: ToolHost, ctx: ToolRunContext
) -> SessionResult:
    sessions = _sessions(host, ctx.tool_id)
    await sessions.kill_session(args.session_id)
    read = await sessions.read_session(args.session_id, yield_ms=5_000)
    return _result(f"(session {args.session_id})", read).model_copy(update={"killed": True})


EXEC_COMMAND = ToolDef(
    id="exec_command", source="builtin",
    description="Run one program (no shell) in the workspace. Returns its output and exit status if it ends "
    "within yield_time_ms, else the output so far and a session id (background: at once).",
    args_model=ExecCommandArgs, result_model=SessionResult, dispatch=_exec_command,
    policy=ToolPolicyClass(spawns_process=True), arms=frozenset({"process"}),
    config_only_params=frozenset({"env", "environment_id"}),
    policy_target=lambda a: PolicyTarget(command=a.command, args=a.args, path=a.cwd),
)  # fmt: skip

READ_OUTPUT = ToolDef(
    id="read_output", source="builtin",
    description="Read what a running exec_command session printed since the last read, waiting up to yield_time_ms.",
    args_model=ReadOutputArgs, result_model=SessionResult, dispatch=_read_output,
    policy=ToolPolicyClass(), arms=frozenset({"process"}),
)  # fmt: skip

KILL_SESSION = ToolDef(
    id="kill_session", source="builtin",
    description="End a running exec_command session (its whole process tree).",
    args_model=KillSessionArgs, result_model=SessionResult, dispatch=_kill_session,
    policy=ToolPolicyClass(), arms=frozenset({"process"}),
)  # fmt: skip
