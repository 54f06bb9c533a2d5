"""Steps 6-11 of the dispatch pipeline: from an admitted call to its outcome.

6. per-tool approval of a governed call through the confirm hook (fail
   closed), reported as `approval_requested` / `approval_answered`;
7. the engine's `before_dispatch` veto (synchronous, can only refuse);
8. the one host call, cancellable through `ctx.signal`, bounded by the
   `host_call_options` deadline;
9. `output_mapping` on the full result (each value `Untrusted`);
10. bound the model-facing result, spilling the full text to the output
    store (`spill(text, limits, signal)`);
11. mark it `Untrusted`.

Each step is a function of the admitted call; the registry runs them in
this order and emits the events they report through `emit`.
"""

from __future__ import annotations

import asyncio
import inspect
import shlex
from collections.abc import Awaitable, Callable, Mapping
from types import MappingProxyType
from typing import Any, cast
from urllib.parse import urlsplit

from pydantic import BaseModel

from hostcap.approval import ToolActionPreview, ToolApprovalDecision, ToolApprovalRequest
from hostcap.bounding import DEFAULT_TOOL_RESULT_LIMITS, NO_OUTPUT_STORE, bound_text
from hostcap.cancellation import guarded, refuse_if_cancelled, within_deadline
from hostcap.contract import Admission
from hostcap.dispatch_context import (
    Admitted,
    AnyToolDef,
    DispatchContext,
    ToolCall,
    ToolDispatchOutcome,
)
from hostcap.errors import (
    HostError,
    ToolCancelledError,
    ToolDeniedByUserError,
    ToolDispatchError,
    ToolDispatchVetoedError,
    ToolExecutionError,
    ToolUnavailableError,
    from_host_error,
)
from hostcap.events import EventKind, ToolEvent, clip, summarize_input
from hostcap.host import MediaHandle, SpilledResult, ToolHost
from hostcap.output_store import OutputStoreError
from hostcap.plan_safe import PlanSafeHost
from hostcap.policy import PolicyTarget, ToolActionClass, normalise_hostname
from hostcap.redaction import redact_secret_shaped_text
from hostcap.untrusted import Untrusted

#: Where a step's events go (the registry's and the context's callbacks).
Emit = Callable[[ToolEvent], Awaitable[None]]
#: Longest veto reason kept on the error and the event.
VETO_LABEL_CHARS = 200


#: Host refusals of a path that a card cannot change: the scope pre-check
#: refuses with them before anyone is asked.
PRECHECK_DENIALS = frozenset({"PATH_ESCAPES_ROOT", "SYMLINK_REFUSED", "SECRET_PATH"})


async def check_scope(admitted: Admitted, host: ToolHost, ctx: DispatchContext) -> None:
    """Before step 6, for a call that would take approval: the host checks
    its path (a write's file, a command's working directory) with a stat, so
    a human is never asked about a call the host refuses anyway (a path
    outside the roots, a secret, a refused symlink). The refusal is the one
    the host call would have raised; anything else (a file not there yet)
    is left to the host call."""
    target = admitted.target
    policy = admitted.tool.policy
    fs = getattr(host, "fs", None)
    if (
        not needs_approval(admitted, ctx)
        or target is None
        or not target.path
        or fs is None
        or not (policy.fs_scoped or policy.spawns_process)
    ):
        return
    tool = admitted.tool
    try:
        await guarded(fs.stat(target.path), ctx.signal, tool.id)
    except HostError as error:
        if error.reason in PRECHECK_DENIALS:
            arm = "fs" if policy.fs_scoped else "process"
            raise from_host_error(
                error, tool_id=tool.id, arm=arm, idempotent_read=policy.idempotent_read
            ) from error


async def approve(admitted: Admitted, call: ToolCall, ctx: DispatchContext, emit: Emit) -> None:
    """Step 6: per-tool approval of a governed call through the confirm hook
    (fail closed), reported as `approval_requested` / `approval_answered`."""
    if not needs_approval(admitted, ctx):
        return
    approval = ctx.approval
    assert approval is not None
    tool_id = admitted.tool.id
    request = approval_request(admitted, call, ctx)
    event = request.to_event()
    preview = event.pop("preview")
    for key in ("tool_id", "tool_call_id", "session_id"):
        event.pop(key)
    await emit(
        dispatch_event("approval_requested", call, ctx, tool_id, detail=event,
               preview=Untrusted(MappingProxyType(preview))),
    )  # fmt: skip

    async def answered(outcome: str, label: str | None) -> None:
        await emit(
            dispatch_event("approval_answered", call, ctx, tool_id,
                   detail={"outcome": outcome, "label": label}),
        )  # fmt: skip

    if approval.confirm is None:
        await answered("no_approval_hook", None)
        raise ToolDeniedByUserError("no_approval_hook", tool_id=tool_id)
    try:
        decision = await guarded(approval.confirm(request), ctx.signal, tool_id)
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


