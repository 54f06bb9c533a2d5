"""The session tools (issues 30, 31): `exec_command`, `write_stdin`,
`read_output`, `kill_session`, shaped like the tools models already know
(Codex's exec_command and write_stdin, Claude Code's background Bash).

`exec_command` runs one program as `run_command` does (no shell, the
command allowlist, approval) but on a detached spawn: it returns what the
program printed within `yield_time_ms`, and, when the program still runs, a
session id that `read_output` reads on from and `kill_session` ends. Only
sessions this host's arm started can be read or ended. An engine that
opened an environment for its session (`open_environment` on the process
arm) passes its id as the config-only `environment_id`: every command of
that session then shares a localhost, IPC and /tmp.

`exec_command` with `tty` runs the program on a pseudo-terminal of its own
(`true` for 24x80, or `{rows, cols}`), with `stdin_open` on pipes whose
input stays open; `write_stdin` then writes characters into it (a `\x03`
on a terminal is a Ctrl-C) and returns what follows within
`yield_time_ms`. The program is approved when its session starts; a write
into a session whose program runs what it is given (a shell, an
interpreter: `hostcap.session_input`) is a process of its own for approval
(`hostcap.approval`), and a write into any other session is the input of a
program already approved.
"""

from __future__ import annotations

import shlex
import uuid
from typing import Annotated

from pydantic import Field, StrictBool, field_validator

from hostcap.builtins.common import Arg, FrozenArgs, FrozenResult, PathArg
from hostcap.errors import HostError, ToolUnavailableError
from hostcap.host import (
    DEFAULT_TERMINAL,
    MAX_TERMINAL_CELLS,
    Outcome,
    ProcessLimits,
    SessionCapability,
    SessionOutput,
    SpawnOptions,
    TerminalSize,
    ToolHost,
)
from hostcap.policy import PolicyTarget, ToolPolicyClass
from hostcap.session_input import input_runs_code
from hostcap.tooldef import ToolDef, ToolRunContext, require_arm

#: The longest a call waits for output (the model may ask for less).
MAX_YIELD_MS = 300_000
DEFAULT_YIELD_MS = 10_000

