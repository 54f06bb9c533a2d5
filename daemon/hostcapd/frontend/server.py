"""A tenant's front-end: the unprivileged process that serves its socket.

    python -I -m hostcapd.frontend FD

started by the root side (`hostcapd.bridge.frontends.FrontendProcess`) as a fresh
interpreter, already as the front-end user with no supplementary groups
and no capabilities, in a directory made for it beside the tenant's socket,
with one end of a socketpair as FD (its channel, bound to one tenant by
the root side when it made it). It reads the `Hello`, confines itself
(`hostcapd.frontend.confine`: before any thread exists, so every thread grpc
makes is confined too), binds the socket, says `Ready`, and serves:

- every request is parsed here (HTTP/2, protobuf: the untrusted bytes) and
  relayed as one typed `Call`; the daemon's typed answer (a reply, each
  streamed event, or a refusal's status) is converted back to the wire here
  (`hostcapd.frontend.convert`: the daemon's only protobuf and gRPC code);
- a spawn's output arrives as it was read (`Chunk`s): this process keeps
  each stream's head and tail (`StreamBuffer`, in the tenant's cgroup) and
  builds the Run's result from them, or streams the Spawn's head at once
  and its tail before the Exited; the root side only counts it (decision
  0032);
- a client that goes away sends `Cancel`; a streamed event the client's
  connection took sends `Ack`, as does a chunk kept here (the root side
  sends the next only then: the back-pressure of a single-process daemon,
  one event deep);
- health and reflection are answered here; `Serving` sets every
  service's health, or one named (NOT_SERVING with the root side's reason,
  which a Check reply carries in its trailing metadata, or SERVING
  again); `Drain` turns
  health to NOT_SERVING for good and stops the server with the root side's
  grace.

If the channel closes (the root side went away), the process exits; it
also has the parent-death signal.
"""

from __future__ import annotations

import asyncio
import collections
import ctypes
import importlib
import itertools
import os
import signal
import socket
import sys
import typing
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from typing import Any, NoReturn

import grpc
import msgspec
from google.protobuf import message as protobuf_message
from google.protobuf.message_factory import GetMessageClass
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection
from hostcap_proto.errors import WireError
from hostcap_proto.v1 import admin_pb2, fs_pb2, host_pb2, process_pb2

from hostcapd.applied import Unavailable
from hostcapd.bridge import channel, messages
from hostcapd.errors import Refusal
from hostcapd.frontend import affinity, convert, reads
from hostcapd.frontend.confine import Confinement, confine, interpreter_paths
from hostcapd.frontend.options import HealthReporter, new_health, server_options
from hostcapd.frontend.peers import INNER_URI, Peers
from hostcapd.process.output import OUTPUT_CHUNK, StreamBuffer

#: Modules imported on first use that a front-end uses. Not
#: `encodings.idna` (0.23 MiB with the `stringprep` and `unicodedata` it
#: imports): only a host name's lookup uses it, and a front-end looks none
#: up (its sockets are unix ones; the egress proxy, which does, preloads it).
PRELOADED = (
    "encodings.ascii",
    "encodings.latin_1",
    "grpc.aio._server",
    "grpc_health.v1._async",
    "grpc_reflection.v1alpha._async",
)
MALFORMED = WireError("INVALID_ARGUMENT", "malformed request message")
#: A call whose request was at least this large gives the allocator's free
#: memory back to the kernel when it ends: grpc receives a request in many
#: small buffers, which glibc would otherwise keep, per thread arena.
TRIM_AFTER_BYTES = 4 * 1024 * 1024
_libc = ctypes.CDLL(None)


def _trim() -> None:
    _libc.malloc_trim(0)


#: glibc's mallopt parameters, and what a front-end sets them to: a stream's
#: 1 MiB chunks (each read from the channel, then its event's bytes) are
#: allocated from the heap and their freed space kept for the next, instead
#: of the heap's top being given back and faulted in again per chunk (its
#: free top is given back past 8 MiB, and by `_trim` after a large call).
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3
HEAP_KEPT = 8 * 1024 * 1024


