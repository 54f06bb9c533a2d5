"""The daemon's handle on a front-end process: the process, the channel to
it, and the calls it relays.

    frontend = FrontendProcess(endpoint, audit, methods, on_lost)
    temp = await frontend.start()        # bound, confined, listening under `temp`
    ...                                  # the daemon renames `temp` into place
    await frontend.stop(grace)           # as grpc.aio.Server.stop

A front-end runs as an unprivileged user (`frontend_identity`), parses
every byte its clients send, and relays each call as one typed `Call`. The
root side validates it (`hostcapd.bridge.messages`) and runs the service's
method on the typed request, bound to this channel's tenant
(`hostcapd.service`): its typed answers go back as `Reply` or `Event`, a
`Refusal` as an `Abort` (status code, reason, message). Nothing here
touches protobuf or gRPC. Every
privilege (identity, roots, landlock, seccomp, namespaces, environment,
executable, cwd, ceilings) comes from the root side's config for that
tenant, and the exec record is written here before the exec. A datagram
that is not a valid message is a `policy.deny` naming the tenant, and the
channel is closed: the front-end is restarted (with back-off) and the
tenant's running spawns end DAEMON_SHUTDOWN, their trees gone. The admin
socket has a front-end of its own, whose channel carries only the admin
operations (docs/decisions/0027-the-privilege-split.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import os
import pwd
import shutil
import signal
import stat
import subprocess
import sys
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Literal

import msgspec

from hostcapd import metrics
from hostcapd.audit import AuditLog, AuditUnavailable
from hostcapd.bridge import channel, messages
from hostcapd.config import Tenant
from hostcapd.errors import INTERNAL, TRANSPORT_REASONS, Refusal, shorten
from hostcapd.labels import MAX_REQUEST_ID, bounded_labels
from hostcapd.logsetup import fields, relay_stderr
from hostcapd.service.sockets import StartupError

log = logging.getLogger("hostcapd.bridge")

#: The dedicated user of the front-ends (systemd/sysusers.d); `nobody` when
#: it does not exist (a --dev run on a machine without the package).
FRONTEND_USER = "hostcap-frontend"
START_TIMEOUT_S = 30.0
#: Restart back-off after a front-end died: doubling from the first to the last.
RESTART_BACKOFF_S = (0.1, 10.0)
#: A front-end that served this long before dying restarts at the first back-off.
STABLE_S = 30.0
#: Calls in flight on one channel; more is a misbehaving front-end.
MAX_CALLS = 4096
#: Room in a call's message for all but its request (the channel's header
#: is MessagePack of the values the request's protobuf held).
HEADER_ROOM = 1024 * 1024
#: A tenant's budget of request bytes the root side holds for its calls in
#: flight, in its largest requests: a call past it is refused QUOTA_EXCEEDED,
#: its payload unread.
IN_FLIGHT_REQUESTS = 4
#: The socket file's name in a front-end's bind directory.
BIND_NAME = "s"
#: The name the admin socket's front-end goes by (in logs and policy.deny):
#: no tenant can be so named.
ADMIN = "(admin)"
_bind_dirs = itertools.count(1)


def frontend_identity() -> tuple[int, int]:
    """(uid, gid) the front-ends run as: the dedicated user, else nobody;
    the daemon's own when it is not root (it cannot be anyone else)."""
    if os.geteuid() != 0:
        return os.getuid(), os.getgid()
    for name in (FRONTEND_USER, "nobody"):
        try:
            entry = pwd.getpwnam(name)
        except KeyError:
            continue
        if entry.pw_uid != 0 and entry.pw_gid != 0:
            return entry.pw_uid, entry.pw_gid
    raise StartupError(
        f"no user to run the front-ends as: create {FRONTEND_USER} "
        "(systemd/sysusers.d/hostcap.conf) or nobody"
    )


@dataclass(frozen=True)
class Endpoint:
    """A socket a front-end serves: of which kind, for whom, and its file."""

    kind: Literal["tenant", "admin"]
    #: The tenant's name; ADMIN for the admin socket.
    name: str
    socket: Path
    uid: int
    gid: int
    mode: int
    max_receive: int
    max_send: int

    @classmethod
    def of_tenant(cls, tenant: Tenant, max_receive: int, max_send: int) -> Endpoint:
        return cls(
            "tenant",
            tenant.name,
            tenant.socket,
            tenant.socket_uid,
            tenant.socket_gid,
            tenant.socket_mode,
            max_receive,
            max_send,
        )


