"""The root end of a front-end's channel: the calls it relays.

    bridge = Bridge(tenant, kind, audit, methods, on_lost, limit=..., in_flight=...)
    bridge.attach(sock)                  # reads the channel on the loop
    bridge.send(message, payload)        # to the front-end

A front-end relays each call its client made as one typed `Call`
(`hostcapd.bridge.messages`, validated by the kind's decoder). The Bridge
reads a call's payload only within the tenant's in-flight budget (past it
the call is refused QUOTA_EXCEEDED, its payload unread), runs the
service's method on the typed request (`Relayed`, bound to this channel's
tenant by `hostcapd.service`), and sends its typed answers back as `Reply`
or `Event` (each streamed event waits for the front-end's `Ack`), a
`Refusal` as an `Abort`. A spawn's output is passed on as it is read, in
`Chunk`s (`RelayedCall.pass_output`, each acknowledged too): the root side
keeps none of it (decision 0032). A message no correct front-end sends is a
violation: `policy.deny` naming the tenant, and the channel is closed (its
owner, `hostcapd.bridge.frontends.FrontendProcess`, restarts the process).
Nothing here touches protobuf or gRPC.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from hostcapd import callers, metrics
from hostcapd.audit import AuditLog, AuditUnavailable
from hostcapd.bridge import channel, messages
from hostcapd.errors import INTERNAL, TRANSPORT_REASONS, Refusal, shorten
from hostcapd.labels import MAX_REQUEST_ID, bounded_labels

log = logging.getLogger("hostcapd.bridge")

#: Calls in flight on one channel; more is a misbehaving front-end.
MAX_CALLS = 4096


# --- a relayed call as the daemon's services see it ----------------------------


@dataclass(frozen=True)
class RelayedCall:
    """What a service method gets beside its typed request."""

    #: The call's id on its channel.
    id: int
    #: The request's bytes field (stdin, a file's content); None when unset.
    payload: bytes | None = None
    #: Who made it, as its front-end says (`hostcapd.callers`); None: unknown.
    caller: messages.Caller | None = None
    #: Pass a read of a spawn's output to the front-end: (stream, bytes,
    #: the stream's budget); returns once the front-end has taken it.
    pass_output: Callable[[int, bytes, int], Awaitable[None]] | None = None
    #: Why its front-end ended it, once it has ("": the client went away, or
    #: not ended): the front-end's word, bounded (`_quoted`).
    ended_because: Callable[[], str] = lambda: ""


#: A service method: (request, call) to an answer, or to an async iterator
#: of streamed answers; it raises `Refusal` to refuse.
Behaviour = Callable[[Any, RelayedCall], Any]


@dataclass(frozen=True)
class Relayed:
    """A method the root side serves for a front-end."""

    behaviour: Behaviour
    streaming: bool
    #: "Service.Method"
    name: str

    @property
    def observed(self) -> tuple[str, str]:
        service, _, method = self.name.partition(".")
        return service, method


def relayed_methods(kind: str, services: Mapping[str, Any]) -> dict[str, Relayed]:
    """{"Service.Method": Relayed} for the services by service name; every
    method of the kind's services must be served."""
    table: dict[str, Relayed] = {}
    for name, request in messages.REQUESTS[kind].items():
        service, _, method = name.partition(".")
        table[name] = Relayed(getattr(services[service], method), request.streaming, name)
    return table


def abort_of(call: int, refusal: Refusal) -> messages.Abort:
    """The channel's form of a refusal: its status code, and its reason when
    the wire has it."""
    reason = refusal.reason if refusal.on_the_wire else ""
    return messages.Abort(call=call, code=refusal.code, message=refusal.message, reason=reason)


def call_result(error: BaseException | None) -> str:
    """How a call ended, for the metrics: OK, CANCELLED, the hostcap reason
    it was refused with, or its status code's name."""
    if error is None:
        return "OK"
    if isinstance(error, asyncio.CancelledError):
        return "CANCELLED"
    if isinstance(error, Refusal) and (error.on_the_wire or error.reason in TRANSPORT_REASONS):
        return error.reason
    return INTERNAL


@dataclass(eq=False)
class _CallState:
    task: asyncio.Task[None] | None = None
    acked: asyncio.Future[None] | None = None
    #: The payload bytes it holds of the tenant's in-flight budget.
    held: int = 0
    #: What its front-end's Cancel said, bounded.
    cancel_reason: str = ""


#: The most of a front-end's Cancel reason the root quotes.
MAX_CANCEL_REASON = 200


def _quoted(reason: str) -> str:
    """A front-end's reason as the root may repeat it: printable ASCII, cut."""
    return "".join(c if " " <= c <= "~" else "?" for c in reason[:MAX_CANCEL_REASON])


# --- the channel's root end ------------------------------------------------------


