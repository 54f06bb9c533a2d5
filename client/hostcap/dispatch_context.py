"""What one dispatch is made of: the call, the node's config, the context
that authorises it, and what comes back (`ToolDispatchOutcome`, or the
step-by-step `DispatchExplanation` of `explain`)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, Iterable, Mapping
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from hostcap.approval import ToolActionPreview, ToolApprovalContext
from hostcap.bounding import ToolResultLimits
from hostcap.contract import Admission, Contract
from hostcap.errors import ToolDispatchError
from hostcap.events import EventCallback
from hostcap.host import HostCallOptions, MediaHandle, SpilledResult
from hostcap.policy import FS_SCOPES, FsScope, PolicyTarget, ToolActionClass, ToolPolicy
from hostcap.tooldef import ToolDef, ToolRunContext
from hostcap.untrusted import Untrusted

AnyToolDef = ToolDef[Any, Any]


@dataclass(frozen=True)
class OutputChunk:
    """A piece of a running command's output, as `DispatchContext.on_output`
    receives it: bounded (`ToolResultLimits.max_streamed_bytes` per call in
    all) and `Untrusted`, like the result it becomes part of. `final` marks
    the one chunk that says the stream stopped at its bound."""

    tool_call_id: str
    tool_id: str
    stream: Literal["stdout", "stderr"]
    text: Untrusted[str]
    final: bool = False


#: Receives output chunks while a command runs, sync or async.
OutputCallback = Callable[[OutputChunk], object]
#: `(tool_id, policy target) -> None | veto reason`, synchronous.
BeforeDispatch = Callable[[str, PolicyTarget | None], object]


@dataclass(frozen=True, init=False)
class ToolCall:
    """A tool call as the model (or a tool node) made it.

    `args` is a mapping, or the JSON text of one (as OpenAI sends a call's
    arguments): the text is parsed here. Text that is not JSON, or JSON that
    is not an object with string keys, is kept as `args_error`, and
    `dispatch` refuses the call with a `ToolArgsInvalidError` (loop
    correctable: the model sees what was wrong) once the tool is resolved
    and granted, never with a TypeError.
    """

    id: str
    name: str
    args: Mapping[str, Any]
    provider_executed: bool
    #: Why `args` text could not be taken (then `args` is empty).
    args_error: str | None = field(compare=False, repr=False)

    def __init__(
        self,
        id: str,
        name: str,
        args: Mapping[str, Any] | str | bytes | None = None,
        provider_executed: bool = False,
    ) -> None:
        if not isinstance(id, str) or not id:
            raise TypeError("ToolCall.id must be a non-empty string")
        if not isinstance(name, str):
            raise TypeError("ToolCall.name must be a string")
        problem: str | None = None
        if args is None:
            args = {}
        elif isinstance(args, (str, bytes, bytearray)):
            args, problem = _parse_json_args(args)
        elif not isinstance(args, Mapping):
            raise TypeError("ToolCall.args must be a mapping of argument names to values")
        elif not all(isinstance(key, str) for key in args):
            raise TypeError("ToolCall.args keys must be strings")
        object.__setattr__(self, "id", id)
        object.__setattr__(self, "name", name)
        # A copy, so a caller mutating its dict later cannot change what was checked.
        object.__setattr__(self, "args", MappingProxyType(dict(args)))
        object.__setattr__(self, "provider_executed", bool(provider_executed))
        object.__setattr__(self, "args_error", problem)


def _parse_json_args(text: str | bytes | bytearray) -> tuple[dict[str, Any], str | None]:
    """The arguments a JSON text stands for, or why it stands for none."""
    if not text.strip():
        return {}, None
    try:
        parsed = json.loads(text)
    except (ValueError, RecursionError) as error:
        where = (
            f": {error.msg} at character {error.pos}"
            if isinstance(error, json.JSONDecodeError)
            else ""
        )
        return {}, f"the arguments are not valid JSON{where}"
    if not isinstance(parsed, dict) or not all(isinstance(key, str) for key in parsed):
        return {}, "the arguments must be a JSON object"
    return parsed, None


class ToolNodeConfig(BaseModel):
    """A node's resolved tool config: values for config-only parameters, an
    `input_mapping` of argument names to already-resolved values, and an
    `output_mapping` of result fields (dotted paths) to state keys."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    input_mapping: dict[str, Any] = Field(default_factory=dict)
    output_mapping: dict[str, str] = Field(default_factory=dict)
    values: dict[str, Any] = Field(default_factory=dict)

    @classmethod
    def from_mapping(cls, config: Mapping[str, Any]) -> ToolNodeConfig:
        """A plain mapping: `input_mapping` and `output_mapping` keys, every other key a config-only value."""
        rest = {k: v for k, v in config.items() if k not in ("input_mapping", "output_mapping")}
        return cls(
            input_mapping=dict(config.get("input_mapping") or {}),
            output_mapping=dict(config.get("output_mapping") or {}),
            values=rest,
        )


