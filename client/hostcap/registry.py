"""The tool registry and its fixed dispatch pipeline.

    registry = create_tool_registry(tools=BUILTIN_TOOLS, host=host)
    outcome = await registry.dispatch(ToolCall(id, name, args), ctx)

`dispatch` runs, in this order (security order matters: the effective
arguments are assembled before any guardrail looks at them, so a value that
arrives by input mapping is checked like one the model wrote):

1. refuse a provider-executed call (before resolution);
2. resolve the name by exact id (an unknown one lists the available ids,
   never a nearest match), then check the node's grant (registered is not
   granted);
3. assemble the effective arguments: model arguments, then `input_mapping`,
   then config-only values (config wins); a model argument naming a
   config-only parameter is refused;
4. check secret taint, then validate the complete effective set;
5. guardrails on the effective arguments: exact command allowlist (opt-in
   globs, deny-all when empty), HTTPS-only exact-host domains, the human
   gate, the media scope; then the admission predicate the catalogue shares
   (`hostcap.admission`: the contract's admission by effect, the read-only
   `ask` mode); then the arms the tool needs;
6. per-tool approval of governed calls through the confirm hook
   (fail-closed), reported as `approval_requested` / `approval_answered`;
7. the engine's `before_dispatch` veto (synchronous, can only refuse);
8. the one host call (`tool_call_started` just before it), cancellable
   through `ctx.signal`, bounded by the `host_call_options` deadline;
9. `output_mapping` on the full result (each value `Untrusted`);
10. bound the model-facing result, spilling the full text to the output
    store (`spill(text, limits, signal)`);
11. mark it `Untrusted`; one terminal event (`tool_call_finished`,
    `tool_call_denied` or `tool_call_failed`, see `hostcap.events`).

`explain` runs steps 1-6 without prompting or calling the host and reports
every step's decision.
"""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import json
import shlex
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Literal, TypeVar, cast
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field

from hostcap.admission import READ_ONLY_LABEL, Offer, tool_admission
from hostcap.approval import (
    ToolActionPreview,
    ToolApprovalContext,
    ToolApprovalDecision,
    ToolApprovalRequest,
)
from hostcap.bounding import (
    DEFAULT_TOOL_RESULT_LIMITS,
    NO_OUTPUT_STORE,
    ToolResultLimits,
    bound_text,
)
from hostcap.contract import Admission, Contract
from hostcap.errors import (
    HostError,
    ToolArgsInvalidError,
    ToolCancelledError,
    ToolDeniedByUserError,
    ToolDispatchError,
    ToolDispatchVetoedError,
    ToolExecutionError,
    ToolPolicyError,
    ToolRegistrationError,
    ToolUnavailableError,
    UnknownToolError,
    from_host_error,
)
from hostcap.events import (
    EventCallback,
    EventKind,
    ToolEvent,
    clip,
    deliver,
    summarize_input,
    summarize_output,
)
from hostcap.host import HostCallOptions, MediaHandle, SpilledResult, ToolHost
from hostcap.output_store import OutputStoreError
from hostcap.policy import (
    FS_SCOPES,
    FsScope,
    PolicyTarget,
    ToolActionClass,
    ToolPolicy,
    domain_allowed,
    governed_action,
    https_host,
    normalise_hostname,
)
from hostcap.redaction import redact_secret_shaped_text
from hostcap.tooldef import ToolDef, ToolRunContext
from hostcap.untrusted import Untrusted

T = TypeVar("T")
AnyToolDef = ToolDef[Any, Any]
#: `(tool_id, policy target) -> None | veto reason`, synchronous.
BeforeDispatch = Callable[[str, PolicyTarget | None], object]
#: How long past a `host_call_options` deadline the registry waits for the
#: host to report it before abandoning the call itself.
DEADLINE_GRACE_S = 5.0
#: Longest veto reason kept on the error and the event.
VETO_LABEL_CHARS = 200


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


