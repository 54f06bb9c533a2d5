"""Per-tool approval: the confirm hook, permission modes, grants.

The registry asks "may this governed call proceed?" through the confirm
hook of `DispatchContext.approval`, and honours the answer; it stays
mode-agnostic. `ApprovalPolicy` is hostcap's implementation of that hook:

    policy = ApprovalPolicy("accept-edits", contract="plan", prompt=ask_the_user)
    ctx = DispatchContext(..., approval=policy.context())

The permission `mode` decides governed calls (fs write, a process with a
model-controlled command, egress, os):

- `ask`: the read-only chat. Every governed call is denied without a card,
  and the catalogue does not offer a tool that could only be denied
  (`hostcap.admission`, the predicate the dispatch guard shares).
- `accept-edits`: fs writes inside the scope are approved, except protected
  paths, which take a card; process, egress and os take a card.
- `auto`: approved, except protected paths, which take a card.

A `contract` (see `hostcap.contract`) only restricts further: the registry
refuses what it denies, and marks the calls it cards (`contract_card`),
which then take a card even under `auto`. A contract never turns a denial
of the mode into a card: `ask` stays read-only.

Grants: a card offers `approve` (once), `reject`, and two grants that are
different answers with different scopes, each spelled out on the card
(`ApprovalCard.scopes`):

- `always`: this exact tool with this exact effective target, for the
  policy's lifetime: for a command the same program with the same argument
  vector and working directory, for a file the same path, for egress the
  same host. `rm -f scratch.tmp` approved always does not approve
  `rm -rf keep`. Never offered for interpreters, shells and launchers
  (whose argument vector is a program) nor for protected paths.
- `allow-session`: the broader grant, named separately: every call of this
  exact tool, whatever its target, in this session only (it does not carry
  to another tool or another session). For `mcp_call` the exact tool is the
  server and the tool it names (`github/list_issues`), never the server
  alone.

A contract card (Plan, Goal) offers `approve`, `reject` and `allow-session`
only, and an `always` grant given on a card of the permission mode never
suppresses a contract card: the PR's rule is that an exact-tool
allow-session grant suppresses later cards for that tool in that session,
and carries to no other tool or session.

Protected paths always take a card.

A write into a session (`write_stdin`, issue 31) whose program runs what it
is given (a shell, an interpreter: `hostcap.session_input`) is a `process`
of its own, the session named on the card and what is written shown:
`ask` refuses it; `accept-edits` takes a card for each, unless an
`allow-session` grant covers that exact session (its subject is
`write_stdin:session ID`, never another session); `auto` approves it; under
a contract it is refused, never carded, unless that session's start was
approved under the contract (the `exec_command` card of an interpreter
with its input open says that approving it approves those writes). A write
into any other session is the input of a program already approved.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import posixpath
import re
import secrets
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from functools import lru_cache
from typing import Any, Literal

from hostcap.contract import Contract
from hostcap.policy import FsScope, ToolActionClass


class PermissionMode(StrEnum):
    ASK = "ask"
    ACCEPT_EDITS = "accept-edits"
    AUTO = "auto"


PromptChoice = Literal["approve", "reject", "allow-session", "always"]
#: What an `always` grant is keyed on: tool id, action, program, argument
#: vector, path (a command's working directory), host.
GrantKey = tuple[str, str, str | None, tuple[str, ...], str | None, str | None]
PROMPT_CHOICES: tuple[PromptChoice, ...] = ("approve", "reject", "allow-session", "always")


@dataclass(frozen=True, kw_only=True)
class ToolActionPreview:
    """What a call targets, for display. Secret-scrubbed by the registry: a
    field may contain `[redacted]` and is never to be parsed."""

    path: str | None = None
    command: str | None = None
    host: str | None = None
    #: The argument vector after the program. Set only on the unredacted copy
    #: (the display copy's `command` is the whole joined line).
    args: tuple[str, ...] = ()
    #: The tool an MCP call names on its server (`host`).
    tool: str | None = None
    #: The session a call starts runs what is written into its input (a
    #: shell or interpreter started with tty or stdin_open).
    code_input: bool = False
    #: The session a write goes into, and what is written (display copy:
    #: control characters made visible, secret shapes redacted, clipped).
    session: str | None = None
    input: str | None = None
    #: The tool call that started that session. Set only on the unredacted copy.
    started_by: str | None = None


@dataclass(frozen=True, kw_only=True)
class ToolApprovalRequest:
    """What the registry asks the confirm hook.

    `unredacted_preview` is the same field selection unscrubbed, for
    in-process classification only (the protected-path check): it is
    excluded from `repr` and from `to_event()`, and must never be
    serialised, logged or forwarded.
    """

    tool_id: str
    tool_call_id: str
    action: ToolActionClass
    preview: ToolActionPreview
    session_id: str | None
    fs_scope: FsScope
    #: The active contract requires a card for this tool, whatever the mode.
    contract_card: bool = False
    unredacted_preview: ToolActionPreview | None = field(default=None, repr=False, compare=False)

    @property
    def subject(self) -> str:
        """The exact tool a grant covers: the tool id, and for an MCP call
        the server and the tool it names (read from the unscrubbed copy)."""
        preview = self.unredacted_preview or self.preview
        if preview.tool is not None:
            return f"{self.tool_id}:{preview.host}/{preview.tool}"
        if preview.session is not None:
            return f"{self.tool_id}:session {preview.session}"
        return self.tool_id

    @property
    def writes_code(self) -> bool:
        """A write into a session whose program runs what it is given."""
        return (
            self.action == "process"
            and (self.unredacted_preview or self.preview).session is not None
        )

    @property
    def starts_code_session(self) -> bool:
        """A call starting a session of a shell or interpreter with its input open."""
        preview = self.unredacted_preview or self.preview
        return self.action == "process" and preview.code_input and preview.session is None

    def to_event(self) -> dict[str, Any]:
        """The serialisable approval-requested event: never the unredacted preview."""
        return {
            "tool_id": self.tool_id,
            "tool_call_id": self.tool_call_id,
            "action": self.action,
            "preview": {k: v for k, v in vars(self.preview).items() if v},
            "session_id": self.session_id,
            "contract_card": self.contract_card,
        }


@dataclass(frozen=True, kw_only=True)
class ToolApprovalDecision:
    """The hook's answer. `no_prompt` means a card was needed and nobody can be
    asked (fail-closed); `label` is a display-safe reason."""

    outcome: Literal["approve", "reject", "no_prompt"]
    label: str | None = None


ConfirmActionHook = Callable[[ToolApprovalRequest], Awaitable[ToolApprovalDecision]]


@dataclass(frozen=True, kw_only=True)
class ApprovalVerdict:
    """What the policy decides before any prompt: approve, deny, or a card."""

    verdict: Literal["approve", "deny", "card"]
    why: str


@dataclass(frozen=True, kw_only=True)
class ToolApprovalContext:
    """What `DispatchContext.approval` takes. Present means the interactive
    approval regime is active: a governed call needs `confirm`'s decision,
    and an absent `confirm` is denied (`no_approval_hook`)."""

    confirm: ConfirmActionHook | None = None
    contract: Contract | None = None
    #: The pure decision, without prompting; `registry.explain` uses it.
    preview_verdict: Callable[[ToolApprovalRequest], ApprovalVerdict] | None = None
    #: The regime refuses every governed call without a card (the `ask`
    #: mode): tools that can only be denied are not offered in the catalogue.
    read_only: bool = False


@dataclass(frozen=True, kw_only=True)
class ApprovalCard:
    """The card shown to a human: secret-free, display-only. `scopes` says,
    for each choice, what answering it approves (a prompt must show it)."""

    tool_id: str
    action: ToolActionClass
    preview: ToolActionPreview
    choices: tuple[PromptChoice, ...]
    why: str
    session_id: str | None
    scopes: Mapping[PromptChoice, str] = field(default_factory=dict)
    #: An opaque key of the exact tool and unscrubbed target (an HMAC under a
    #: per-process secret): two cards whose scrubbed previews look alike still
    #: differ here, so an answer keyed by it approves only its own target.
    target_key: str = ""

    def describe(self) -> str:
        """The card as text: the call, why it is asked, and every choice with its scope."""
        target = self.preview.command or self.preview.path or self.preview.host or "(no target)"
        if self.preview.session is not None:
            lines = [
                f"{self.tool_id} wants to write into session {self.preview.session} ({target}), "
                "which runs what is written:",
                f"  {self.preview.input or ''}",
            ]
        else:
            lines = [f"{self.tool_id} wants to {self.action.replace('_', ' ')}: {target}"]
            if self.preview.code_input:
                lines.append(
                    "Its input stays open, and what is written into it runs as this program."
                )
        lines.append(f"Why a card: {self.why}")
        lines += [f"- {choice}: {self.scopes.get(choice, choice)}" for choice in self.choices]
        return "\n".join(lines)


Prompt = Callable[[ApprovalCard], Awaitable[str]]


class ApprovalProtocolError(Exception):
    """The prompt answered something the card did not offer."""


#: Programs for which "always" is never offered: approving one forever would
#: approve arbitrary code.
INTERPRETERS: frozenset[str] = frozenset(
    {
        "sh", "bash", "dash", "zsh", "ksh", "mksh", "csh", "tcsh", "fish", "ash", "busybox",
        "env", "sudo", "su", "doas", "pkexec", "runuser", "setpriv", "chroot", "nsenter", "unshare",
        "xargs", "nohup", "timeout", "nice", "ionice", "stdbuf", "time", "watch", "script", "expect",
        "python", "pypy", "perl", "ruby", "node", "nodejs", "deno", "bun", "php", "lua", "luajit",
        "tclsh", "wish", "awk", "gawk", "mawk", "sed", "osascript", "pwsh", "powershell", "cmd",
        "java", "jshell", "R", "Rscript", "julia", "ghci", "irb", "make", "ssh", "docker", "podman",
        "npx", "uv", "uvx", "pipx", "poetry", "pip", "npm", "yarn", "pnpm", "find", "git",
    }
)  # fmt: skip
_VERSION_SUFFIX = re.compile(r"[0-9][0-9.]*$")

#: Paths whose writes always take a card (the daemon's floor is separate and
#: is never overridden by an approval).
DEFAULT_PROTECTED_PATHS: tuple[str, ...] = (
    ".git/**",
    # git reads these and runs the programs they name (filters, diff drivers,
    # submodule commands); the daemon's default protects them too.
    ".gitconfig",
    ".gitattributes",
    ".gitmodules",
    ".config/git/**",
    ".hostcap/**",
    ".github/workflows/**",
    ".env",
    ".env.*",
    "**/.ssh/**",
    ".bashrc",
    ".profile",
    ".zshrc",
    "Makefile",
    "pyproject.toml",
    "package.json",
)


def is_interpreter(command: str) -> bool:
    """Whether `command` (a bare name or a path) is a shell, interpreter or launcher."""
    name = posixpath.basename(command)
    stripped = _VERSION_SUFFIX.sub("", name).rstrip("-.")
    return name in INTERPRETERS or stripped in INTERPRETERS


@lru_cache(maxsize=256)
def _glob_regex(pattern: str) -> re.Pattern[str]:
    out = []
    i = 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out.append("(?:[^/]*/)*")
            i += 3
        elif pattern.startswith("**", i):
            out.append(".*")
            i += 2
        elif pattern[i] == "*":
            out.append("[^/]*")
            i += 1
        elif pattern[i] == "?":
            out.append("[^/]")
            i += 1
        else:
            out.append(re.escape(pattern[i]))
            i += 1
    return re.compile("".join(out) + r"\Z")


def path_matches(path: str, patterns: Iterable[str]) -> bool:
    """Whether `path` matches a protected pattern. A pattern without "/" matches
    a name anywhere; one with "/" matches from any directory down, because the
    client does not know where the host's roots start: it errs toward a card."""
    normal = posixpath.normpath(path.replace("\\", "/")).lstrip("/")
    parts = normal.split("/")
    suffixes = ["/".join(parts[i:]) for i in range(len(parts))]
    for pattern in patterns:
        regex = _glob_regex(pattern.lstrip("/"))
        if "/" not in pattern.rstrip("/"):
            if any(regex.match(part) for part in parts):
                return True
        elif any(regex.match(suffix) for suffix in suffixes):
            return True
    return False


