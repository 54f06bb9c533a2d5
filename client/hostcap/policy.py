"""The engine-side guardrails: tool policy classes, policy targets, and the
command and domain allowlists.

These checks run on the *effective* arguments of a call (model arguments,
input mapping and config-only values merged), so a value that arrives by
mapping is checked exactly like one the model wrote.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal
from urllib.parse import urlsplit

EgressKind = Literal["http", "search", "mcp"]
ToolActionClass = Literal["fs_write", "process", "egress", "os"]
FsScope = Literal["read-only", "workspace-write"]
FS_SCOPES: tuple[FsScope, ...] = ("read-only", "workspace-write")


@dataclass(frozen=True, kw_only=True)
class ToolPolicyClass:
    """What a tool does, for the guardrails and the approval gate."""

    #: Uses the filesystem scope tier (read_file, write_file, list_directory).
    fs_scoped: bool = False
    #: The fs operation writes (write_file); reads are never governed by approval.
    fs_write: bool = False
    #: Spawns a process under the command allowlist (run_command, git_*).
    spawns_process: bool = False
    #: Outbound egress, by kind: each kind has its own policy.
    egress: EgressKind | None = None
    #: An OS-integration action (clipboard, notification).
    os: bool = False
    #: Needs a human-gate approval before it may run (git_commit).
    requires_gate_approval: bool = False
    #: A process tool that pins the program it runs (git_status, git_commit):
    #: its calls are never a model-controlled process. A policy target's
    #: `command_fixed` is honoured only for a tool that declares this.
    fixed_command: bool = False
    #: Reads a stored media handle, under the node's media scope (read_media).
    media: bool = False

    @property
    def idempotent_read(self) -> bool:
        """No write, process, egress or os effect: a failure may be retried by the model."""
        return not (self.fs_write or self.spawns_process or self.egress or self.os)


@dataclass(frozen=True, kw_only=True)
class PolicyTarget:
    """Where a call's guardrail target lives, captured once from the
    validated effective arguments and frozen: the approval card, the
    allowlist check and the dispatch all see this same value.

    `command_fixed` marks a command the tool itself pins (git_status runs
    `git`, never a model-chosen executable): it is pre-approved, so the
    allowlist does not apply and approval does not treat it as a
    model-controlled process.
    """

    command: str | None = None
    args: tuple[str, ...] = ()
    command_fixed: bool = False
    url: str | None = None
    host: str | None = None
    path: str | None = None
    #: The media handle a media tool reads (checked against the media scope).
    media_handle: str | None = None
    #: The tool an MCP call names on its server (`host`): a grant covers
    #: the server and this tool, never the server alone.
    mcp_tool: str | None = None
    #: A session the call starts runs what is written into it: a shell or
    #: interpreter (`hostcap.session_input`) started with `tty` or
    #: `stdin_open` by exec_command.
    code_input: bool = False
    #: The session a write goes into (write_stdin): a grant covers this
    #: session, never another; `input` is what is written, `started_by`
    #: the tool call that started the session.
    session: str | None = None
    input: str | None = None
    started_by: str | None = None


@dataclass(frozen=True, init=False)
class ToolPolicy:
    """The resolved allowlists of a node: exact commands, opt-in command
    globs, exact HTTPS hosts. Empty means deny all.

    `read_only_commands` names the allowed programs the node's author
    declares only read (`ls`, `cat`, `grep`): it admits nothing by itself,
    and a command runner whose every allowed program is listed there is
    annotated read-only (`hostcap mcp`'s tool hints)."""

    allowed_commands: frozenset[str]
    allowed_command_globs: tuple[str, ...]
    allowed_domains: frozenset[str]
    read_only_commands: frozenset[str]

    def __init__(
        self,
        allowed_commands: Iterable[str] = (),
        allowed_command_globs: Iterable[str] = (),
        allowed_domains: Iterable[str] = (),
        read_only_commands: Iterable[str] = (),
    ) -> None:
        commands = _strings("allowed_commands", allowed_commands)
        globs = _strings("allowed_command_globs", allowed_command_globs)
        domains = _strings("allowed_domains", allowed_domains)
        object.__setattr__(
            self,
            "read_only_commands",
            frozenset(_strings("read_only_commands", read_only_commands)),
        )
        object.__setattr__(self, "allowed_commands", frozenset(commands))
        object.__setattr__(self, "allowed_command_globs", globs)
        object.__setattr__(
            self, "allowed_domains", frozenset(normalise_hostname(h) for h in domains)
        )

    @property
    def only_reads(self) -> bool:
        """Every program the allowlist admits is declared read-only (and no
        glob admits programs nobody listed)."""
        return (
            bool(self.allowed_commands)
            and not self.allowed_command_globs
            and self.allowed_commands <= self.read_only_commands
        )

    def command_allowed(self, command: str) -> bool:
        """Exact match on the allowlist, else an opt-in glob; empty lists deny all."""
        if command in self.allowed_commands:
            return True
        return any(_glob_matches(glob, command) for glob in self.allowed_command_globs)


def _glob_matches(glob: str, command: str) -> bool:
    # fnmatch's "*" crosses "/": a bare-name glob such as "py*" must not admit a
    # path ("py/../../bin/sh"), so only a glob that itself names a path matches one.
    if "/" in command and "/" not in glob:
        return False
    return fnmatch.fnmatchcase(command, glob)


def _strings(name: str, values: Iterable[str]) -> tuple[str, ...]:
    if isinstance(values, str):
        # A bare string would silently become a set of its characters.
        raise TypeError(f"ToolPolicy.{name} takes a collection of strings, not a string")
    items = tuple(values)
    if not all(isinstance(value, str) and value for value in items):
        raise TypeError(f"ToolPolicy.{name} entries must be non-empty strings")
    return items


def normalise_hostname(host: str) -> str:
    """Lower case, no trailing dot, IDNA-encoded: one spelling per host, so an
    allowlist entry and a request compare equal exactly when they name the same host."""
    host = host.strip().rstrip(".").lower()
    try:
        return host.encode("idna").decode("ascii")
    except UnicodeError:
        return host


def https_host(url: str) -> str | None:
    """The normalised hostname of an https URL, or None when the URL is not
    https (or carries credentials, or has no host)."""
    try:
        parts = urlsplit(url)
        hostname = parts.hostname
    except ValueError:
        return None
    if parts.scheme.lower() != "https" or not hostname or "@" in parts.netloc:
        return None
    return normalise_hostname(hostname)


def domain_allowed(policy: ToolPolicy, host: str) -> bool:
    """Exact hostname match: no suffix or subdomain match."""
    return normalise_hostname(host) in policy.allowed_domains


def governed_action(policy: ToolPolicyClass, target: PolicyTarget | None) -> ToolActionClass | None:
    """The approval action class of a call, or None when approval does not govern it.

    A process is governed only when its command is model-controlled, so a
    tool pinning its command (git_status) is not gated.
    """
    if policy.fs_write:
        return "fs_write"
    if policy.egress is not None:
        return "egress"
    if policy.os:
        return "os"
    if policy.spawns_process and target is not None and target.command and not target.command_fixed:
        return "process"
    return None
