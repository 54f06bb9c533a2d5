"""Steps 1-5 of the dispatch pipeline: from a tool call to an admitted one.

In the seeds' order, security order: a provider-executed call is refused
before resolution; the name resolves by exact id, then the node's grant is
checked; the effective arguments are assembled (model arguments, then
`input_mapping`, then config-only values, config winning) before anything
looks at them; secret taint, then validation of the complete set; then the
guardrails on the effective arguments, the contract's admission (the
predicate the catalogue shares) and the arms the tool needs. Nothing here
prompts, awaits or touches the host.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping
from collections.abc import Set as AbstractSet
from types import MappingProxyType
from typing import Any, cast

from hostcap.admission import READ_ONLY_LABEL, Offer, tool_admission
from hostcap.contract import Admission
from hostcap.discovery import TOOL_SEARCH_ID
from hostcap.dispatch_context import (
    Admitted,
    AnyToolDef,
    DispatchContext,
    StepDecision,
    StepName,
    ToolCall,
    ToolNodeConfig,
)
from hostcap.errors import (
    ToolArgsInvalidError,
    ToolDeniedByUserError,
    ToolDispatchError,
    ToolPolicyError,
    ToolUnavailableError,
    UnknownToolError,
)
from hostcap.host import ToolHost
from hostcap.ids import utf16_sorted
from hostcap.policy import PolicyTarget, domain_allowed, governed_action, https_host
from hostcap.streaming import bounded_output
from hostcap.tooldef import ToolRunContext


def admit(
    tools: Mapping[str, AnyToolDef],
    host: ToolHost,
    call: ToolCall,
    ctx: DispatchContext,
    trace: list[StepDecision],
    offered: Callable[[], Iterable[str]],
    granted: AbstractSet[str],
    discoverable: Callable[[], tuple[Mapping[str, Any], ...]],
) -> Admitted:
    """Steps 1-5 for `call`, each decision appended to `trace`: the admitted
    call, or the ToolDispatchError the first refusing step raises.
    `offered` lists the ids an unknown tool's error names; `granted` is the
    node's grant (with `tool_search` when MCP tools are deferred behind it),
    `discoverable` the schemas that search returns."""

    def deny(step: StepName, error: ToolDispatchError) -> ToolDispatchError:
        trace.append(StepDecision(step, "deny", error.message))
        return error

    # 1. A provider-executed call is never dispatched, whatever it names.
    if call.provider_executed:
        raise deny("provider_executed", ToolPolicyError("provider_executed", tool_id=None))
    trace.append(StepDecision("provider_executed", "pass"))

    # 2. Exact-id resolution, then the node's grant.
    tool = tools.get(call.name)
    if tool is None:
        # Only what this node is offered: the model never learns of tools it cannot call.
        raise deny("resolve", UnknownToolError(call.name, offered()))
    trace.append(StepDecision("resolve", "pass", tool.id))
    if tool.id not in granted:
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
        StepDecision("assemble", "pass", f"keys: {', '.join(utf16_sorted(effective)) or '(none)'}")
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
    target = tool.target(args, host)
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
    if ctx.contract is not None and runs_written_code(target):
        # A write into a shell or interpreter session runs arbitrary code: the
        # contract decides it per call (hostcap.approval: refused unless that
        # exact session was approved for it).
        admission = Admission.CARD
    trace.append(
        StepDecision(
            "contract",
            "card" if admission is Admission.CARD else "pass",
            str(ctx.contract or "none"),
        )
    )
    # Checked before approval: a human is never asked for a call that cannot run.
    for arm in sorted(tool.arms):
        present = ctx.invoke_agent if arm == "invoke_agent" else getattr(host, arm, None)
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
        on_output=bounded_output(ctx, call.id, tool.id),
        discoverable=discoverable() if tool.id == TOOL_SEARCH_ID else (),
    )
    return Admitted(tool, args, target, governed_action(tool.policy, target), admission, run_ctx)


def runs_written_code(target: PolicyTarget | None) -> bool:
    """A write into a session whose program runs what it is given (its
    target names the session and is not a fixed, data-reading program)."""
    return target is not None and target.session is not None and not target.command_fixed


def _assemble(tool: AnyToolDef, call: ToolCall, config: ToolNodeConfig) -> dict[str, Any]:
    model_set = utf16_sorted(set(call.args) & tool.config_only_params)
    if model_set:
        raise ToolArgsInvalidError(
            f"{', '.join(model_set)}: set by the node's configuration, not by the model",
            tool_id=tool.id,
            fields=model_set,
        )
    mapped_config_only = utf16_sorted(set(config.input_mapping) & tool.config_only_params)
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
    hit = utf16_sorted((tainted & set(effective)) - tool.credential_params)
    if hit:
        raise ToolArgsInvalidError(
            f"{', '.join(hit)}: a secret-tainted value cannot reach this argument",
            tool_id=tool.id,
            fields=hit,
        )


def _check_output_mapping(tool: AnyToolDef, output_mapping: Mapping[str, str]) -> None:
    # Checked before the host call, so a bad mapping never follows a side effect.
    fields = tool.result_model.model_fields
    unknown = utf16_sorted(path for path in output_mapping if path.split(".", 1)[0] not in fields)
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
            # The engine's list, checked first; the host's rules come after (both must allow).
            raise ToolPolicyError(
                "domain_not_allowed",
                tool_id=tool.id,
                detail="refused by the client's allowed_domains",
            )
    if policy.requires_gate_approval and not ctx.gate_approved:
        raise ToolPolicyError("gate_required", tool_id=tool.id)
    if policy.media:
        handle = target.media_handle if target is not None else None
        if not handle or (ctx.media_scope is not None and handle not in ctx.media_scope):
            # The scope-set denial: recoverable, the model may pick an in-scope handle.
            raise ToolPolicyError("media_scope_denied", tool_id=tool.id)