@dataclass(frozen=True)
class DispatchContext:
    """Everything one dispatch is authorised and configured by.

    `approval` present means the interactive approval regime (chat): a
    governed call needs the confirm hook's decision. Absent means the
    workflow author-trust path. `signal`, when set, cancels the call.
    `secret_arg_keys` names the effective-argument keys whose values are
    secret-tainted; it is required (possibly empty) whenever
    `input_mapping` supplies values, because a mapped value's provenance is
    otherwise unknown.
    """

    node_id: str
    granted_tool_ids: AbstractSet[str]
    config: ToolNodeConfig | Mapping[str, Any]
    tool_policy: ToolPolicy
    fs_scope: FsScope
    gate_approved: bool
    approval: ToolApprovalContext | None = None
    secret_arg_keys: AbstractSet[str] | None = None
    limits: ToolResultLimits | None = None
    signal: asyncio.Event | None = None
    session_id: str | None = None
    invoke_agent: Callable[[str, Any], Awaitable[Any]] | None = None
    #: Receives this dispatch's events (`hostcap.events`), sync or async.
    on_event: EventCallback | None = None
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
        for name in ("on_event", "before_dispatch"):
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
class _Admitted:
    tool: AnyToolDef
    args: BaseModel
    target: PolicyTarget | None
    action: ToolActionClass | None
    admission: Admission
    run_ctx: ToolRunContext