def in_workspace_scope(path: str, fs_scope: FsScope) -> bool:
    """A write the client can see stays inside the workspace: a relative path
    that does not climb out, under the workspace-write tier."""
    if fs_scope != "workspace-write" or path.startswith("/") or "\x00" in path:
        return False
    normal = posixpath.normpath(path)
    return normal != ".." and not normal.startswith("../")


class ApprovalPolicy:
    """hostcap's confirm hook: a permission mode, an optional contract, a
    prompt that shows cards to a human, and the grants they give."""

    def __init__(
        self,
        mode: PermissionMode | str,
        contract: Contract | str | None = None,
        *,
        prompt: Prompt | None = None,
        protected_paths: Iterable[str] = DEFAULT_PROTECTED_PATHS,
    ) -> None:
        try:
            self.mode = PermissionMode(mode)
        except ValueError:
            raise ValueError(
                f"unknown permission mode {mode!r}; expected one of {[m.value for m in PermissionMode]}"
            ) from None
        try:
            self.contract = Contract(contract) if contract is not None else None
        except ValueError:
            raise ValueError(
                f"unknown contract {contract!r}; expected one of {[c.value for c in Contract]} or None"
            ) from None
        self.prompt = prompt
        self.protected_paths = tuple(protected_paths)
        self._session_grants: dict[str, set[str]] = {}
        self._always: set[GrantKey] = set()
        #: (engine session, tool call): shell and interpreter sessions whose
        #: start was approved under the contract, so writes into them are too.
        self._input_approved: set[tuple[str, str]] = set()
        self._key_secret = secrets.token_bytes(32)

    def context(self) -> ToolApprovalContext:
        """The value `DispatchContext.approval` takes."""
        return ToolApprovalContext(
            confirm=self.confirm,
            contract=self.contract,
            preview_verdict=self.verdict,
            read_only=self.mode is PermissionMode.ASK,
        )

    # ------------------------------------------------------------------ grants

    def session_grants(self, session_id: str) -> frozenset[str]:
        """The exact tools (`ToolApprovalRequest.subject`) granted `allow-session` in `session_id`."""
        return frozenset(self._session_grants.get(session_id, ()))

    def end_session(self, session_id: str) -> None:
        """Forget the session's grants."""
        self._session_grants.pop(session_id, None)
        self._input_approved = {k for k in self._input_approved if k[0] != session_id}

    def _input_key(self, request: ToolApprovalRequest) -> tuple[str, str] | None:
        """The key of a write's session start among the contract-approved ones."""
        started_by = (request.unredacted_preview or request.preview).started_by
        if request.session_id is None or not started_by:
            return None
        return (request.session_id, started_by)

    def _approved(self, request: ToolApprovalRequest, label: str) -> ToolApprovalDecision:
        """An approval; under a contract, one that starts a shell or
        interpreter session with its input open approves writes into that
        session (the card said so), and no other."""
        if request.contract_card and request.starts_code_session and request.session_id:
            self._input_approved.add((request.session_id, request.tool_call_id))
        return ToolApprovalDecision(outcome="approve", label=label)

    @staticmethod
    def _target(request: ToolApprovalRequest) -> str:
        preview = request.unredacted_preview or request.preview
        return preview.command or preview.path or preview.host or preview.tool or ""

    @staticmethod
    def grant_key(request: ToolApprovalRequest) -> GrantKey:
        """What an `always` grant covers: the exact tool and its exact effective
        target (program, argument vector and working directory; path; host),
        read from the unscrubbed copy, so two targets the scrub makes look
        alike never share a grant."""
        preview = request.unredacted_preview or request.preview
        return (
            request.subject,
            request.action,
            preview.command,
            tuple(preview.args),
            preview.path,
            preview.host,
        )

    def target_key(self, request: ToolApprovalRequest) -> str:
        """`grant_key` as an opaque digest (never the target itself)."""
        encoded = json.dumps(self.grant_key(request), ensure_ascii=False).encode()
        return hmac.new(self._key_secret, encoded, hashlib.sha256).hexdigest()[:32]

    def _scopes(
        self, request: ToolApprovalRequest, choices: tuple[PromptChoice, ...]
    ) -> dict[PromptChoice, str]:
        shown = request.preview
        scopes: dict[PromptChoice, str] = {
            "approve": "this call only",
            "reject": "refuse this call; nothing is run",
        }
        if request.writes_code:
            scopes["approve"] = "this write only"
            scopes["reject"] = "refuse this write; nothing is written"
        elif request.starts_code_session:
            scopes["approve"] = "this call only; " + (
                "what is written into the session it starts runs as its program, and under "
                f"the {self.contract} contract approving this approves those writes too "
                "(that session only)"
                if request.contract_card
                else "each write into the session it starts is asked about separately"
            )
        if "allow-session" in choices and request.writes_code:
            scopes["allow-session"] = (
                f"every write into session {shown.session} (whatever is written: it runs as "
                f"its program) for the rest of session {request.session_id}; no other "
                "session, no other tool"
            )
        elif "allow-session" in choices:
            scopes["allow-session"] = (
                f"every call of {_subject_text(request)}, whatever its target and arguments, "
                f"for the rest of session {request.session_id}; no other tool, "
                "no other session"
            )
            if request.starts_code_session and request.contract_card:
                scopes["allow-session"] += (
                    "; writes into each session such a call starts are approved with it"
                )
        if "always" in choices:
            if shown.command is not None:
                what = f"exactly the command line {shown.command}"
                if shown.path:
                    what += f" in {shown.path}"
            elif shown.path is not None:
                what = f"exactly the path {shown.path}"
            elif shown.tool is not None:
                what = f"exactly the MCP tool {shown.host}/{shown.tool} with any arguments"
            else:
                what = f"exactly the host {shown.host}"
            scopes["always"] = (
                f"{request.tool_id} with {what}, in every session while this policy lives; "
                "any other target still asks, and a contract card (plan, goal) still asks"
            )
        return scopes

    def _protected(self, request: ToolApprovalRequest) -> bool:
        # Classify on the unscrubbed copy: the scrub can make a protected path look harmless.
        path = (request.unredacted_preview or request.preview).path
        return (
            request.action == "fs_write"
            and path is not None
            and path_matches(path, self.protected_paths)
        )

    def _choices(self, request: ToolApprovalRequest) -> tuple[PromptChoice, ...]:
        choices: list[PromptChoice] = ["approve", "reject"]
        if request.session_id is not None:
            choices.append("allow-session")
        command = (request.unredacted_preview or request.preview).command
        always_unsafe = (
            request.contract_card
            or self._protected(request)
            or (request.action == "process" and (command is None or is_interpreter(command)))
        )
        if not always_unsafe and self._target(request):
            choices.append("always")
        return tuple(choices)

    # ---------------------------------------------------------------- deciding

    def verdict(self, request: ToolApprovalRequest) -> ApprovalVerdict:
        """The decision before any prompt: pure, so `explain` can show it."""
        if self.mode is PermissionMode.ASK:
            return ApprovalVerdict(verdict="deny", why="ask mode is read-only")
        if self._protected(request):
            return ApprovalVerdict(verdict="card", why="the path is protected")
        # An `always` grant answers the permission mode's card, never a contract's.
        if not request.contract_card and self.grant_key(request) in self._always:
            return ApprovalVerdict(verdict="approve", why="always allowed")
        granted = request.session_id is not None and request.subject in self._session_grants.get(
            request.session_id, ()
        )
        if request.contract_card and request.writes_code:
            key = self._input_key(request)
            if granted or (key is not None and key in self._input_approved):
                return ApprovalVerdict(verdict="approve", why="this session was approved for input")
            # Never a card: under a contract only the approval of the session's start admits it.
            return ApprovalVerdict(
                verdict="deny",
                why=f"the {self.contract} contract refuses input into a shell or interpreter "
                "session not approved for it",
            )
        if request.contract_card:
            if granted:
                return ApprovalVerdict(verdict="approve", why="allowed for this session")
            return ApprovalVerdict(
                verdict="card", why=f"the {self.contract} contract asks before this tool"
            )
        if self.mode is PermissionMode.AUTO:
            return ApprovalVerdict(verdict="approve", why="auto mode")
        if request.action == "fs_write" and in_workspace_scope(
            (request.unredacted_preview or request.preview).path or "", request.fs_scope
        ):
            return ApprovalVerdict(
                verdict="approve", why="accept-edits: a write inside the workspace"
            )
        if granted:
            return ApprovalVerdict(verdict="approve", why="allowed for this session")
        if request.writes_code:
            return ApprovalVerdict(
                verdict="card",
                why="accept-edits asks before each write into a shell or interpreter session",
            )
        return ApprovalVerdict(verdict="card", why=f"accept-edits asks before {request.action}")

    async def confirm(self, request: ToolApprovalRequest) -> ToolApprovalDecision:
        """The confirm hook: decide, show a card when one is needed, record grants."""
        decided = self.verdict(request)
        if decided.verdict == "approve":
            return self._approved(request, decided.why)
        if decided.verdict == "deny":
            return ToolApprovalDecision(outcome="reject", label=decided.why)
        if self.prompt is None:
            return ToolApprovalDecision(outcome="no_prompt", label=decided.why)
        choices = self._choices(request)
        card = ApprovalCard(
            tool_id=request.tool_id,
            action=request.action,
            preview=request.preview,
            choices=choices,
            why=decided.why,
            session_id=request.session_id,
            scopes=self._scopes(request, choices),
            target_key=self.target_key(request),
        )
        answer = await self.prompt(card)
        if answer not in card.choices:
            raise ApprovalProtocolError(
                f"the prompt answered {answer!r}, not one of {card.choices}"
            )
        if answer == "reject":
            return ToolApprovalDecision(outcome="reject", label="rejected by the user")
        if answer == "allow-session" and request.session_id is not None:
            self._session_grants.setdefault(request.session_id, set()).add(request.subject)
        elif answer == "always":
            self._always.add(self.grant_key(request))
        return self._approved(request, f"approved ({answer})")


def _subject_text(request: ToolApprovalRequest) -> str:
    """The exact tool of `request` as a card shows it (the scrubbed copy)."""
    shown = request.preview
    if shown.tool is not None:
        return f"the MCP tool {shown.host}/{shown.tool} (through {request.tool_id})"
    return request.tool_id