def _keep_heap() -> None:
    _libc.mallopt(M_MMAP_THRESHOLD, HEAP_KEPT)
    _libc.mallopt(M_TRIM_THRESHOLD, HEAP_KEPT)


#: What each kind of front-end serves.
SERVICES: dict[str, tuple[tuple[Any, str], ...]] = {
    "tenant": ((process_pb2, "ProcessService"), (host_pb2, "HostService"), (fs_pb2, "FsService")),
    "admin": ((admin_pb2, "AdminService"),),
}


class _Inbox:
    """What the root side sent for a call, in order, and its one reader's
    wait: an asyncio.Queue without the bookkeeping no call uses (a call's
    hot path makes one). Its waits are made on the loop it was given:
    `asyncio.get_running_loop()` costs a getpid(2) on each call in
    CPython 3.11 (its check for a fork)."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._items: collections.deque[tuple[Any, bytes | None]] = collections.deque()
        self._waiter: asyncio.Future[None] | None = None

    def put_nowait(self, item: tuple[Any, bytes | None]) -> None:
        self._items.append(item)
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def get(self) -> tuple[Any, bytes | None]:
        while not self._items:
            self._waiter = self._loop.create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None
        return self._items.popleft()


class _Call:
    """A relayed call: what the root side sent for it, in order (each
    message with its payload: a chunk's bytes)."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.inbox = _Inbox(loop)
        self.finished = False
        #: Its spawn's output as kept here, by stream, and its bytes.
        self.kept: dict[int, StreamBuffer] = {}
        self.held = 0

    def pieces(self) -> dict[int, list[bytes | bytearray]]:
        return {stream: buf.parts() for stream, buf in self.kept.items()}


class Relay:
    """The front-end's end of the channel."""

    def __init__(self, sock: socket.socket, stopped: asyncio.Event, kind: str) -> None:
        self._call = messages.CALLS[kind]
        self.loop = asyncio.get_running_loop()
        self._ids = itertools.count(1)
        self.calls: dict[int, _Call] = {}
        #: Output kept here for all calls at once, and its budget (0: none).
        self.kept_bytes = 0
        self.output_budget = 0
        self.stopped = stopped
        self.drain: Callable[[messages.Drain], None] = lambda _: None
        self.serving: Callable[[messages.Serving], None] = lambda _: None
        # One datagram per wake-up: the root side's messages come one at a
        # time (bench/README.md, "The tenant front-end's per-call Python, fourth pass").
        self.link = channel.Link(
            sock,
            typing.cast(Any, convert.OwnedDecoder()),
            self._on_message,
            self._on_error,
            self._on_closed,
            reads=1,
        )

    def keep(
        self, call: _Call, chunk: messages.Chunk, data: bytes | None, retain_head: bool
    ) -> bytes | None:
        """Keep a chunk of a call's output; the part of it that is its
        stream's head, or None past the budget of output kept for all calls
        at once (the tenant's front-end memory; `past_budget` says it). No
        exception: its traceback would keep the chunk and the call's output
        alive in a reference cycle until the collector ran."""
        buf = call.kept.get(chunk.stream)
        if buf is None:
            buf = call.kept[chunk.stream] = StreamBuffer(chunk.keep, retain_head=retain_head)
        head = buf.feed(data or b"")
        held = sum(b.held for b in call.kept.values())
        self.kept_bytes += held - call.held
        call.held = held
        if self.output_budget and self.kept_bytes > self.output_budget:
            return None
        return head

    #: What the spawn's exit record says of a call ended past the budget.
    PAST_BUDGET = "its output passed the budget of output the front-end keeps at once"

    def past_budget(self) -> WireError:
        """The refusal of a call whose output would pass the budget."""
        return WireError(
            "QUOTA_EXCEEDED",
            f"this tenant's front-end keeps {self.kept_bytes} bytes of its calls' output at "
            f"once, past its budget of {self.output_budget} bytes: this call's output was not "
            "kept and its spawn was ended (run fewer at the output ceiling at once)",
        )

    def sent(self, size: int) -> None:
        """A reply counted against the budget was sent (or abandoned)."""
        self.kept_bytes -= size

    def let_go(self, call: _Call) -> None:
        """A call's kept output is dropped, or in its reply."""
        self.kept_bytes -= call.held
        call.held = 0
        call.kept.clear()

    def open(
        self, request: messages.Request, payload: bytes, caller: messages.Caller | None = None
    ) -> tuple[int, _Call]:
        call_id = next(self._ids)
        call = self.calls[call_id] = _Call(self.loop)
        self.link.send(self._call(call=call_id, request=request, caller=caller), payload)
        return call_id, call

    def done(self, call_id: int, reason: str = "") -> None:
        """The call is over here: a client gone before its end is a Cancel;
        `reason` says why when it is this front-end that ends it."""
        call = self.calls.pop(call_id, None)
        if call is not None and not call.finished:
            self.link.send(messages.Cancel(call=call_id, reason=reason))

    def _on_message(self, message: Any, payload: bytes | None) -> None:
        if isinstance(message, messages.Drain):
            self.drain(message)
            return
        if isinstance(message, messages.Serving):
            self.serving(message)
            return
        call = self.calls.get(getattr(message, "call", 0))
        if call is None:
            return  # answered after the client went away
        if not isinstance(message, (messages.Event, messages.Chunk)):
            call.finished = True
        call.inbox.put_nowait((message, payload))

    def _on_error(self, error: channel.ChannelError) -> None:
        print(f"hostcapd front-end: the root side sent a bad message: {error}", file=sys.stderr)
        self._on_closed()

    def _on_closed(self) -> None:
        self.link.close()
        gone = messages.Abort(call=1, code=grpc.StatusCode.UNAVAILABLE.value[0], message="")
        for call in self.calls.values():
            call.finished = True
            call.inbox.put_nowait((gone, None))
        self.stopped.set()


#: A call's caller, from its context (`Peers.caller_of`).
CallerOf = Callable[[Any], "messages.Caller | None"]


def _no_caller(context: Any) -> messages.Caller | None:
    return None


def _handler(
    relay: Relay,
    model: type[messages.Request],
    name: str,
    method: Any,
    caller_of: CallerOf,
    direct: reads.DirectReads | None = None,
) -> Any:
    request_type, streaming = GetMessageClass(method.input_type), method.server_streaming

    async def parse(raw: bytes, context: Any) -> tuple[messages.Request, bytes]:
        try:
            return convert.request_of(model, request_type.FromString(raw))
        except (protobuf_message.DecodeError, msgspec.ValidationError, ValueError):
            await malformed(context)

    async def malformed(context: Any) -> NoReturn:
        relay.link.send(messages.Malformed(method=name))
        await context.abort_with_status(MALFORMED.to_status())
        raise AssertionError("abort_with_status returned")

    # A call's request, its bytes and its payload are dropped as soon as
    # they are sent on: a refusal's exception (its traceback holds this
    # frame) must not keep them alive until the cyclic collector runs.
    async def unary(raw: bytes, context: Any) -> Any:
        large = len(raw) >= TRIM_AFTER_BYTES
        parsed = [await parse(raw, context)]
        del raw
        return await relayed(parsed, context, large)

    async def relayed(
        parsed: list[tuple[messages.Request, bytes]], context: Any, large: bool = False
    ) -> Any:
        """Relay a parsed call (its request taken out of `parsed`)."""
        request, payload = parsed.pop()
        call_id, call = relay.open(request, payload, caller_of(context))
        del request, payload
        past: WireError | None = None
        try:
            while True:
                message, data = await call.inbox.get()
                if not isinstance(message, messages.Chunk):
                    break
                if relay.keep(call, message, data, retain_head=True) is None:
                    past = relay.past_budget()  # relay.done cancels it: its spawn ends
                    break
                relay.link.send(messages.Ack(call=call_id))
                del data
        finally:
            relay.done(call_id, relay.PAST_BUDGET if past is not None else "")
        large = large or call.held >= TRIM_AFTER_BYTES
        if past is not None or isinstance(message, messages.Abort):
            relay.let_go(call)
            if large:
                _trim()
            if past is not None:
                await context.abort_with_status(past.to_status())
                raise AssertionError("abort_with_status returned")
            assert isinstance(message, messages.Abort)
            await convert.abort(context, message)
        try:
            reply = convert.unary_reply(message.answer, call.pieces() if call.kept else None)
        except msgspec.ValidationError as error:
            # A Run's stable fields are decoded here, when first seen: a bad
            # one ends the channel, as the decoder's refusal of any message.
            relay.let_go(call)
            relay._on_error(channel.ChannelError(f"not a valid message: {error}"))
            await context.abort(grpc.StatusCode.UNAVAILABLE, "the daemon went away")
            raise AssertionError("abort returned") from None
        relay.let_go(call)
        if large:
            _trim()  # the output kept here is in the reply now: give the rest back
        if isinstance(reply, bytes) and len(reply) >= TRIM_AFTER_BYTES:
            # The reply, and gRPC's copy of it, count against the budget
            # until it is sent.
            charge = 2 * len(reply)
            relay.kept_bytes += charge
            context.add_done_callback(lambda _: relay.sent(charge))
        return reply

    async def stream(raw: bytes, context: Any) -> AsyncIterator[Any]:
        large = len(raw) >= TRIM_AFTER_BYTES
        request, payload = await parse(raw, context)
        del raw
        call_id, call = relay.open(request, payload, caller_of(context))
        del request, payload
        if large:
            _trim()  # the request is sent on: what it took is given back now
        try:
            while True:
                message, data = await call.inbox.get()
                if isinstance(message, messages.Chunk):
                    # The head goes to the client as it comes; the rest is
                    # kept for the tail.
                    head = relay.keep(call, message, data, retain_head=False)
                    del data
                    if head is None:
                        past = relay.past_budget()
                        relay.let_go(call)
                        relay.done(call_id, relay.PAST_BUDGET)  # its spawn is ended
                        await context.abort_with_status(past.to_status())
                    if head:
                        yield convert.output_event(message.stream, head)
                    relay.link.send(messages.Ack(call=call_id))
                elif isinstance(message, messages.Event):
                    item = message.item
                    if isinstance(item, messages.SpawnEvent) and item.exited is not None:
                        for event in _tails(call):
                            yield event
                        relay.let_go(call)
                    yield convert.streamed(message.item)
                    relay.link.send(messages.Ack(call=call_id))
                elif isinstance(message, messages.Abort):
                    await convert.abort(context, message)
                else:
                    return
        finally:
            relay.let_go(call)
            relay.done(call_id)

    if streaming:
        return grpc.unary_stream_rpc_method_handler(stream, response_serializer=convert.serialize)
    if name == "FsService.ReadFile" and direct is not None:
        asked = direct

        # Asked of the fs worker directly (decision 0034); relayed when the
        # link says so, or is in doubt. One coroutine a call: the request
        # parsed, the read's future awaited and the answer made in it.
        async def read_file(raw: bytes, context: Any) -> Any:
            try:
                request = convert.read_file_call(request_type.FromString(raw))
            except protobuf_message.DecodeError:
                await malformed(context)
            future = asked.ask(request, caller_of(context))
            outcome = None if future is None else await future
            if outcome is None:
                return await relayed([(request, b"")], context)
            if isinstance(outcome, Refusal):
                await reads.refuse(outcome, context)
            return outcome

        return grpc.unary_unary_rpc_method_handler(read_file, response_serializer=convert.serialize)
    return grpc.unary_unary_rpc_method_handler(unary, response_serializer=convert.serialize)


def _tails(call: _Call) -> Iterator[bytes]:
    """Each stream's kept tail (after the marker, if any was dropped), in
    events of at most OUTPUT_CHUNK bytes: sent before the Exited."""
    kept, call.kept = call.kept, {}
    for stream in sorted(kept):
        tail = memoryview(kept.pop(stream).tail())
        for start in range(0, len(tail), OUTPUT_CHUNK):
            yield convert.output_event(stream, tail[start : start + OUTPUT_CHUNK])


def _handlers(
    relay: Relay,
    kind: str,
    caller_of: CallerOf = _no_caller,
    direct: reads.DirectReads | None = None,
) -> list[grpc.GenericRpcHandler[Any, Any]]:
    generic = []
    models = messages.REQUESTS[kind]
    for module, service in SERVICES[kind]:
        descriptor = module.DESCRIPTOR.services_by_name[service]
        # A method of the wire the daemon has no model of yet is not served
        # (UNIMPLEMENTED), rather than keeping the whole front-end down.
        table = {
            m.name: _handler(
                relay, models[f"{service}.{m.name}"], f"{service}.{m.name}", m, caller_of, direct
            )
            for m in descriptor.methods
            if f"{service}.{m.name}" in models
        }
        generic.append(grpc.method_handlers_generic_handler(descriptor.full_name, table))
    return generic


async def serve(
    sock: socket.socket,
    hello: messages.Hello,
    protections: list[messages.Protection],
    read_link: socket.socket | None = None,
) -> int:
    """Serve until the channel closes or a Drain ends it; `read_link`: the
    fs worker's, for the reads asked of it directly (decision 0034)."""
    _keep_heap()
    stopped = asyncio.Event()
    relay = Relay(sock, stopped, hello.kind)
    direct = reads.DirectReads(read_link) if read_link is not None else None
    relay.output_budget = hello.output_budget
    server = grpc.aio.server(options=server_options(hello.max_receive, hello.max_send))
    # Who asked (decision 0033): the front-end accepts the socket itself and
    # relays each connection to the server's socket in its own netns.
    peers = Peers() if hello.record_callers else None
    try:
        caller_of = peers.caller_of if peers is not None else _no_caller
        server.add_generic_rpc_handlers(_handlers(relay, hello.kind, caller_of, direct))
        health_servicer: HealthReporter = new_health()
        health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
        names = [m.DESCRIPTOR.services_by_name[s].full_name for m, s in SERVICES[hello.kind]]
        health_name = health_pb2.DESCRIPTOR.services_by_name["Health"].full_name
        reflection.enable_server_reflection([*names, health_name, reflection.SERVICE_NAME], server)
        if peers is not None:
            bound = server.add_insecure_port(INNER_URI)
        else:
            # The socket's mode comes from the umask: chmod is denied to a front-end.
            previous = os.umask(0o777 & ~hello.socket_mode)
            try:
                bound = server.add_insecure_port(f"unix:{hello.bind_path}")
            finally:
                os.umask(previous)
        if bound == 0:
            print(f"hostcapd front-end: cannot bind {hello.bind_path}", file=sys.stderr)
            return 1
        await server.start()
        if peers is not None:
            try:
                await peers.listen(hello.bind_path, hello.socket_mode)
            except OSError as error:
                print(
                    f"hostcapd front-end: cannot bind {hello.bind_path}: {error}", file=sys.stderr
                )
                return 1
        for name in [*names, ""]:
            await health_servicer.set(name, health_pb2.HealthCheckResponse.SERVING)
        stops: list[asyncio.Task[None]] = []

        def drain(message: messages.Drain) -> None:
            async def go() -> None:
                await health_servicer.enter_graceful_shutdown()
                if not message.health_only:
                    if peers is not None:
                        await peers.close()  # no new connection; those open drain
                    await server.stop(message.grace)
                    stopped.set()

            stops.append(asyncio.ensure_future(go()))

        relay.drain = drain

        def serving(message: messages.Serving) -> None:
            # In order: a later status never lands before an earlier one.
            previous = stops[-1] if stops else None

            async def go() -> None:
                if previous is not None:
                    await previous
                await health_servicer.report(message.reason, message.service)

            stops.append(asyncio.ensure_future(go()))

        relay.serving = serving
        relay.link.send(messages.Ready(pid=os.getpid(), protections=protections))
        await stopped.wait()
        return 0
    finally:
        # Also when cancelled (a front-end run in the daemon's process).
        if peers is not None:
            await peers.close()
        await server.stop(0)
        relay.link.close()
        if direct is not None:
            direct.close()


def _hello(sock: socket.socket) -> messages.Hello:
    data = sock.recv(channel.INLINE_PAYLOAD + 64)
    if not data:
        raise EOFError
    message, _ = channel.decode(memoryview(data), [], messages.TO_FRONTEND)
    if not isinstance(message, messages.Hello):
        raise channel.ChannelError(f"expected a hello, got {type(message).__name__}")
    return message


def _preload() -> None:
    """Import now what would otherwise be imported on first use: once the
    process has its identity it may not read the interpreter's files (a
    pyenv under /root), and landlock allows reading no more than they."""
    for name in PRELOADED:
        importlib.import_module(name)
    # One of each message through the codec (its decoders are built on
    # first use of a type).
    for kind, models in messages.REQUESTS.items():
        for model in models.values():
            buffers, _ = channel.encode(messages.CALLS[kind](call=1, request=model()))
            channel.decode(memoryview(b"".join(buffers)), [], messages.FROM_FRONTEND[kind])
    answers = [messages.Reply(call=1, answer=a()) for a in typing.get_args(messages.Replied)]
    streamed = [messages.Event(call=1, item=a()) for a in typing.get_args(messages.Streamed)]
    from_root = typing.cast(Any, convert.OwnedDecoder())
    for message in [messages.Abort(call=1, code=1, message="x"), *answers, *streamed]:
        reply, _ = channel.encode(message)
        channel.decode(memoryview(b"".join(reply)), [], messages.TO_FRONTEND)
        channel.decode(memoryview(b"".join(reply)), [], from_root)
    for item in [*(a.answer for a in answers), *(e.item for e in streamed)]:
        convert.serialize(convert.to_proto(item))
    MALFORMED.to_status()


#: The loop factories of `Hello.event_loop` (None: asyncio's own).
LoopFactory = Callable[[], asyncio.AbstractEventLoop] | None


def loop_factory(name: str) -> LoopFactory:
    """The event loop a Hello asks for, its module imported now (before the
    confinement: its files may not be readable after). Raises Unavailable
    for a loop that cannot be had."""
    if name == "asyncio":
        return None
    if name == "uvloop":
        try:
            import uvloop
        except ImportError as error:
            raise Unavailable(
                f'daemon.frontend_event_loop = "uvloop" but uvloop is not importable ({error})'
            ) from None
        factory: Callable[[], asyncio.AbstractEventLoop] = uvloop.new_event_loop
        return factory
    raise Unavailable(f"unknown event loop {name!r}")


def confined(
    sock: socket.socket,
) -> tuple[messages.Hello, list[messages.Protection], LoopFactory]:
    """A front-end's first steps: read the hello, load its event loop and
    confine this process (raises Unavailable, ChannelError, EOFError). A
    test's hostile front-end takes the same steps, then attacks."""
    hello = _hello(sock)
    factory = loop_factory(hello.event_loop)
    _preload()
    # Before any thread exists (they inherit it), and while sysfs is readable.
    try:
        affinity.place(hello.cpu)
    except ValueError as error:
        raise Unavailable(f"daemon.frontend_cpu: {error}") from None
    applied = confine(
        Confinement(
            ".",
            interpreter_paths(),
            hello.parent_pid,
            uid=hello.uid,
            gid=hello.gid,
            own_netns=hello.record_callers,
        )
    )
    protections = [
        messages.Protection(name=a.name, applied=a.applied, reason=a.reason, required=a.required)
        for a in applied
    ]
    return hello, protections, factory


def main(argv: Sequence[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else list(argv)
    if len(args) not in (1, 2) or not all(arg.isdigit() for arg in args):
        print(
            "usage: python -m hostcapd.frontend FD [READ_LINK_FD] (started by hostcapd)",
            file=sys.stderr,
        )
        return 2
    sock = socket.socket(fileno=int(args[0]))
    read_link = socket.socket(fileno=int(args[1])) if len(args) == 2 else None
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the root side decides when it stops
    try:
        hello, protections, factory = confined(sock)
    except EOFError:
        return 0
    except (Unavailable, channel.ChannelError) as error:
        print(f"hostcapd front-end: {error}", file=sys.stderr)
        return 1
    with asyncio.Runner(loop_factory=factory) as runner:
        return runner.run(serve(sock, hello, protections, read_link))


if __name__ == "__main__":
    sys.exit(main())