class ToolRegistry:
    """Registered ToolDefs and one ToolHost. Performs no I/O until dispatch."""

    def __init__(
        self, tools: Iterable[AnyToolDef], host: ToolHost, *, on_event: EventCallback | None = None
    ) -> None:
        if on_event is not None and not callable(on_event):
            raise TypeError("on_event must be callable")
        #: Receives every dispatch's events (`hostcap.events`), sync or async.
        self.on_event = on_event
        self._tools: dict[str, AnyToolDef] = {}
        for tool in tools:
            if not isinstance(tool, ToolDef):
                raise ToolRegistrationError(f"{tool!r} is not a ToolDef")
            if tool.id in self._tools:
                raise ToolRegistrationError(f"tool id {tool.id!r} is registered twice")
            self._tools[tool.id] = tool
        self._host = host

    @property
    def host(self) -> ToolHost:
        return self._host

    @property
    def tool_ids(self) -> tuple[str, ...]:
        return tuple(sorted(self._tools))

    def get(self, tool_id: str) -> AnyToolDef | None:
        return self._tools.get(tool_id)

    # ---------------------------------------------------------------- catalogue

    def catalogue(self, ctx: DispatchContext | None = None) -> tuple[AnyToolDef, ...]:
        """The tools to offer the model: granted to the node (when `ctx` is
        given) and not denied by its approval regime: its contract, or a
        read-only (`ask`) mode for a tool that could only be denied. The
        predicate is `hostcap.admission.tool_admission`, the one the
        dispatch guard uses."""
        approval = ctx.approval if ctx is not None else None
        return tuple(
            tool
            for tool_id, tool in sorted(self._tools.items())
            if (ctx is None or tool_id in ctx.granted_tool_ids)
            and not tool_admission(tool, approval).denied
        )

    def openai_tools(self, ctx: DispatchContext | None = None) -> list[dict[str, Any]]:
        """The catalogue in OpenAI's tool-calling shape."""
        return [
            {
                "type": "function",
                "function": {
                    "name": tool.id,
                    "description": tool.description,
                    "parameters": dict(tool.llm_visible_params),
                },
            }
            for tool in self.catalogue(ctx)
        ]

    def anthropic_tools(self, ctx: DispatchContext | None = None) -> list[dict[str, Any]]:
        """The catalogue in Anthropic's tool-use shape."""
        return [
            {
                "name": tool.id,
                "description": tool.description,
                "input_schema": dict(tool.llm_visible_params),
            }
            for tool in self.catalogue(ctx)
        ]

    # ---------------------------------------------------------------- dispatch

    async def dispatch(self, call: ToolCall, ctx: DispatchContext) -> ToolDispatchOutcome:
        """Run `call` through the pipeline; raises a ToolDispatchError subclass
        on every refusal or failure. Emits its events (`hostcap.events`) to the
        registry's and the context's callbacks."""
        admitted: _Admitted | None = None
        started = False
        began = time.monotonic()
        try:
            _refuse_if_cancelled(ctx, call.name)
            admitted = self._admit(call, ctx, [])
            await self._approve(admitted, call, ctx)
            self._before_dispatch(admitted, ctx)
            _refuse_if_cancelled(ctx, admitted.tool.id)
            await self._emit(
                ctx,
                _event("tool_call_started", call, ctx, admitted.tool.id,
                       detail={"arms": sorted(admitted.tool.arms)},
                       tool_input_summary=_input_summary(admitted, call, ctx)),
            )  # fmt: skip
            started = True
            began = time.monotonic()
            result = await self._call_host(admitted, ctx)
            state_updates = _apply_output_mapping(
                admitted.tool, result, ctx.node_config.output_mapping
            )
            outcome = await self._finish(admitted, call, ctx, result, state_updates)
        except ToolDispatchError as error:
            await self._emit(ctx, _error_event(error, call, ctx, admitted, started))
            raise
        except asyncio.CancelledError:
            # The caller's task was cancelled: the terminal event still goes
            # out (best effort, shielded), then the cancellation propagates.
            cancelled = ToolCancelledError(tool_id=admitted.tool.id if admitted else None)
            await asyncio.shield(
                self._emit(ctx, _error_event(cancelled, call, ctx, admitted, started))
            )
            raise
        await self._emit(
            ctx,
            _event("tool_call_finished", call, ctx, outcome.tool_id,
                   detail={
                       "truncated": outcome.truncated,
                       "spilled_handle": outcome.spilled.handle if outcome.spilled else None,
                       "media": outcome.media is not None,
                       "duration_seconds": round(time.monotonic() - began, 6),
                   },
                   tool_output_summary=Untrusted(summarize_output(outcome.tool_result.unwrap()))),
        )  # fmt: skip
        return outcome

    async def _emit(self, ctx: DispatchContext, event: ToolEvent) -> None:
        await deliver(event, self.on_event, ctx.on_event)

    def _before_dispatch(self, admitted: _Admitted, ctx: DispatchContext) -> None:
        """The trusted admission hook: synchronous, after every other check. It
        sees the resolved id and the frozen target, never the arguments, and
        its answer can only veto (fail closed on anything but None)."""
        hook = ctx.before_dispatch
        if hook is None:
            return
        tool_id = admitted.tool.id
        try:
            answer = hook(tool_id, admitted.target)
        except Exception:
            raise ToolDispatchVetoedError(
                tool_id=tool_id, label="the before_dispatch hook failed"
            ) from None
        if answer is None:
            return
        if inspect.isawaitable(answer):
            if inspect.iscoroutine(answer):
                answer.close()
            label = "before_dispatch must be synchronous (it returned an awaitable)"
        elif isinstance(answer, str) and answer.strip():
            label = clip(redact_secret_shaped_text(" ".join(answer.split())), VETO_LABEL_CHARS)
        else:
            label = f"before_dispatch answered {type(answer).__name__}, not None or a reason"
        raise ToolDispatchVetoedError(tool_id=tool_id, label=label)

    def explain(self, call: ToolCall, ctx: DispatchContext) -> DispatchExplanation:
        """Every step's decision for `call`, without prompting or calling the host."""
        trace: list[StepDecision] = []
        try:
            admitted = self._admit(call, ctx, trace)
        except ToolDispatchError as refused:
            tool = self._tools.get(call.name)
            return DispatchExplanation(
                call.id, tool.id if tool else None, tuple(trace), "denied", refused
            )
        verdict: Literal["would_run", "would_ask", "denied"] = "would_run"
        error: ToolDispatchError | None = None
        preview: ToolActionPreview | None = None
        approval = ctx.approval
        if not _needs_approval(admitted, ctx):
            trace.append(
                StepDecision("approval", "skip", "not a governed call under an approval regime")
            )
        else:
            assert approval is not None
            request = _approval_request(admitted, call, ctx)
            preview = request.preview
            if approval.confirm is None:
                error = ToolDeniedByUserError("no_approval_hook", tool_id=admitted.tool.id)
                trace.append(
                    StepDecision("approval", "deny", "no confirm hook under an approval regime")
                )
                verdict = "denied"
            elif approval.preview_verdict is None:
                trace.append(StepDecision("approval", "card", "the confirm hook decides"))
                verdict = "would_ask"
            else:
                decided = approval.preview_verdict(request)
                if decided.verdict == "deny":
                    error = ToolDeniedByUserError(
                        "user_rejected", tool_id=admitted.tool.id, label=decided.why
                    )
                    verdict = "denied"
                elif decided.verdict == "card":
                    verdict = "would_ask"
                trace.append(StepDecision("approval", decided.verdict, decided.why))
        if verdict != "denied":
            trace.append(
                StepDecision(
                    "host_call", "would_run", f"arms: {', '.join(sorted(admitted.tool.arms))}"
                )
            )
        return DispatchExplanation(call.id, admitted.tool.id, tuple(trace), verdict, error, preview)

    # ----------------------------------------------------------------- steps

    def _admit(self, call: ToolCall, ctx: DispatchContext, trace: list[StepDecision]) -> _Admitted:
        def deny(step: StepName, error: ToolDispatchError) -> ToolDispatchError:
            trace.append(StepDecision(step, "deny", error.message))
            return error

        # 1. A provider-executed call is never dispatched, whatever it names.
        if call.provider_executed:
            raise deny("provider_executed", ToolPolicyError("provider_executed", tool_id=None))
        trace.append(StepDecision("provider_executed", "pass"))

        # 2. Exact-id resolution, then the node's grant.
        tool = self._tools.get(call.name)
        if tool is None:
            # Only what this node is offered: the model never learns of tools it cannot call.
            offered = [t.id for t in self.catalogue(ctx)]
            raise deny("resolve", UnknownToolError(call.name, offered))
        trace.append(StepDecision("resolve", "pass", tool.id))
        if tool.id not in ctx.granted_tool_ids:
            raise deny("grant", ToolPolicyError("not_granted", tool_id=tool.id))
        trace.append(StepDecision("grant", "pass"))

        # 3. Effective arguments.
        try:
            if call.args_error is not None:
                raise ToolArgsInvalidError(call.args_error, tool_id=tool.id)
            effective = _assemble(tool, call, ctx.node_config)
        except ToolDispatchError as error:
            raise deny("assemble", error) from None
        trace.append(
            StepDecision("assemble", "pass", f"keys: {', '.join(sorted(effective)) or '(none)'}")
        )

        # 4. Secret taint, then validation of the complete set.
        try:
            _check_taint(tool, effective, ctx)
            args = tool.parse_args(effective)
            _check_output_mapping(tool, ctx.node_config.output_mapping)
        except ToolDispatchError as error:
            raise deny("validate", error) from None
        trace.append(StepDecision("validate", "pass"))

        # 5. Guardrails on the effective arguments, the contract, the arms.
        target = tool.target(args)
        if target is not None and target.command_fixed and not tool.policy.fixed_command:
            # Fail closed: only a tool declaring a fixed command may skip the allowlist.
            target = dataclasses.replace(target, command_fixed=False)
        try:
            _guardrails(tool, target, ctx)
        except ToolDispatchError as error:
            raise deny("guardrails", error) from None
        trace.append(StepDecision("guardrails", "pass"))
        offer = tool_admission(tool, ctx.approval)
        if offer is Offer.MODE_DENIED:
            raise deny("contract", ToolPolicyError("mode_denied", tool_id=tool.id))
        if offer is Offer.READ_ONLY_DENIED:
            # The catalogue withheld it: the same predicate refuses it here.
            raise deny(
                "contract",
                ToolDeniedByUserError("user_rejected", tool_id=tool.id, label=READ_ONLY_LABEL),
            )
        admission = Admission.CARD if offer is Offer.CARD else Admission.ORDINARY
        trace.append(
            StepDecision(
                "contract",
                "card" if admission is Admission.CARD else "pass",
                str(ctx.contract or "none"),
            )
        )
        # Checked before approval: a human is never asked for a call that cannot run.
        for arm in sorted(tool.arms):
            present = ctx.invoke_agent if arm == "invoke_agent" else getattr(self._host, arm, None)
            if present is None:
                raise deny("arms", ToolUnavailableError(tool_id=tool.id, arm=arm))
        trace.append(StepDecision("arms", "pass"))

        session = ctx.session_id or ""
        options = ctx.host_call_options
        # The engine's extra labels first: the correlation labels always win.
        labels = dict(options.labels) if options is not None else {}
        labels.update({"session": session, "node_id": ctx.node_id, "tool_call_id": call.id})
        run_ctx = ToolRunContext(
            tool_id=tool.id,
            tool_call_id=call.id,
            node_id=ctx.node_id,
            session_id=ctx.session_id,
            fs_scope=ctx.fs_scope,
            labels=MappingProxyType(labels),
            invoke_agent=ctx.invoke_agent,
            deadline=options.deadline if options is not None else None,
            contract=ctx.contract.value if ctx.contract is not None else None,
            media_scope=cast("frozenset[str] | None", ctx.media_scope),
        )
        return _Admitted(
            tool, args, target, governed_action(tool.policy, target), admission, run_ctx
        )

    async def _approve(self, admitted: _Admitted, call: ToolCall, ctx: DispatchContext) -> None:
        if not _needs_approval(admitted, ctx):
            return
        approval = ctx.approval
        assert approval is not None
        tool_id = admitted.tool.id
        request = _approval_request(admitted, call, ctx)
        event = request.to_event()
        preview = event.pop("preview")
        for key in ("tool_id", "tool_call_id", "session_id"):
            event.pop(key)
        await self._emit(
            ctx,
            _event("approval_requested", call, ctx, tool_id, detail=event,
                   preview=Untrusted(MappingProxyType(preview))),
        )  # fmt: skip

        async def answered(outcome: str, label: str | None) -> None:
            await self._emit(
                ctx,
                _event("approval_answered", call, ctx, tool_id,
                       detail={"outcome": outcome, "label": label}),
            )  # fmt: skip

        if approval.confirm is None:
            await answered("no_approval_hook", None)
            raise ToolDeniedByUserError("no_approval_hook", tool_id=tool_id)
        try:
            decision = await _guarded(approval.confirm(request), ctx.signal, tool_id)
        except (ToolCancelledError, asyncio.CancelledError):
            raise
        except Exception as error:
            # Consent could not be obtained: fail closed, never the retryable tool_failed.
            await answered("approval_error", None)
            raise ToolDeniedByUserError("approval_error", tool_id=tool_id) from error
        if not isinstance(decision, ToolApprovalDecision):
            await answered("approval_error", None)
            raise ToolDeniedByUserError("approval_error", tool_id=tool_id)
        await answered(decision.outcome, decision.label)
        if decision.outcome == "approve":
            return
        if decision.outcome == "no_prompt":
            raise ToolDeniedByUserError("no_approval_hook", tool_id=tool_id, label=decision.label)
        raise ToolDeniedByUserError("user_rejected", tool_id=tool_id, label=decision.label)

    async def _call_host(self, admitted: _Admitted, ctx: DispatchContext) -> BaseModel:
        tool = admitted.tool
        _refuse_if_cancelled(ctx, tool.id)
        arm = min(tool.arms) if tool.arms else "host"
        work = tool.dispatch(admitted.args, self._host, admitted.run_ctx)
        if admitted.run_ctx.deadline is not None:
            work = _within_deadline(work, admitted.run_ctx.deadline)
        try:
            result: BaseModel = await _guarded(work, ctx.signal, tool.id)
        except ToolDispatchError:
            raise  # a typed host-side denial passes through verbatim
        except asyncio.CancelledError:
            raise
        except HostError as error:
            raise from_host_error(
                error, tool_id=tool.id, arm=arm, idempotent_read=tool.policy.idempotent_read
            ) from error
        except OutputStoreError as error:
            raise ToolUnavailableError(
                tool_id=tool.id, arm="output_store", detail=str(error)
            ) from error
        except Exception as error:
            raise ToolExecutionError(
                "the host call failed", tool_id=tool.id, recoverable=tool.policy.idempotent_read
            ) from error
        if not isinstance(result, tool.result_model):
            raise ToolExecutionError(
                f"dispatch returned {type(result).__name__}, not {tool.result_model.__name__}",
                tool_id=tool.id,
                recoverable=False,
                retryable=False,
            )
        return cast(BaseModel, result)

    async def _finish(
        self,
        admitted: _Admitted,
        call: ToolCall,
        ctx: DispatchContext,
        result: BaseModel,
        state_updates: Mapping[str, Untrusted[Any]],
    ) -> ToolDispatchOutcome:
        limits = ctx.limits or DEFAULT_TOOL_RESULT_LIMITS
        text = model_text(result)
        bounded = bound_text(text, limits, None)
        spilled: SpilledResult | None = None
        if bounded.truncated:
            store = self._host.output_store
            not_kept = NO_OUTPUT_STORE
            if store is not None:
                _refuse_if_cancelled(ctx, admitted.tool.id)
                try:
                    spilled = await _guarded(
                        store.spill(text, limits, ctx.signal), ctx.signal, admitted.tool.id
                    )
                except OutputStoreError as error:
                    if error.kind == "cancelled":
                        raise ToolCancelledError(tool_id=admitted.tool.id) from None
                    # The marker then says why the full text was not kept.
                    not_kept = error.not_kept
            bounded = bound_text(text, limits, spilled.handle if spilled else None, not_kept)
        media = getattr(result, "media", None)
        return ToolDispatchOutcome(
            tool_call_id=call.id,
            tool_id=admitted.tool.id,
            tool_result=Untrusted(bounded.text),
            result=Untrusted(result),
            state_updates=MappingProxyType(dict(state_updates)),
            truncated=bounded.truncated,
            spilled=spilled,
            media=Untrusted(media) if isinstance(media, MediaHandle) else None,
        )