def before_dispatch(admitted: Admitted, ctx: DispatchContext) -> None:
    """Step 7, the trusted admission hook: synchronous, after every other check. It
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


async def call_host(admitted: Admitted, host: ToolHost, ctx: DispatchContext) -> BaseModel:
    """Step 8: the one host call, cancellable through `ctx.signal`, bounded by
    the `host_call_options` deadline; a host failure mapped onto the taxonomy."""
    tool = admitted.tool
    refuse_if_cancelled(ctx, tool.id)
    arm = min(tool.arms) if tool.arms else "host"
    if tool.source == "plugin" and ctx.contract is not None:
        # The declared plan-safe actions, enforced where the effects happen.
        host = PlanSafeHost(host, tool.plan_safe_actions, tool.id)
    work = tool.dispatch(admitted.args, host, admitted.run_ctx)
    if admitted.run_ctx.deadline is not None:
        work = within_deadline(work, admitted.run_ctx.deadline)
    try:
        result: BaseModel = await guarded(work, ctx.signal, tool.id)
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


def apply_output_mapping(
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


async def finish(
    admitted: Admitted,
    host: ToolHost,
    call: ToolCall,
    ctx: DispatchContext,
    result: BaseModel,
    state_updates: Mapping[str, Untrusted[Any]],
) -> ToolDispatchOutcome:
    """Steps 10-11: bound the model-facing result (spilling the full text to
    the output store) and mark everything `Untrusted`."""
    limits = ctx.limits or DEFAULT_TOOL_RESULT_LIMITS
    text = model_text(result)
    bounded = bound_text(text, limits, None)
    spilled: SpilledResult | None = None
    if bounded.truncated:
        store = host.output_store
        not_kept = NO_OUTPUT_STORE
        if store is not None:
            refuse_if_cancelled(ctx, admitted.tool.id)
            try:
                spilled = await guarded(
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
        clean=bool(getattr(result, "clean", True)),
        untrusted_content=bool(getattr(result, "untrusted_content", True)) or bounded.truncated,
    )


def model_text(result: BaseModel) -> str:
    """The model-facing text of a result: its own rendering, else indented JSON."""
    render = getattr(result, "model_text", None)
    if callable(render):
        return str(render())
    return result.model_dump_json(indent=2)


def needs_approval(admitted: Admitted, ctx: DispatchContext) -> bool:
    return ctx.approval is not None and (
        admitted.action is not None or admitted.admission is Admission.CARD
    )


def preview_fields(admitted: Admitted) -> ToolActionPreview:
    target = admitted.target or PolicyTarget()
    command = shlex.join([target.command, *target.args]) if target.command else None
    host = target.host
    if target.url:
        try:
            host = urlsplit(target.url).hostname or host
        except ValueError:
            host = None
        host = normalise_hostname(host) if host else None
    return ToolActionPreview(
        path=target.path, command=command, host=host, tool=target.mcp_tool,
        code_input=target.code_input, session=target.session, input=target.input,
    )  # fmt: skip


#: Longest input a card shows of a write into a session (the rest is counted).
CARD_INPUT_CHARS = 2000


def shown_input(text: str) -> str:
    """What a card shows of written input: control characters made visible
    (a Ctrl-C is `\\x03`, a newline `\\n`), secret shapes redacted, clipped."""
    visible = text.encode("unicode_escape").decode("ascii")
    scrubbed = redact_secret_shaped_text(visible)
    if len(scrubbed) > CARD_INPUT_CHARS:
        return (
            f"{scrubbed[:CARD_INPUT_CHARS]}... ({len(scrubbed) - CARD_INPUT_CHARS} more characters)"
        )
    return scrubbed


def approval_request(
    admitted: Admitted, call: ToolCall, ctx: DispatchContext
) -> ToolApprovalRequest:
    raw = preview_fields(admitted)
    scrubbed = ToolActionPreview(
        path=redact_secret_shaped_text(raw.path) if raw.path else None,
        command=redact_secret_shaped_text(raw.command) if raw.command else None,
        host=redact_secret_shaped_text(raw.host) if raw.host else None,
        tool=redact_secret_shaped_text(raw.tool) if raw.tool else None,
        code_input=raw.code_input,
        session=raw.session,
        input=shown_input(raw.input) if raw.input is not None else None,
    )
    action: ToolActionClass = admitted.action or (
        "egress" if admitted.tool.source == "mcp" else "process"
    )
    # The unredacted preview carries the bare command (not the joined line) and
    # its argument vector: the protected-path and interpreter classification
    # read the one, an `always` grant is keyed on both.
    target = admitted.target or PolicyTarget()
    unredacted = ToolActionPreview(
        path=raw.path, command=target.command, host=raw.host, args=tuple(target.args),
        tool=raw.tool, code_input=raw.code_input, session=raw.session, input=raw.input,
        started_by=target.started_by,
    )  # fmt: skip
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


def dispatch_event(
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


def masked_keys(tool: AnyToolDef | None, ctx: DispatchContext) -> frozenset[str]:
    tainted = {k.split(".", 1)[0].split("[", 1)[0] for k in ctx.secret_arg_keys or ()}
    return frozenset(tainted) | (tool.credential_params if tool is not None else frozenset())


def input_summary(admitted: Admitted, call: ToolCall, ctx: DispatchContext) -> str:
    """The effective arguments, projected: credential and tainted keys masked."""
    args = admitted.args.model_dump(mode="json")
    return summarize_input(args, masked_keys(admitted.tool, ctx))


def error_event(
    error: ToolDispatchError,
    call: ToolCall,
    ctx: DispatchContext,
    admitted: Admitted | None,
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
        summary = input_summary(admitted, call, ctx)
    else:
        summary = summarize_input(call.args, masked_keys(None, ctx))
    # An unknown tool's name is the model's text: it is not the event's tool id.
    tool_id = admitted.tool.id if admitted is not None else error.tool_id
    return dispatch_event(kind, call, ctx, tool_id, detail=detail, tool_input_summary=summary)