# --- a relayed call as the daemon's services see it ----------------------------


@dataclass(frozen=True)
class RelayedCall:
    """What a service method gets beside its typed request."""

    #: The call's id on its channel.
    id: int
    #: The request's bytes field (stdin, a file's content); None when unset.
    payload: bytes | None = None


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

    def attach(self, sock: Any) -> None:
        self.ready = asyncio.get_running_loop().create_future()
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
                self._refuse_unread(message.call, relayed, request)
                return
            present = bool(getattr(request, "payload", False))
            call = RelayedCall(message.call, payload if present else None)
            del payload  # the call holds it now, and gives its bytes back when it ends
            state = _CallState(held=held)
            self.calls[message.call] = state
            state.task = asyncio.ensure_future(self._serve(call, relayed, request, state))
            started = True
        finally:
            if not started:
                self.in_flight.release(held)

    def _refuse_unread(self, call: int, relayed: Relayed, request: messages.Request) -> None:
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

    async def _serve(
        self, call: RelayedCall, relayed: Relayed, request: messages.Request, state: _CallState
    ) -> None:
        error: BaseException | None = None
        try:
            if relayed.streaming:
                # Closed on every way out: a cancel while it waits for an
                # ack must run its finally (which ends the spawn's tree)
                # now, not when the generator is collected.
                async with contextlib.aclosing(relayed.behaviour(request, call)) as stream:
                    async for item in stream:
                        state.acked = asyncio.get_running_loop().create_future()
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


# --- the process ---------------------------------------------------------------