def create_tool_registry(
    *, tools: Iterable[AnyToolDef], host: ToolHost, on_event: EventCallback | None = None
) -> ToolRegistry:
    """A registry of `tools` dispatching against `host`, reporting every
    dispatch's events to `on_event`. No I/O, no ambient state."""
    return ToolRegistry(tools, host, on_event=on_event)


async def _within_deadline(work: Awaitable[T], deadline: float) -> T:
    """`work`, abandoned a grace period after `deadline` when the host has not
    reported the deadline itself (the host gets it as its RPC deadline)."""
    remaining = deadline - time.time()
    if remaining <= 0:
        if inspect.iscoroutine(work):
            work.close()
        raise HostError("DEADLINE_EXCEEDED", "the deadline passed before the call")
    try:
        return await asyncio.wait_for(work, remaining + DEADLINE_GRACE_S)
    except TimeoutError:
        raise HostError("DEADLINE_EXCEEDED", "the host call passed its deadline") from None


def _event(
    kind: EventKind,
    call: ToolCall,
    ctx: DispatchContext,
    tool_id: str | None,
    *,
    detail: Mapping[str, Any] | None = None,
    tool_input_summary: str | None = None,
    tool_output_summary: Untrusted[str] | None = None,
    preview: Untrusted[Mapping[str, str]] | None = None,
) -> ToolEvent:
    return ToolEvent(
        kind=kind,
        tool_call_id=call.id,
        tool_id=tool_id,
        node_id=ctx.node_id,
        session_id=ctx.session_id,
        detail=MappingProxyType(dict(detail or {})),
        tool_input_summary=Untrusted(tool_input_summary)
        if tool_input_summary is not None
        else None,
        tool_output_summary=tool_output_summary,
        preview=preview,
    )


