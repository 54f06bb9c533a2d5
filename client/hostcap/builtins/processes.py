"""The process tools: `run_command`, `git_status`, `git_commit` (the `process` arm)."""

from __future__ import annotations

import shlex
import uuid
from typing import Annotated

from pydantic import AfterValidator, Field

from hostcap.builtins.common import Arg, FrozenArgs, FrozenResult, PathArg, no_nul
from hostcap.builtins.git_safety import (
    GIT_READ_ENV,
    GIT_READ_OPTIONS,
    attributes_refusals,
    config_refusals,
)
from hostcap.errors import HostError, ToolPolicyError
from hostcap.host import (
    FileType,
    FsCapability,
    Outcome,
    ProcessCapability,
    ProcessLimits,
    ProcessResult,
    SpawnOptions,
    ToolHost,
)
from hostcap.policy import PolicyTarget, ToolPolicyClass
from hostcap.tooldef import ToolDef, ToolRunContext, require_arm


class RunCommandArgs(FrozenArgs):
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


class RunCommandResult(FrozenResult):
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

    @property
    def clean(self) -> bool:
        """The command ran to its end and exited 0."""
        return self.outcome is Outcome.EXITED and self.exit_code == 0

    def model_text(self) -> str:
        status = {
            Outcome.EXITED: f"exit code {self.exit_code}",
            Outcome.SIGNALED: f"killed by {self.signal_name}",
        }.get(
            self.outcome,
            f"{self.outcome.value.lower()}: {self.message}"
            if self.message
            else self.outcome.value.lower(),
        )
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
    stream: bool = False,
) -> ProcessResult:
    process: ProcessCapability = require_arm(host, "process", ctx.tool_id)
    options = SpawnOptions(
        labels=ctx.labels,
        cwd=cwd,
        limits=ProcessLimits(wall_seconds=timeout_s),
        request_id=f"{ctx.tool_call_id}:{uuid.uuid4().hex[:12]}",
        deadline=ctx.deadline,
        on_output=ctx.on_output if stream else None,
    )
    return _finished(await process.spawn(command, args, env or {}, options))


async def _run_command(
    args: RunCommandArgs, host: ToolHost, ctx: ToolRunContext
) -> RunCommandResult:
    done = await _spawn(
        host, ctx, args.command, args.args, env=args.env, cwd=args.cwd, timeout_s=args.timeout_s,
        stream=True,
    )  # fmt: skip
    return RunCommandResult(
        command=args.command, args=args.args, outcome=done.outcome, exit_code=done.exit_code,
        signal_name=done.signal_name, stdout=done.stdout, stderr=done.stderr,
        stdout_dropped_bytes=done.stdout_dropped_bytes, stderr_dropped_bytes=done.stderr_dropped_bytes,
        duration_seconds=done.duration_seconds, message=done.message,
    )  # fmt: skip


# git is run with hooks and fsmonitor disabled: both execute programs named by
# repository files the model may have written.
_GIT = ("-c", "core.hooksPath=/dev/null", "-c", "core.fsmonitor=false")


class GitStatusArgs(FrozenArgs):
    pass


class GitResult(FrozenResult):
    exit_code: int | None
    stdout: str
    stderr: str

    @property
    def clean(self) -> bool:
        """git exited 0."""
        return self.exit_code == 0

    def model_text(self) -> str:
        text = self.stdout.rstrip("\n")
        if self.exit_code != 0:
            text = f"[git exited {self.exit_code}]\n{self.stderr.rstrip(chr(10))}\n{text}".rstrip(
                "\n"
            )
        return text or "(clean)"


async def _git_status(args: GitStatusArgs, host: ToolHost, ctx: ToolRunContext) -> GitResult:
    # A read only reads: see `hostcap.builtins.git_safety` for what git may run.
    refusals = await _repository_refusals(require_arm(host, "fs", ctx.tool_id))
    if refusals:
        raise ToolPolicyError("unsafe_repository", tool_id=ctx.tool_id, detail="; ".join(refusals))
    done = await _spawn(
        host, ctx, "git",
        (*GIT_READ_OPTIONS, "status", "--porcelain=v1", "--branch", "--ignore-submodules=all"),
        env=dict(GIT_READ_ENV),
    )  # fmt: skip
    return GitResult(exit_code=done.exit_code, stdout=done.stdout, stderr=done.stderr)


async def _repository_refusals(fs: FsCapability) -> list[str]:
    """Why the workspace root's repository is one git_status will not run git in."""
    try:
        dot_git = await fs.stat(".git")
    except HostError as error:
        if error.reason == "NOT_FOUND":
            return []  # no repository: git says so, and runs nothing
        raise
    if dot_git.type is not FileType.DIRECTORY:
        return [".git is not a directory (a gitdir link to a repository elsewhere)"]
    found: list[str] = []
    for path, scan in (
        (".git/config", config_refusals),
        (".git/info/attributes", attributes_refusals),
        (".gitattributes", attributes_refusals),
    ):
        try:
            read = await fs.read_file(path)
        except HostError as error:
            if error.reason == "NOT_FOUND":
                continue
            raise
        if read.truncated or read.is_binary:
            found.append(f"{path} cannot be read whole as text")
            continue
        found += [f"{path}: {why}" for why in scan(read.data.decode("utf-8", errors="replace"))]
    return found


class GitCommitArgs(FrozenArgs):
    message: Annotated[str, Field(min_length=1, max_length=16 * 1024), AfterValidator(no_nul)] = (
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
    policy=ToolPolicyClass(spawns_process=True, fixed_command=True), arms=frozenset({"process", "fs"}),
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
