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
   gate; then the contract's admission by effect; then the arms the tool
   needs;
6. per-tool approval of governed calls through the confirm hook
   (fail-closed);
7. the one host call, cancellable through `ctx.signal`;
8. `output_mapping` on the full result;
9. bound the model-facing result, spilling the full text to the output store;
10. mark it `Untrusted`.

`explain` runs steps 1-6 without prompting or calling the host and reports
every step's decision.
"""

from __future__ import annotations

import asyncio
import shlex
from collections.abc import Awaitable, Callable, Iterable, Mapping
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Literal, TypeVar, cast
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field

from hostcap.approval import (
    ToolActionPreview,
    ToolApprovalContext,
    ToolApprovalDecision,
    ToolApprovalRequest,
)
from hostcap.bounding import DEFAULT_TOOL_RESULT_LIMITS, ToolResultLimits, bound_text
from hostcap.contract import Admission, Contract, contract_admission
from hostcap.errors import (
    HostError,
    ToolArgsInvalidError,
    ToolCancelledError,
    ToolDeniedByUserError,
    ToolDispatchError,
    ToolExecutionError,
    ToolPolicyError,
    ToolRegistrationError,
    ToolUnavailableError,
    UnknownToolError,
    from_host_error,
)
from hostcap.host import MediaHandle, SpilledResult, ToolHost
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


@dataclass(frozen=True)
class ToolCall:
    """A tool call as the model (or a tool node) made it."""

    id: str
    name: str
    args: Mapping[str, Any] = field(default_factory=dict)
    provider_executed: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.id, str) or not self.id:
            raise TypeError("ToolCall.id must be a non-empty string")
        if not isinstance(self.name, str):
            raise TypeError("ToolCall.name must be a string")
        if not isinstance(self.args, Mapping):
            raise TypeError("ToolCall.args must be a mapping of argument names to values")
        if not all(isinstance(key, str) for key in self.args):
            raise TypeError("ToolCall.args keys must be strings")
        # A copy, so a caller mutating its dict later cannot change what was checked.
        object.__setattr__(self, "args", MappingProxyType(dict(self.args)))


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

    @property
    def contract(self) -> Contract | None:
        return self.approval.contract if self.approval is not None else None


@dataclass(frozen=True)
class ToolDispatchOutcome:
    """The result of a dispatch.

    `tool_result` is the bounded model-facing text, `Untrusted`; `result` the
    full structured result, also `Untrusted`; `state_updates` what
    `output_mapping` took from the full result (state key to value);
    `spilled` where the full text went when bounding cut it; `media` the
    handle of binary content a tool stored instead of returning inline.
    """

    tool_call_id: str
    tool_id: str
    tool_result: Untrusted[str]
    result: Untrusted[Any]
    state_updates: Mapping[str, Any]
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

    def __init__(self, tools: Iterable[AnyToolDef], host: ToolHost) -> None:
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
        given) and not denied by its contract (the same predicate dispatch uses)."""
        contract = ctx.contract if ctx is not None else None
        return tuple(
            tool
            for tool_id, tool in sorted(self._tools.items())
            if (ctx is None or tool_id in ctx.granted_tool_ids)
            and contract_admission(tool, contract) is not Admission.DENY
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
        """Run `call` through the pipeline; raises a ToolDispatchError subclass on every refusal or failure."""
        _refuse_if_cancelled(ctx, call.name)
        admitted = self._admit(call, ctx, [])
        await self._approve(admitted, call, ctx)
        result = await self._call_host(admitted, ctx)
        state_updates = _apply_output_mapping(admitted.tool, result, ctx.node_config.output_mapping)
        return await self._finish(admitted, call, ctx, result, state_updates)

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
            raise deny("resolve", UnknownToolError(call.name, self._tools))
        trace.append(StepDecision("resolve", "pass", tool.id))
        if tool.id not in ctx.granted_tool_ids:
            raise deny("grant", ToolPolicyError("not_granted", tool_id=tool.id))
        trace.append(StepDecision("grant", "pass"))

        # 3. Effective arguments.
        try:
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
        try:
            _guardrails(tool, target, ctx)
        except ToolDispatchError as error:
            raise deny("guardrails", error) from None
        trace.append(StepDecision("guardrails", "pass"))
        admission = contract_admission(tool, ctx.contract)
        if admission is Admission.DENY:
            raise deny("contract", ToolPolicyError("mode_denied", tool_id=tool.id))
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
        run_ctx = ToolRunContext(
            tool_id=tool.id,
            tool_call_id=call.id,
            node_id=ctx.node_id,
            session_id=ctx.session_id,
            fs_scope=ctx.fs_scope,
            labels=MappingProxyType(
                {"session": session, "node_id": ctx.node_id, "tool_call_id": call.id}
            ),
            invoke_agent=ctx.invoke_agent,
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
        if approval.confirm is None:
            raise ToolDeniedByUserError("no_approval_hook", tool_id=tool_id)
        request = _approval_request(admitted, call, ctx)
        try:
            decision = await _guarded(approval.confirm(request), ctx.signal, tool_id)
        except (ToolCancelledError, asyncio.CancelledError):
            raise
        except Exception as error:
            # Consent could not be obtained: fail closed, never the retryable tool_failed.
            raise ToolDeniedByUserError("approval_error", tool_id=tool_id) from error
        if not isinstance(decision, ToolApprovalDecision):
            raise ToolDeniedByUserError("approval_error", tool_id=tool_id)
        if decision.outcome == "approve":
            return
        if decision.outcome == "no_prompt":
            raise ToolDeniedByUserError("no_approval_hook", tool_id=tool_id, label=decision.label)
        raise ToolDeniedByUserError("user_rejected", tool_id=tool_id, label=decision.label)

    async def _call_host(self, admitted: _Admitted, ctx: DispatchContext) -> BaseModel:
        tool = admitted.tool
        _refuse_if_cancelled(ctx, tool.id)
        arm = min(tool.arms) if tool.arms else "host"
        try:
            result: BaseModel = await _guarded(
                tool.dispatch(admitted.args, self._host, admitted.run_ctx), ctx.signal, tool.id
            )
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
            )
        return cast(BaseModel, result)

    async def _finish(
        self,
        admitted: _Admitted,
        call: ToolCall,
        ctx: DispatchContext,
        result: BaseModel,
        state_updates: Mapping[str, Any],
    ) -> ToolDispatchOutcome:
        limits = ctx.limits or DEFAULT_TOOL_RESULT_LIMITS
        text = model_text(result)
        bounded = bound_text(text, limits, None)
        spilled: SpilledResult | None = None
        if bounded.truncated:
            store = self._host.output_store
            if store is not None:
                try:
                    spilled = await store.spill(text)
                except OutputStoreError:
                    spilled = None  # the marker then says the full text was not kept
            bounded = bound_text(text, limits, spilled.handle if spilled else None)
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


def create_tool_registry(*, tools: Iterable[AnyToolDef], host: ToolHost) -> ToolRegistry:
    """A registry of `tools` dispatching against `host`. No I/O, no ambient state."""
    return ToolRegistry(tools, host)


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
    # The unredacted preview carries the bare command (not the joined line): it is
    # what the protected-path and interpreter classification read.
    target = admitted.target or PolicyTarget()
    unredacted = ToolActionPreview(path=raw.path, command=target.command, host=raw.host)
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
) -> dict[str, Any]:
    """`output_mapping` over the FULL result: workflow state gets the real value, never the preview."""
    if not output_mapping:
        return {}
    full = result.model_dump(mode="json")
    updates: dict[str, Any] = {}
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
                )
        updates[state_key] = value
    return updates