@dataclass(eq=False)
class Bridge:
    """The root end of one channel: it runs the calls relayed on it."""

    tenant: str
    kind: str
    audit: AuditLog
    methods: Mapping[str, Relayed]
    #: Called once when the channel is gone (EOF, broken, closed for a violation).
    on_lost: Callable[[], None]
    #: The largest message a call may be (its max_receive, and the header).
    limit: int = channel.MAX_PAYLOAD
    in_flight: channel.InFlight = field(
        default_factory=lambda: channel.InFlight(channel.MAX_PAYLOAD)
    )
    link: channel.Link | None = None
    ready: asyncio.Future[messages.Ready] | None = None
    calls: dict[int, _CallState] = field(default_factory=dict)
    #: Payload bytes admitted for a call not yet taken up by `_call`.
    _admitted: dict[int, int] = field(default_factory=dict)
    #: The loop its link runs on (asked once: a getpid on Python 3.11).
    _loop: asyncio.AbstractEventLoop | None = None

    def attach(self, sock: Any) -> None:
        self._loop = loop = asyncio.get_running_loop()
        self.ready = loop.create_future()
        self.link = channel.Link(
            sock,
            messages.FROM_FRONTEND[self.kind],
            self._on_message,
            self._on_error,
            self.lost,
            self.limit,
            self._admit,
        )

    def _admit(self, message: Any, size: int) -> bool:
        """Read a call's payload only within the tenant's in-flight budget
        (any other message's payload is never read)."""
        if not isinstance(message, (messages.Call, messages.AdminCall)):
            return False
        if message.call in self._admitted or not self.in_flight.reserve(size):
            return False
        self._admitted[message.call] = size
        return True

    def send(self, message: messages.Message, payload: channel.Payload = b"") -> None:
        if self.link is not None:
            self.link.send(message, payload)

    # --- receiving ------------------------------------------------------------

    def _on_message(self, message: Any, payload: bytes | None) -> None:
        if isinstance(message, (messages.Call, messages.AdminCall)):
            held = self._admitted.pop(message.call, 0)
            try:
                self._call(message, payload, held)
            except BaseException:
                self.in_flight.release(held)
                raise
        elif isinstance(message, messages.Ack):
            state = self.calls.get(message.call)
            if state is not None and state.acked is not None and not state.acked.done():
                state.acked.set_result(None)
        elif isinstance(message, messages.Cancel):
            state = self.calls.get(message.call)
            if state is not None and state.task is not None:
                state.cancel_reason = _quoted(message.reason)
                state.task.cancel()
        elif isinstance(message, messages.Ready):
            if self.ready is not None and not self.ready.done():
                self.ready.set_result(message)
        elif isinstance(message, messages.Malformed):
            relayed = self.methods.get(message.method)
            if relayed is None:
                self.violation(f"a malformed call of an unknown method {message.method!r}")
                return
            metrics.rpc_finished(self.tenant, *relayed.observed, "INVALID_ARGUMENT")

    def _call(
        self, message: messages.Call | messages.AdminCall, payload: bytes | None, held: int
    ) -> None:
        """Start serving a call; `held` bytes of the budget are its payload's
        (released when the call ends, or now if it does not start)."""
        started = False
        try:
            if message.call in self.calls:
                self.violation(f"call id {message.call} is already in flight")
                return
            if len(self.calls) >= MAX_CALLS:
                self.violation(f"more than {MAX_CALLS} calls in flight")
                return
            request = message.request
            if request.payload_field is None and payload:
                self.violation(f"{request.method} carries no payload, and one came")
                return
            relayed = self.methods[request.method]
            if payload is None:  # not read: past the tenant's budget
                self._refuse_unread(message.call, relayed, request, message.caller)
                return
            present = bool(getattr(request, "payload", False))
            state = _CallState(held=held)
            call = RelayedCall(
                message.call,
                payload if present else None,
                message.caller,
                functools.partial(self._pass_output, message.call, state),
                lambda: state.cancel_reason,
            )
            del payload  # the call holds it now, and gives its bytes back when it ends
            self.calls[message.call] = state
            serve = self._serve(call, relayed, request, state)
            state.task = (self._loop or asyncio.get_running_loop()).create_task(serve)
            started = True
        finally:
            if not started:
                self.in_flight.release(held)

    def _refuse_unread(
        self,
        call: int,
        relayed: Relayed,
        request: messages.Request,
        caller: messages.Caller | None,
    ) -> None:
        """Refuse a call whose payload would pass the tenant's in-flight
        budget (its payload was never read): QUOTA_EXCEEDED, audited."""
        budget = self.in_flight
        refusal = Refusal(
            "QUOTA_EXCEEDED",
            f"the daemon holds {budget.used} bytes of this tenant's calls in flight; this call "
            f"would pass its budget of {budget.budget} bytes: retry once they are answered",
        )
        labels = getattr(request, "labels", None) or {}
        try:
            self.audit.write(
                "policy.deny",
                tenant=self.tenant,
                method=relayed.name,
                reason=refusal.reason,
                message=refusal.message,
                labels=bounded_labels(labels),
                request_id=shorten(str(getattr(request, "request_id", "")), MAX_REQUEST_ID),
                **callers.caller_field(caller),
            )
        except AuditUnavailable as error:
            log.error("could not audit a refusal: %s", error)
        self.send(abort_of(call, refusal))
        if self.kind == "tenant":
            metrics.rpc_finished(self.tenant, *relayed.observed, refusal.reason)

    def _on_error(self, error: channel.ChannelError) -> None:
        self.violation(str(error))

    def violation(self, what: str) -> None:
        """The front-end sent what no correct front-end sends: deny, audit,
        and close the channel (the front-end is restarted)."""
        log.warning("%s: its front-end broke the channel protocol: %s", self._who, what)
        try:
            self.audit.write(
                "policy.deny",
                tenant=self.tenant,
                method="frontend.channel",
                reason="INVALID_ARGUMENT",
                message=f"the front-end sent a message the root side refuses: {what}",
                labels={},
                request_id="",
            )
        except AuditUnavailable as error:
            log.error("could not audit a front-end's violation: %s", error)
        self.lost()

    @property
    def _who(self) -> str:
        return "the admin socket" if self.kind == "admin" else f"tenant {self.tenant}"

    def lost(self) -> None:
        """The channel is gone (EOF, broken, closed for a violation, the
        process exited): its calls end, and the owner learns it once."""
        link, self.link = self.link, None
        if link is None:
            return
        link.close()
        # A payload admitted, then found unreadable (a violation), was never
        # a call: its bytes go back to the tenant's budget.
        for held in self._admitted.values():
            self.in_flight.release(held)
        self._admitted.clear()
        if self.ready is not None and not self.ready.done():
            self.ready.set_exception(ConnectionError("the front-end closed its channel"))
            self.ready.add_done_callback(_retrieve)
        self.on_lost()
        for state in list(self.calls.values()):
            if state.task is not None:
                state.task.cancel()

    # --- serving a call -------------------------------------------------------

    async def _pass_output(
        self, call: int, state: _CallState, stream: int, data: bytes, keep: int
    ) -> None:
        """A read of the call's spawn's output, to the front-end, gathered
        (never joined into another copy); returns once it is acknowledged."""
        state.acked = (self._loop or asyncio.get_running_loop()).create_future()
        self.send(messages.Chunk(call=call, stream=stream, keep=keep), data)
        await state.acked

    async def _serve(
        self, call: RelayedCall, relayed: Relayed, request: messages.Request, state: _CallState
    ) -> None:
        error: BaseException | None = None
        # This task's context (a copy made for it): what the call's records name.
        callers.CURRENT.set(call.caller)
        try:
            if relayed.streaming:
                # Closed on every way out: a cancel while it waits for an
                # ack must run its finally (which ends the spawn's tree)
                # now, not when the generator is collected.
                async with contextlib.aclosing(relayed.behaviour(request, call)) as stream:
                    async for item in stream:
                        state.acked = (self._loop or asyncio.get_running_loop()).create_future()
                        self.send(messages.Event(call=call.id, item=item))
                        await state.acked
                self.send(messages.End(call=call.id))
            else:
                answer = await relayed.behaviour(request, call)
                self.send(messages.Reply(call=call.id, answer=answer))
        except Refusal as refusal:
            error = refusal
            self.send(abort_of(call.id, refusal))
        except asyncio.CancelledError as cancelled:
            error = cancelled  # the client went away: nobody to answer
        except channel.ChannelError as failed:
            error = failed
            log.error("%s: a reply that cannot be framed: %s", self._who, failed)
            self.send(
                abort_of(call.id, _internal("the reply is too large for the front-end channel"))
            )
        except Exception as failed:
            error = failed
            log.exception("%s: %s failed inside the daemon", self._who, relayed.name)
            self.send(abort_of(call.id, _internal("internal error")))
        finally:
            self.calls.pop(call.id, None)
            self.in_flight.release(state.held)
            state.held = 0
            if self.kind == "tenant":
                with contextlib.suppress(Exception):
                    metrics.rpc_finished(self.tenant, *relayed.observed, call_result(error))
            # The error's traceback holds this frame (and the service's, with
            # the request): a reference cycle that would keep a refused
            # call's payload alive until the cyclic collector ran.
            error = None
            del request, call

    def close(self) -> None:
        """Close the channel quietly (the owner is stopping it)."""
        if self.link is not None:
            self.link.close()
            self.link = None


def _internal(message: str) -> Refusal:
    return Refusal(INTERNAL, message)


def _retrieve(future: asyncio.Future[Any]) -> None:
    if not future.cancelled():
        future.exception()