def _masked_keys(tool: AnyToolDef | None, ctx: DispatchContext) -> frozenset[str]:
    tainted = {k.split(".", 1)[0].split("[", 1)[0] for k in ctx.secret_arg_keys or ()}
    return frozenset(tainted) | (tool.credential_params if tool is not None else frozenset())


def _input_summary(admitted: _Admitted, call: ToolCall, ctx: DispatchContext) -> str:
    """The effective arguments, projected: credential and tainted keys masked."""
    args = admitted.args.model_dump(mode="json")
    return summarize_input(args, _masked_keys(admitted.tool, ctx))


def _error_event(
    error: ToolDispatchError,
    call: ToolCall,
    ctx: DispatchContext,
    admitted: _Admitted | None,
    started: bool,
) -> ToolEvent:
    kind: EventKind = "tool_call_denied" if error.code == "tool_denied" else "tool_call_failed"
    detail: dict[str, Any] = {
        "code": error.code,
        "reason": getattr(error, "reason", None) or getattr(error, "host_reason", None),
        "error": type(error).__name__,
        "recoverable": error.recoverable,
        "retryable": error.retryable,
        "after_start": started,
    }
    label = getattr(error, "label", None)
    if isinstance(label, str):
        detail["label"] = label
    if admitted is not None:
        summary = _input_summary(admitted, call, ctx)
    else:
        summary = summarize_input(call.args, _masked_keys(None, ctx))
    # An unknown tool's name is the model's text: it is not the event's tool id.
    tool_id = admitted.tool.id if admitted is not None else error.tool_id
    return _event(kind, call, ctx, tool_id, detail=detail, tool_input_summary=summary)