@dataclass(frozen=True, kw_only=True)
class DispatchContext:
    """Everything one dispatch is authorised and configured by.

        ctx = DispatchContext(
            granted_tool_ids={"read_file", "run_command"},
            tool_policy=ToolPolicy(allowed_commands={"pytest"}),
            approval=ApprovalPolicy("accept-edits", prompt=ask).context(),
            session_id="chat-1",
        )

    Only the grant must be decided; every other field has the default an
    agent chat needs: node `agent`, no node config, no command or domain
    allowed (deny-all), the workspace-write scope tier, no human gate.

    `approval` present means the interactive approval regime (chat): a
    governed call needs the confirm hook's decision. Absent means the
    workflow author-trust path. `signal`, when set, cancels the call.
    `secret_arg_keys` names the effective-argument keys whose values are
    secret-tainted; it is required (possibly empty) whenever
    `input_mapping` supplies values, because a mapped value's provenance is
    otherwise unknown.
    """

    #: The tools this node may call (registered is not granted).
    granted_tool_ids: AbstractSet[str]
    #: Who calls: carried on every audit record (`node_id` label).
    node_id: str = "agent"
    #: The node's config: config-only values and input/output mappings.
    config: ToolNodeConfig | Mapping[str, Any] = field(default_factory=dict)
    #: The command and domain allowlists (empty: deny all).
    tool_policy: ToolPolicy = field(default_factory=ToolPolicy)
    #: The descriptive scope tier (the host enforces its own).
    fs_scope: FsScope = "workspace-write"
    #: A human gate approved this run (`git_commit` needs it): the engine's
    #: workflow decides it, never the chat.
    gate_approved: bool = False
    approval: ToolApprovalContext | None = None
    secret_arg_keys: AbstractSet[str] | None = None
    limits: ToolResultLimits | None = None
    signal: asyncio.Event | None = None
    session_id: str | None = None
    invoke_agent: Callable[[str, Any], Awaitable[Any]] | None = None
    #: Receives this dispatch's events (`hostcap.events`), sync or async.
    on_event: EventCallback | None = None
    #: Receives a running command's output as it comes (`OutputChunk`), sync
    #: or async; the outcome still carries the whole bounded result.
    on_output: OutputCallback | None = None
    #: Trusted admission check run synchronously after approval, immediately
    #: before the host call: `(tool_id, frozen target) -> None` to proceed or
    #: a reason string to veto. It can only refuse: anything but None vetoes.
    before_dispatch: BeforeDispatch | None = None
    #: Passed through to the host call (deadline, extra audit labels).
    host_call_options: HostCallOptions | None = None
    #: The media handles `read_media` may attach; None: media the run's own
    #: output store holds (a handle it does not hold is refused either way).
    media_scope: AbstractSet[str] | None = None
    node_config: ToolNodeConfig = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not isinstance(self.node_id, str) or not self.node_id:
            raise TypeError("DispatchContext.node_id must be a non-empty string")
        if isinstance(self.granted_tool_ids, str) or not isinstance(
            self.granted_tool_ids, Iterable
        ):
            raise TypeError("DispatchContext.granted_tool_ids must be a collection of tool ids")
        object.__setattr__(self, "granted_tool_ids", frozenset(self.granted_tool_ids))
        if isinstance(self.config, ToolNodeConfig):
            node_config = self.config
        elif isinstance(self.config, Mapping):
            node_config = ToolNodeConfig.from_mapping(self.config)
        else:
            raise TypeError("DispatchContext.config must be a ToolNodeConfig or a mapping")
        object.__setattr__(self, "node_config", node_config)
        if not isinstance(self.tool_policy, ToolPolicy):
            raise TypeError("DispatchContext.tool_policy must be a ToolPolicy")
        if self.fs_scope not in FS_SCOPES:
            raise ValueError(f"DispatchContext.fs_scope must be one of {FS_SCOPES}")
        if not isinstance(self.gate_approved, bool):
            raise TypeError("DispatchContext.gate_approved must be a bool")
        if self.approval is not None and not isinstance(self.approval, ToolApprovalContext):
            raise TypeError(
                "DispatchContext.approval takes ApprovalPolicy.context() (a ToolApprovalContext)"
            )
        if self.secret_arg_keys is not None:
            if isinstance(self.secret_arg_keys, str):
                raise TypeError("DispatchContext.secret_arg_keys must be a collection of keys")
            object.__setattr__(self, "secret_arg_keys", frozenset(self.secret_arg_keys))
        if self.limits is not None and not isinstance(self.limits, ToolResultLimits):
            raise TypeError("DispatchContext.limits must be a ToolResultLimits")
        if self.signal is not None and not isinstance(self.signal, asyncio.Event):
            raise TypeError("DispatchContext.signal must be an asyncio.Event")
        for name in ("on_event", "before_dispatch", "on_output"):
            value = getattr(self, name)
            if value is not None and not callable(value):
                raise TypeError(f"DispatchContext.{name} must be callable")
        if self.media_scope is not None:
            if isinstance(self.media_scope, str):
                raise TypeError("DispatchContext.media_scope must be a collection of handles")
            object.__setattr__(self, "media_scope", frozenset(self.media_scope))
        if self.host_call_options is not None and not isinstance(
            self.host_call_options, HostCallOptions
        ):
            raise TypeError("DispatchContext.host_call_options must be a HostCallOptions")

    @property
    def contract(self) -> Contract | None:
        return self.approval.contract if self.approval is not None else None