class FrontendProcess:
    """One front-end process, supervised: what the daemon holds as that
    socket's server (stop / enter_graceful_shutdown as grpc.aio's).

    With `in_process`, the same front-end code (`hostcapd.frontend.server`)
    runs as a task on this loop instead, over the same channel, unconfined
    (`frontend_processes = false`; the benchmark's in-process row and the fs
    tests' in-process endpoint). Only then does this process load gRPC."""

    #: The program, given its channel's fd number. A test replaces it (and
    #: `stdout`) with a hostile front-end that takes the same first steps.
    command: ClassVar[list[str]] = [sys.executable, "-I", "-m", "hostcapd.frontend"]
    stdout: ClassVar[int | None] = None

    def __init__(
        self,
        endpoint: Endpoint,
        audit: AuditLog,
        methods: Mapping[str, Relayed],
        on_lost: Callable[[], None],
        *,
        in_process: bool = False,
    ) -> None:
        self.endpoint = endpoint
        self.in_process = in_process
        self.identity = (os.getuid(), os.getgid()) if in_process else frontend_identity()
        limit = endpoint.max_receive + HEADER_ROOM
        self.bridge = Bridge(
            endpoint.name,
            endpoint.kind,
            audit,
            methods,
            self._lost,
            limit=limit,
            in_flight=channel.InFlight(IN_FLIGHT_REQUESTS * limit),
        )
        self._on_lost = on_lost
        self.proc: subprocess.Popen[bytes] | None = None
        self.bind_dir: Path | None = None
        self.starts = 0
        #: What the front-end said it applied, for HostService.Capabilities
        #: (reported, never relied on).
        self.protections: tuple[messages.Protection, ...] = ()
        self._started_at = 0.0
        self._backoff = RESTART_BACKOFF_S[0]
        self._stopping = False
        self._exited: asyncio.Future[int] | None = None
        self._restart: asyncio.Task[None] | None = None
        self._task: asyncio.Task[int] | None = None
        #: Called with the new socket's temporary path after a restart: the
        #: owner puts it in place.
        self.on_restarted: Callable[[Path], Awaitable[None]] | None = None
        #: Why each health service is not serving ("" for all of them; a
        #: reason of "": it is); told again to a restarted front-end.
        self.serving_reasons: dict[str, str] = {}
        #: Makes the started process its tenant's cost (its cgroups, its
        #: oom_score_adj: TenantProfile.place_daemon_side); raises OSError.
        self.place: Callable[[int], None] | None = None

    @property
    def pid(self) -> int:
        if self.in_process:
            return os.getpid()
        return self.proc.pid if self.proc is not None else 0

    async def start(self) -> Path:
        """Start the process and wait until it is confined and listening;
        the bound socket's path (in a directory of its own, beside the
        socket's path). Raises StartupError saying why it did not start."""
        endpoint = self.endpoint
        uid, gid = self.identity
        parent = endpoint.socket.parent
        parent.mkdir(parents=True, exist_ok=True)
        bind_dir = parent / f".{endpoint.socket.name}.fe.{os.getpid()}.{next(_bind_dirs)}"
        as_root = os.geteuid() == 0
        ours, theirs = channel.socketpair()
        try:
            # Root's, the front-end's group may write: the front-end binds in
            # it, and root renames the socket out without CAP_DAC_OVERRIDE
            # (the unit has none).
            bind_dir.mkdir(mode=0o700)
            self.bind_dir = bind_dir
            if as_root:
                os.chown(bind_dir, -1, gid)
                os.chmod(bind_dir, 0o770)
            self.bridge.attach(ours)
            hello = messages.Hello(
                kind=endpoint.kind,
                tenant=endpoint.name,
                bind_path=BIND_NAME,
                socket_mode=endpoint.mode,
                max_receive=endpoint.max_receive,
                max_send=endpoint.max_send,
                parent_pid=os.getpid(),
                uid=uid,
                gid=gid,
            )
            if self.in_process:
                self._start_here(theirs, hello, bind_dir)
            else:
                self._start_process(theirs, hello, bind_dir)
            assert self.bridge.ready is not None
            try:
                ready = await asyncio.wait_for(asyncio.shield(self.bridge.ready), START_TIMEOUT_S)
            except (ConnectionError, TimeoutError):
                raise StartupError(
                    f"the front-end of {self.bridge._who} did not start: {await self._why()}"
                ) from None
            self.protections = tuple(ready.protections)
            for service, reason in self.serving_reasons.items():
                self.bridge.send(messages.Serving(reason=reason, service=service))
            path = bind_dir / BIND_NAME
            # The front-end made it with the mode (its umask); root gives it
            # its owner, and checks.
            if as_root:
                os.chown(path, endpoint.uid, endpoint.gid)
            if stat.S_IMODE(path.lstat().st_mode) != endpoint.mode:
                os.chmod(path, endpoint.mode)
            self._started_at = asyncio.get_running_loop().time()
            return path
        except BaseException:
            if self._task is None:
                theirs.close()  # else the in-process front-end's, closed as it ends
            await self._kill()
            self.remove_bind_dir()
            raise

    def _start_process(self, theirs: Any, hello: messages.Hello, bind_dir: Path) -> None:
        self.proc = subprocess.Popen(
            [*self.command, str(theirs.fileno())],
            pass_fds=(theirs.fileno(),),
            stdin=subprocess.DEVNULL,
            stdout=self.stdout,
            # What it prints (an error before it serves, a crash's
            # traceback) becomes the daemon's log records (`relay_stderr`).
            stderr=subprocess.PIPE,
            # It starts as root, as the fs worker does: the interpreter
            # may live where the front-end user cannot read (a pyenv
            # under /root); it imports all it needs, then takes its
            # identity (Hello.uid/gid) before it reads a client's byte.
            # It binds a name relative to this directory.
            cwd=bind_dir,
            env={"LC_ALL": "C.UTF-8"},
        )
        theirs.close()
        if self.place is not None:
            try:
                self.place(self.proc.pid)
            except OSError as error:
                raise StartupError(
                    f"the front-end of {self.bridge._who} cannot be placed in its "
                    f"tenant's cgroups: {error.strerror}: {error.filename}"
                ) from None
        self.starts += 1
        self._exited = _watch_exit(self.proc)
        assert self.proc.stderr is not None
        relay_stderr(
            self.proc.stderr,
            log,
            f"{self.bridge._who}: its front-end says: ",
            fields(tenant="" if hello.tenant == ADMIN else hello.tenant),
        )
        self._exited.add_done_callback(self._on_exit)
        self.bridge.send(hello)

    def _start_here(self, theirs: Any, hello: messages.Hello, bind_dir: Path) -> None:
        # Imported here: the daemon loads gRPC only when a socket is served in-process.
        from hostcapd.frontend import server

        here = msgspec.structs.replace(hello, bind_path=str(bind_dir / BIND_NAME))
        self.starts += 1
        self._task = asyncio.ensure_future(server.serve(theirs, here, []))
        exited: asyncio.Future[int] = asyncio.get_running_loop().create_future()

        def done(task: asyncio.Task[int]) -> None:
            if not exited.done():
                failed = task.cancelled() or task.exception() is not None
                exited.set_result(-1 if failed else task.result())

        self._task.add_done_callback(done)
        self._exited = exited
        self._exited.add_done_callback(self._on_exit)

    async def _why(self) -> str:
        """Why a starting front-end went away (its exit status)."""
        if self._exited is None:
            return "it was not started"
        with contextlib.suppress(TimeoutError):
            code = await asyncio.wait_for(asyncio.shield(self._exited), 2.0)
            return f"it exited with status {code} (its stderr says why)"
        return "it did not answer in time"

    def remove_bind_dir(self) -> None:
        """Once the socket was renamed into place (or never bound)."""
        if self.bind_dir is not None:
            shutil.rmtree(self.bind_dir, ignore_errors=True)
            self.bind_dir = None

    # --- the server's interface ---------------------------------------------

    async def enter_graceful_shutdown(self) -> None:
        self.bridge.send(messages.Drain(health_only=True))

    async def report(self, reason: str, service: str = "") -> None:
        """Health: NOT_SERVING saying why, or SERVING (""); of every service
        (a tenant's front-end), or of the one named."""
        reason = reason[:1024]
        self.serving_reasons[service] = reason
        self.bridge.send(messages.Serving(reason=reason, service=service))

    async def stop(self, grace: float | None) -> None:
        """Stop taking calls; calls in flight get `grace` seconds (a later,
        shorter grace takes precedence); returns once the process is gone."""
        self._stopping = True
        if self._restart is not None:
            self._restart.cancel()
        if self._exited is None:
            return
        if grace is None:
            await self._kill()
            return
        self.bridge.send(messages.Drain(grace=grace))
        try:
            await asyncio.wait_for(asyncio.shield(self._exited), grace + 5.0)
        except TimeoutError:
            await self._kill()
        self.bridge.close()

    def _end(self) -> None:
        """Kill the process (or cancel the in-process front-end)."""
        if self._task is not None and not self._task.done():
            self._task.cancel()
        if self.proc is not None and self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.send_signal(signal.SIGKILL)

    async def _kill(self) -> None:
        self._end()
        if self._exited is not None:
            with contextlib.suppress(Exception):
                await asyncio.shield(self._exited)
        self.bridge.close()

    # --- dying and restarting --------------------------------------------------

    def _lost(self) -> None:
        """The channel is gone: the calls end, and the tenant's spawns end
        (unless the daemon is stopping it, which ends them its own way)."""
        if not self._stopping:
            self._on_lost()
        self._end()

    def _on_exit(self, exited: asyncio.Future[int]) -> None:
        if exited.cancelled():
            return
        self.bridge.lost()
        if self._stopping or self.on_restarted is None or self._started_at == 0.0:
            return
        loop = asyncio.get_running_loop()
        if loop.time() - self._started_at > STABLE_S:
            self._backoff = RESTART_BACKOFF_S[0]
        log.warning(
            "%s: its front-end (pid %d) exited with status %s; restarting in %.1f s",
            self.bridge._who,
            self.pid,
            exited.result(),
            self._backoff,
        )
        self._restart = asyncio.ensure_future(self._restart_after(self._backoff))
        self._backoff = min(self._backoff * 2, RESTART_BACKOFF_S[1])

    async def _restart_after(self, delay: float) -> None:
        await asyncio.sleep(delay)
        if self._stopping:
            return
        self._started_at = 0.0
        try:
            path = await self.start()
        except (StartupError, OSError) as error:
            log.error("%s: its front-end could not be restarted: %s", self.bridge._who, error)
            self._started_at = 1.0  # a failed start is retried like a death
            self._on_exit(_done(-1))
            return
        assert self.on_restarted is not None
        await self.on_restarted(path)


def _done(value: int) -> asyncio.Future[int]:
    future: asyncio.Future[int] = asyncio.get_running_loop().create_future()
    future.set_result(value)
    return future


def _watch_exit(proc: subprocess.Popen[bytes]) -> asyncio.Future[int]:
    """A future of the process's exit status, from its pidfd on the loop."""
    loop = asyncio.get_running_loop()
    exited: asyncio.Future[int] = loop.create_future()
    pidfd = os.pidfd_open(proc.pid)

    def readable() -> None:
        loop.remove_reader(pidfd)
        os.close(pidfd)
        code = proc.wait()
        if not exited.done():
            exited.set_result(code)

    loop.add_reader(pidfd, readable)
    return exited