# --------------------------------------------------------------------- helpers


def model_text(result: BaseModel) -> str:
    """The model-facing text of a result: its own rendering, else indented JSON."""
    render = getattr(result, "model_text", None)
    if callable(render):
        return str(render())
    return result.model_dump_json(indent=2)


def _refuse_if_cancelled(ctx: DispatchContext, tool_id: str | None) -> None:
    # An abort that already happened refuses entry: nothing is started after it.
    if ctx.signal is not None and ctx.signal.is_set():
        raise ToolCancelledError(tool_id=tool_id)


def _assemble(tool: AnyToolDef, call: ToolCall, config: ToolNodeConfig) -> dict[str, Any]:
    model_set = sorted(set(call.args) & tool.config_only_params)
    if model_set:
        raise ToolArgsInvalidError(
            f"{', '.join(model_set)}: set by the node's configuration, not by the model",
            tool_id=tool.id,
            fields=model_set,
        )
    mapped_config_only = sorted(set(config.input_mapping) & tool.config_only_params)
    if mapped_config_only:
        raise ToolArgsInvalidError(
            f"{', '.join(mapped_config_only)}: a config-only parameter cannot come from input_mapping",
            tool_id=tool.id,
            fields=mapped_config_only,
        )
    effective = dict(call.args)
    effective.update(config.input_mapping)
    # Config-only values merge last: config wins.
    effective.update({k: v for k, v in config.values.items() if k in tool.config_only_params})
    return effective


