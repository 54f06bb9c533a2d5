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
   for a call that would take approval, the host checks its path first
   (`check_scope`: a stat), so nobody is asked about a call the host
   refuses anyway;
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

Steps 1-5 live in `hostcap.admit`, 6-11 in `hostcap.pipeline`, cancellation
and deadlines in `hostcap.cancellation`, the call and context types in
`hostcap.dispatch_context`. `explain` runs steps 1-6 without prompting or calling the host and reports
every step's decision.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable, Mapping
from typing import Any, Literal

from hostcap.admission import tool_admission
from hostcap.admit import admit
from hostcap.approval import ToolActionPreview
from hostcap.cancellation import cancel_wins, refuse_if_cancelled
from hostcap.discovery import TOOL_SEARCH, TOOL_SEARCH_ID, deferred_tools, schema_of
from hostcap.dispatch_context import (
    Admitted,
    AnyToolDef,
    BeforeDispatch,
    DispatchContext,
    DispatchExplanation,
    StepDecision,
    ToolCall,
    ToolDispatchOutcome,
    ToolNodeConfig,
)
from hostcap.errors import (
    ToolCancelledError,
    ToolDeniedByUserError,
    ToolDispatchError,
    ToolRegistrationError,
)
from hostcap.events import EventCallback, ToolEvent, deliver, summarize_output
from hostcap.host import ToolHost
from hostcap.ids import utf16_key, utf16_sorted
from hostcap.pipeline import (
    Emit,
    apply_output_mapping,
    approval_request,
    approve,
    before_dispatch,
    call_host,
    check_scope,
    dispatch_event,
    error_event,
    finish,
    input_summary,
    model_text,
    needs_approval,
)
from hostcap.policy import ToolPolicy
from hostcap.tooldef import ToolDef
from hostcap.untrusted import Untrusted