@dataclass(frozen=True)
class ToolDispatchOutcome:
    """The result of a dispatch.

    `tool_result` is the bounded model-facing text, `Untrusted`; `result` the
    full structured result, also `Untrusted`; `state_updates` what
    `output_mapping` took from the full result (state key to value, each
    value `Untrusted`: it is tool output, whatever state it lands in);
    `spilled` where the full text went when bounding cut it; `media` the
    handle of binary content a tool stored instead of returning inline.
    """

    tool_call_id: str
    tool_id: str
    tool_result: Untrusted[str]
    result: Untrusted[Any]
    state_updates: Mapping[str, Untrusted[Any]]
    truncated: bool = False
    spilled: SpilledResult | None = None
    media: Untrusted[MediaHandle] | None = None
    #: The call ended cleanly: False for a command that timed out, was
    #: killed, hit a limit or exited non-zero (its result says how).
    clean: bool = True
    #: The model-facing text may carry content from outside the call (a
    #: file, output, a response); False for an acknowledgement made of the
    #: host's facts and the call's own arguments.
    untrusted_content: bool = True


StepName = Literal[
    "provider_executed", "resolve", "grant", "assemble", "validate", "guardrails",
    "contract", "arms", "approval", "host_call",
]  # fmt: skip
StepDecisionValue = Literal["pass", "deny", "card", "approve", "skip", "would_run"]


@dataclass(frozen=True)
class StepDecision:
    step: StepName
    decision: StepDecisionValue
    detail: str = ""


@dataclass(frozen=True)
class DispatchExplanation:
    """What `dispatch` would decide, step by step, without running anything.

    `verdict` is `would_run`, `would_ask` (a human would see a card; the
    confirm hook decides), or `denied` (with the error dispatch would raise).
    """

    tool_call_id: str
    tool_id: str | None
    steps: tuple[StepDecision, ...]
    verdict: Literal["would_run", "would_ask", "denied"]
    error: ToolDispatchError | None = None
    preview: ToolActionPreview | None = None


@dataclass(frozen=True)
class Admitted:
    """A call that passed steps 1-5: its tool, validated arguments, frozen
    target, approval action class, contract admission and run context."""

    tool: AnyToolDef
    args: BaseModel
    target: PolicyTarget | None
    action: ToolActionClass | None
    admission: Admission
    run_ctx: ToolRunContext