def _check_taint(tool: AnyToolDef, effective: Mapping[str, Any], ctx: DispatchContext) -> None:
    keys = ctx.secret_arg_keys
    if keys is None:
        if ctx.node_config.input_mapping:
            raise ToolArgsInvalidError(
                "input_mapping supplies values but secret_arg_keys is absent (their provenance is unknown); "
                "pass secret_arg_keys, empty when no mapped value is secret",
                tool_id=tool.id,
            )
        return
    # Project dotted / indexed paths ("headers.Authorization", "items[0]") onto top-level keys.
    tainted = {key.split(".", 1)[0].split("[", 1)[0] for key in keys}
    hit = sorted((tainted & set(effective)) - tool.credential_params)
    if hit:
        raise ToolArgsInvalidError(
            f"{', '.join(hit)}: a secret-tainted value cannot reach this argument",
            tool_id=tool.id,
            fields=hit,
        )


def _check_output_mapping(tool: AnyToolDef, output_mapping: Mapping[str, str]) -> None:
    # Checked before the host call, so a bad mapping never follows a side effect.
    fields = tool.result_model.model_fields
    unknown = sorted(path for path in output_mapping if path.split(".", 1)[0] not in fields)
    if unknown:
        raise ToolArgsInvalidError(
            f"output_mapping names fields the result of {tool.id} lacks: {', '.join(unknown)}",
            tool_id=tool.id,
            fields=unknown,
        )


def _guardrails(tool: AnyToolDef, target: PolicyTarget | None, ctx: DispatchContext) -> None:
    policy = tool.policy
    if policy.spawns_process:
        if target is None or not target.command:
            # Fail closed: a process tool whose target names no command is never run.
            raise ToolPolicyError("command_not_allowed", tool_id=tool.id)
        if not target.command_fixed and not ctx.tool_policy.command_allowed(target.command):
            raise ToolPolicyError("command_not_allowed", tool_id=tool.id)
    if policy.egress == "http":
        url = target.url if target is not None else None
        host = https_host(url) if url else None
        if host is None:
            raise ToolPolicyError("insecure_url", tool_id=tool.id)
        if not domain_allowed(ctx.tool_policy, host):
            raise ToolPolicyError("domain_not_allowed", tool_id=tool.id)
    if policy.requires_gate_approval and not ctx.gate_approved:
        raise ToolPolicyError("gate_required", tool_id=tool.id)
    if policy.media:
        handle = target.media_handle if target is not None else None
        if not handle or (ctx.media_scope is not None and handle not in ctx.media_scope):
            # The scope-set denial: recoverable, the model may pick an in-scope handle.
            raise ToolPolicyError("media_scope_denied", tool_id=tool.id)


def _needs_approval(admitted: _Admitted, ctx: DispatchContext) -> bool:
    return ctx.approval is not None and (
        admitted.action is not None or admitted.admission is Admission.CARD
    )


def _preview_fields(admitted: _Admitted) -> ToolActionPreview:
    target = admitted.target or PolicyTarget()
    command = shlex.join([target.command, *target.args]) if target.command else None
    host = target.host
    if target.url:
        try:
            host = urlsplit(target.url).hostname or host
        except ValueError:
            host = None
        host = normalise_hostname(host) if host else None
    return ToolActionPreview(path=target.path, command=command, host=host)