__all__ = [
    "BeforeDispatch",
    "DispatchContext",
    "DispatchExplanation",
    "StepDecision",
    "ToolCall",
    "ToolDispatchOutcome",
    "ToolNodeConfig",
    "ToolRegistry",
    "create_tool_registry",
    "model_text",
]


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
        # The registry's own search tool, unless the engine registered one by that name.
        self._search = None if TOOL_SEARCH_ID in self._tools else TOOL_SEARCH

    @property
    def host(self) -> ToolHost:
        return self._host

    @property
    def tool_ids(self) -> tuple[str, ...]:
        return tuple(utf16_sorted(self._tools))

    def get(self, tool_id: str) -> AnyToolDef | None:
        if tool_id == TOOL_SEARCH_ID and self._search is not None:
            return self._search
        return self._tools.get(tool_id)

    def deferred(self, ctx: DispatchContext | None) -> list[AnyToolDef]:
        """The granted MCP tools a contract mode keeps behind `tool_search`."""
        if self._search is None:
            return []
        return deferred_tools(self._tools.values(), ctx)

    def is_granted(self, tool_id: str, ctx: DispatchContext) -> bool:
        """Whether `ctx` grants `tool_id`: the node's grant, and `tool_search`
        while it stands in for deferred MCP tools."""
        if tool_id == TOOL_SEARCH_ID and self._search is not None:
            return bool(self.deferred(ctx))
        return tool_id in ctx.granted_tool_ids

    # ---------------------------------------------------------------- catalogue

    def catalogue(self, ctx: DispatchContext | None = None) -> tuple[AnyToolDef, ...]:
        """The tools to offer the model: granted to the node (when `ctx` is
        given) and not denied by its approval regime: its contract, or a
        read-only (`ask`) mode for a tool that could only be denied. The
        predicate is `hostcap.admission.tool_admission`, the one the
        dispatch guard uses. A tool needing egress is not offered by a host
        without it (hostcapd: a tenant not in network mode "proxy"): it
        could only fail."""
        approval = ctx.approval if ctx is not None else None
        deferred = {tool.id for tool in self.deferred(ctx)}
        no_egress = getattr(self._host, "egress", None) is None
        offered = [
            tool
            for tool_id, tool in self._tools.items()
            if (ctx is None or tool_id in ctx.granted_tool_ids)
            and tool_id not in deferred
            and not tool_admission(tool, approval).denied
            and not (no_egress and "egress" in tool.arms)
        ]
        if deferred and self._search is not None:
            offered.append(self._search)
        return tuple(sorted(offered, key=lambda tool: utf16_key(tool.id)))

    def description(self, tool: AnyToolDef, ctx: DispatchContext | None = None) -> str:
        """The description the model is shown for `tool` under `ctx`: a tool
        running a model-chosen program names the programs the node's
        allowlist admits, so the model does not learn them by failing."""
        policy = tool.policy
        if ctx is None or not policy.spawns_process or policy.fixed_command:
            return tool.description
        return f"{tool.description} {allowed_programs(ctx.tool_policy)}"

    def openai_tools(self, ctx: DispatchContext | None = None) -> list[dict[str, Any]]:
        """The catalogue in OpenAI's tool-calling shape."""
        return [
            {
                "type": "function",
                "function": {
                    "name": tool.id,
                    "description": self.description(tool, ctx),
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
                "description": self.description(tool, ctx),
                "input_schema": dict(tool.llm_visible_params),
            }
            for tool in self.catalogue(ctx)
        ]

    # ---------------------------------------------------------------- dispatch

    async def dispatch(self, call: ToolCall, ctx: DispatchContext) -> ToolDispatchOutcome:
        """Run `call` through the pipeline; raises a ToolDispatchError subclass
        on every refusal or failure. Emits its events (`hostcap.events`) to the
        registry's and the context's callbacks."""
        admitted: Admitted | None = None
        started = False
        began = time.monotonic()
        try:
            refuse_if_cancelled(ctx, call.name)
            admitted = self._admit(call, ctx, [])
            await check_scope(admitted, self._host, ctx)
            await approve(admitted, call, ctx, self._emitter(ctx))
            before_dispatch(admitted, ctx)
            refuse_if_cancelled(ctx, admitted.tool.id)
            await self._emit(
                ctx,
                dispatch_event("tool_call_started", call, ctx, admitted.tool.id,
                       detail={"arms": sorted(admitted.tool.arms)},
                       tool_input_summary=input_summary(admitted, call, ctx)),
            )  # fmt: skip
            started = True
            began = time.monotonic()
            result = await call_host(admitted, self._host, ctx)
            state_updates = apply_output_mapping(
                admitted.tool, result, ctx.node_config.output_mapping
            )
            outcome = await finish(admitted, self._host, call, ctx, result, state_updates)
        except ToolDispatchError as refused:
            # Cancel wins: an abort set by the time a step reported wins over its error.
            error = cancel_wins(refused, ctx.signal)
            await self._emit(ctx, error_event(error, call, ctx, admitted, started))
            if error is refused:
                raise
            raise error from refused
        except asyncio.CancelledError:
            # The caller's task was cancelled: the terminal event still goes
            # out (best effort, shielded), then the cancellation propagates.
            cancelled = ToolCancelledError(tool_id=admitted.tool.id if admitted else None)
            await asyncio.shield(
                self._emit(ctx, error_event(cancelled, call, ctx, admitted, started))
            )
            raise
        await self._emit(
            ctx,
            dispatch_event("tool_call_finished", call, ctx, outcome.tool_id,
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

    def _emitter(self, ctx: DispatchContext) -> Emit:
        async def emit(event: ToolEvent) -> None:
            await self._emit(ctx, event)

        return emit

    def _admit(self, call: ToolCall, ctx: DispatchContext, trace: list[StepDecision]) -> Admitted:
        tools: Mapping[str, AnyToolDef] = self._tools
        granted = ctx.granted_tool_ids
        if call.name == TOOL_SEARCH_ID and self._search is not None:
            tools = {**self._tools, TOOL_SEARCH_ID: self._search}
            if self.is_granted(TOOL_SEARCH_ID, ctx):
                granted = granted | {TOOL_SEARCH_ID}
        return admit(
            tools, self._host, call, ctx, trace,
            offered=lambda: [t.id for t in self.catalogue(ctx)],
            granted=granted,
            discoverable=lambda: tuple(schema_of(t) for t in self.deferred(ctx)),
        )  # fmt: skip

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
        if not needs_approval(admitted, ctx):
            trace.append(
                StepDecision("approval", "skip", "not a governed call under an approval regime")
            )
        else:
            assert approval is not None
            request = approval_request(admitted, call, ctx)
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


#: How many allowed programs a description names before "and N more".
LISTED_PROGRAMS = 24


def allowed_programs(policy: ToolPolicy) -> str:
    """The allowlist, as a sentence of a tool description (bounded)."""
    names = utf16_sorted(policy.allowed_commands)
    globs = list(policy.allowed_command_globs)
    if not names and not globs:
        return "No program is allowed here: every call is refused."
    shown = names[:LISTED_PROGRAMS]
    text = "Allowed programs: " + ", ".join(shown) if shown else "Allowed programs: none by name"
    if len(names) > len(shown):
        text += f", and {len(names) - len(shown)} more"
    if globs:
        text += "; also any program matching " + ", ".join(globs[:LISTED_PROGRAMS])
        if len(globs) > LISTED_PROGRAMS:
            text += f" and {len(globs) - LISTED_PROGRAMS} more patterns"
    return text + ". Any other program is refused."


def create_tool_registry(
    *, tools: Iterable[AnyToolDef], host: ToolHost, on_event: EventCallback | None = None
) -> ToolRegistry:
    """A registry of `tools` dispatching against `host`, reporting every
    dispatch's events to `on_event`. No I/O, no ambient state."""
    return ToolRegistry(tools, host, on_event=on_event)