SessionId = Annotated[str, Field(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9_.:-]+$")]


def _sessions(host: ToolHost, tool_id: str, *, input: bool = False) -> SessionCapability:
    arm = require_arm(host, "process", tool_id)
    if not hasattr(arm, "start_detached") or (input and not hasattr(arm, "write_stdin")):
        raise ToolUnavailableError(
            tool_id=tool_id, arm="process",
            detail="the host's process arm has no sessions" + (" with input" if input else ""),
        )  # fmt: skip
    session: SessionCapability = arm
    return session


class TerminalArg(FrozenArgs):
    rows: int = Field(ge=1, le=MAX_TERMINAL_CELLS, description="Rows of the terminal.")
    cols: int = Field(ge=1, le=MAX_TERMINAL_CELLS, description="Columns of the terminal.")


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
    tty: StrictBool | TerminalArg = Field(
        default=False,
        description="Run it on a terminal of its own (true: 24x80, or {rows, cols}): colours, "
        "prompts, REPLs. Its input stays open for write_stdin; its output is the terminal's.",
    )
    stdin_open: bool = Field(
        default=False,
        description="Keep its stdin (a pipe) open for write_stdin; else it reads end-of-file at once.",
    )
    #: The engine's environment for this session (config only).
    environment_id: str = ""

    @property
    def terminal(self) -> TerminalSize | None:
        if isinstance(self.tty, TerminalArg):
            return TerminalSize(self.tty.rows, self.tty.cols)
        return DEFAULT_TERMINAL if self.tty else None

    @property
    def input_open(self) -> bool:
        return self.stdin_open or self.terminal is not None


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
    #: The session runs on a terminal (its output is the terminal's).
    tty: bool = False
    #: write_stdin's: the bytes it wrote, and whether it closed the input.
    input_bytes: int = 0
    input_closed: bool = False

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
        if self.input_bytes or self.input_closed:
            closed = ", then closed its input" if self.input_closed else ""
            parts.append(f"(wrote {self.input_bytes} bytes{closed})")
        if self.dropped_bytes:
            parts.append(f"({self.dropped_bytes} bytes of output dropped by the host)")
        out = "terminal" if self.tty else "stdout"
        for name, text in ((out, self.stdout), ("stderr", self.stderr)):
            if text:
                parts.append(f"--- {name} ---\n{text.rstrip(chr(10))}")
        return "\n".join(parts)


def _result(command: str, read: SessionOutput, *, tty: bool = False) -> SessionResult:
    done = read.result
    return SessionResult(
        tty=tty,
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
        stdin_open=args.stdin_open,
        tty=args.terminal,
    )
    session_id = await sessions.start_detached(
        args.command, args.args, args.env, options, environment_id=args.environment_id
    )
    read = await sessions.read_session(
        session_id, yield_ms=0 if args.background else args.yield_time_ms
    )
    return _result(shlex.join([args.command, *args.args]), read, tty=args.terminal is not None)


def _exec_target(args: ExecCommandArgs) -> PolicyTarget:
    return PolicyTarget(
        command=args.command, args=args.args, path=args.cwd,
        code_input=args.input_open and input_runs_code(args.command),
    )  # fmt: skip


#: write_stdin's default wait: a REPL's answer (Codex's default too).
DEFAULT_WRITE_YIELD_MS = 250
#: The most characters one write_stdin call takes.
MAX_WRITE_CHARS = 64 * 1024


class WriteStdinArgs(FrozenArgs):
    session_id: SessionId = Field(description="The session id exec_command returned.")
    chars: str = Field(
        default="",
        max_length=MAX_WRITE_CHARS,
        description='What to type into the session, e.g. "print(6*7)\\n" (a newline ends '
        'a line; on a terminal "\\u0003" is Ctrl-C, "\\u0004" Ctrl-D). Empty: only read.',
    )
    yield_time_ms: int = Field(
        default=DEFAULT_WRITE_YIELD_MS,
        ge=0,
        le=MAX_YIELD_MS,
        description="How long to wait for output after writing before returning what followed.",
    )
    close: bool = Field(
        default=False, description="Close the session's input after chars: it reads end-of-file."
    )

    @field_validator("chars")
    @classmethod
    def _encodable(cls, chars: str) -> str:
        try:
            chars.encode("utf-8")
        except UnicodeEncodeError:
            raise ValueError("must be text (a lone surrogate cannot be written)") from None
        return chars


def _write_target(args: WriteStdinArgs, host: ToolHost) -> PolicyTarget:
    """What a write into `args.session_id` is, for the guardrails and approval:
    the program of the session, and whether it runs what is written. Only
    writing characters can run code (a read or a close alone does not)."""
    arm = getattr(host, "process", None)
    lookup = getattr(arm, "session_info", None)
    info = lookup(args.session_id) if callable(lookup) else None
    if info is None:
        # Not a session of this host: the dispatch refuses it, NOT_FOUND, and writes nothing.
        return PolicyTarget(
            command="(unknown session)", command_fixed=True, session=args.session_id
        )
    code = bool(args.chars) and input_runs_code(info.command)
    return PolicyTarget(
        command=info.command, args=info.args, command_fixed=not code, session=args.session_id,
        input=args.chars if code else None, started_by=info.started_by or None,
    )  # fmt: skip


async def _write_stdin(args: WriteStdinArgs, host: ToolHost, ctx: ToolRunContext) -> SessionResult:
    sessions = _sessions(host, ctx.tool_id, input=True)
    info = sessions.session_info(args.session_id)
    if info is None or info.engine_session != (ctx.session_id or ""):
        # A session of another engine session is not this one's to type into.
        raise HostError("NOT_FOUND", f"no session {args.session_id!r} was started here")
    if not info.stdin_open and (args.chars or args.close):
        raise HostError(
            "STDIN_NOT_OPEN",
            f"session {args.session_id} was started without its input open: start it with "
            "exec_command tty or stdin_open",
        )
    written = 0
    if args.chars or args.close:
        done = await sessions.write_stdin(
            args.session_id, args.chars.encode("utf-8"), close=args.close
        )
        written = done.bytes_written
    read = await sessions.read_session(args.session_id, yield_ms=args.yield_time_ms)
    return _result(
        f"(session {args.session_id}: {shlex.join([info.command, *info.args])})",
        read,
        tty=info.tty is not None,
    ).model_copy(update={"input_bytes": written, "input_closed": args.close})


class ReadOutputArgs(FrozenArgs):
    session_id: SessionId = Field(description="The session id exec_command returned.")
    yield_time_ms: int = Field(
        default=DEFAULT_YIELD_MS,
        ge=0,
        le=MAX_YIELD_MS,
        description="How long to wait for the command to end before returning what it printed since the last read.",
    )


def _own_session(sessions: SessionCapability, session_id: str, ctx: ToolRunContext) -> bool:
    """Whether `session_id` runs on a terminal, once it is known to be a
    session this engine session started: a session of another engine
    session is NOT_FOUND here, for reading and ending as for writing. An arm
    that keeps no session info leaves the check to its own lookup."""
    lookup = getattr(sessions, "session_info", None)
    if not callable(lookup):
        return False
    info = lookup(session_id)
    if info is None or info.engine_session != (ctx.session_id or ""):
        raise HostError("NOT_FOUND", f"no session {session_id!r} was started here")
    return info.tty is not None


async def _read_output(args: ReadOutputArgs, host: ToolHost, ctx: ToolRunContext) -> SessionResult:
    sessions = _sessions(host, ctx.tool_id)
    tty = _own_session(sessions, args.session_id, ctx)
    read = await sessions.read_session(args.session_id, yield_ms=args.yield_time_ms)
    return _result(f"(session {args.session_id})", read, tty=tty)


class KillSessionArgs(FrozenArgs):
    session_id: SessionId = Field(description="The session id exec_command returned.")


async def _kill_session(
    args: KillSessionArgs, host: ToolHost, ctx: ToolRunContext
) -> SessionResult:
    sessions = _sessions(host, ctx.tool_id)
    tty = _own_session(sessions, args.session_id, ctx)
    await sessions.kill_session(args.session_id)
    read = await sessions.read_session(args.session_id, yield_ms=5_000)
    return _result(f"(session {args.session_id})", read, tty=tty).model_copy(
        update={"killed": True}
    )


EXEC_COMMAND = ToolDef(
    id="exec_command", source="builtin",
    description="Run one program (no shell) in the workspace. Returns its output and exit status if it ends "
    "within yield_time_ms, else the output so far and a session id (background: at once). With tty "
    "(a terminal of its own) or stdin_open, type into the session with write_stdin.",
    args_model=ExecCommandArgs, result_model=SessionResult, dispatch=_exec_command,
    policy=ToolPolicyClass(spawns_process=True), arms=frozenset({"process"}),
    config_only_params=frozenset({"env", "environment_id"}),
    policy_target=_exec_target,
)  # fmt: skip

WRITE_STDIN = ToolDef(
    id="write_stdin", source="builtin",
    description="Type characters into a running exec_command session started with tty or stdin_open "
    "(a REPL, a prompt) and return the output that follows within yield_time_ms. Empty chars only reads.",
    args_model=WriteStdinArgs, result_model=SessionResult, dispatch=_write_stdin,
    # The session's program is pinned (approved when it started): a write is a
    # process of its own only into a shell or interpreter (`_write_target`).
    policy=ToolPolicyClass(spawns_process=True, fixed_command=True), arms=frozenset({"process"}),
    host_target=_write_target,
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