def _approval_request(
    admitted: _Admitted, call: ToolCall, ctx: DispatchContext
) -> ToolApprovalRequest:
    raw = _preview_fields(admitted)
    scrubbed = ToolActionPreview(
        path=redact_secret_shaped_text(raw.path) if raw.path else None,
        command=redact_secret_shaped_text(raw.command) if raw.command else None,
        host=redact_secret_shaped_text(raw.host) if raw.host else None,
    )
    action: ToolActionClass = admitted.action or (
        "egress" if admitted.tool.source == "mcp" else "process"
    )
    # The unredacted preview carries the bare command (not the joined line) and
    # its argument vector: the protected-path and interpreter classification
    # read the one, an `always` grant is keyed on both.
    target = admitted.target or PolicyTarget()
    unredacted = ToolActionPreview(
        path=raw.path, command=target.command, host=raw.host, args=tuple(target.args)
    )
    return ToolApprovalRequest(
        tool_id=admitted.tool.id,
        tool_call_id=call.id,
        action=action,
        preview=scrubbed,
        session_id=ctx.session_id,
        fs_scope=ctx.fs_scope,
        contract_card=admitted.admission is Admission.CARD,
        unredacted_preview=unredacted,
    )


async def _guarded(work: Awaitable[T], signal: asyncio.Event | None, tool_id: str) -> T:
    """Await `work`, cancelling it when `signal` fires (ToolCancelledError).

    The caller's own cancellation is never swallowed: it cancels `work`,
    waits for it to finish (so a process tree is gone before we return) and
    propagates. A CancelledError out of `work` while the caller is not being
    cancelled (the host call itself was cancelled) is a ToolCancelledError.
    """
    task = asyncio.ensure_future(work)
    current = asyncio.current_task()
    waiter: asyncio.Future[Any] | None = (
        asyncio.ensure_future(signal.wait()) if signal is not None else None
    )
    try:
        waiting: set[asyncio.Future[Any]] = {task} if waiter is None else {task, waiter}
        await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
    except asyncio.CancelledError:
        await _cancel_and_wait(task)
        raise
    finally:
        if waiter is not None:
            waiter.cancel()
    if not task.done():
        # The signal fired first; the host call settles before we return.
        await _cancel_and_wait(task)
        raise ToolCancelledError(tool_id=tool_id, detail=_cancel_detail(task))
    if task.cancelled():
        if current is not None and current.cancelling():
            raise asyncio.CancelledError
        raise ToolCancelledError(tool_id=tool_id, detail="the host call was cancelled")
    return task.result()


def _cancel_detail(task: asyncio.Future[Any]) -> str:
    """What a cancelled host call said about its end (a host that could not
    confirm the process tree is gone says so in its CancelledError)."""
    try:
        task.result()
    except asyncio.CancelledError as error:
        if error.args and isinstance(error.args[0], str) and error.args[0]:
            return f"the call was cancelled, but {error.args[0]}"
    except Exception:  # retrieved; the cancel is what is reported
        pass
    return "the call was cancelled"


async def _cancel_and_wait(task: asyncio.Future[Any]) -> None:
    """Cancel `task` and wait until it has unwound (the RPC cancelled, the tree
    killed), even when the caller is cancelled meanwhile; that cancellation is
    re-raised once the work is gone, never dropped."""
    task.cancel()
    interrupted = False
    while not task.done():
        try:
            await asyncio.shield(asyncio.wait({task}))
        except asyncio.CancelledError:
            interrupted = True
    if not task.cancelled():
        task.exception()  # retrieved, so it is not reported as never retrieved
    if interrupted:
        raise asyncio.CancelledError


def _apply_output_mapping(
    tool: AnyToolDef, result: BaseModel, output_mapping: Mapping[str, str]
) -> dict[str, Untrusted[Any]]:
    """`output_mapping` over the FULL result: workflow state gets the real value, never the preview."""
    if not output_mapping:
        return {}
    full = result.model_dump(mode="json")
    updates: dict[str, Untrusted[Any]] = {}
    for path, state_key in output_mapping.items():
        value: Any = full
        for part in path.split("."):
            if isinstance(value, Mapping) and part in value:
                value = value[part]
            elif isinstance(value, list) and part.isdigit() and int(part) < len(value):
                value = value[int(part)]
            else:
                raise ToolExecutionError(
                    f"output_mapping path {path!r} is not in the result",
                    tool_id=tool.id,
                    recoverable=False,
                    retryable=False,
                )
        updates[state_key] = Untrusted(value)
    return updates
