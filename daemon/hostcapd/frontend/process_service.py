"""ProcessService for one tenant."""

from __future__ import annotations

import asyncio
import signal as signal_mod
from collections.abc import AsyncIterator

from hostcap_proto.v1 import process_pb2, process_pb2_grpc

from hostcapd.errors import Refusal
from hostcapd.frontend import convert
from hostcapd.frontend.context import Context
from hostcapd.frontend.refusals import refuse
from hostcapd.process import killing
from hostcapd.process.request import SpawnRequest
from hostcapd.process.spawn import Spawn
from hostcapd.tenant import TenantRuntime

_VALID_SIGNALS = {int(s) for s in signal_mod.Signals}
#: Largest Output event: the kept tail is sent in pieces of this size.
OUTPUT_CHUNK = 1024 * 1024


def _varint(n: int) -> bytes:
    out = bytearray()
    while n > 0x7F:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def output_event(stream: int, data: bytes | memoryview) -> bytes:
    """The wire bytes of `SpawnEvent{output: Output{stream, data}}`, as
    SerializeToString would give them, built with one concatenation: no
    message is built and serialized per chunk (a stream's hot path).
    `stream` is STDOUT or STDERR and `data` is not empty (proto3 would omit
    either field otherwise)."""
    inner = b"\x08" + _varint(stream) + b"\x12" + _varint(len(data))
    return b"".join((b"\x12", _varint(len(inner) + len(data)), inner, data))


class ProcessServicer(process_pb2_grpc.ProcessServiceServicer):
    def __init__(self, runtime: TenantRuntime) -> None:
        self.runtime = runtime

    async def _begin(
        self, request: SpawnRequest, context: Context, method: str, streaming: bool
    ) -> tuple[Spawn | None, process_pb2.Started | None, bool]:
        """Start (or find) the spawn and wait until it has started or ended:
        (spawn, its Started once it runs (None if it never did), attached).
        A dry run returns no spawn, only its Started. A refusal, whether met
        before anything ran or by the spawn itself (the audit log), reaches
        the caller here, for Run and Spawn alike."""
        spawn: Spawn | None = None
        attached = False
        try:
            existing = self.runtime.existing(request.request_id)
            if existing is not None:
                spawn, attached = existing, True
            elif request.dry_run:
                prepared = self.runtime.prepare(request)
                prepared.close()
                return None, convert.started_to_wire(request, prepared, dry_run=True), False
            else:
                spawn = self.runtime.start(request, streaming=streaming)
            # Shielded: a caller that goes away must not cancel the spawn's own future.
            pid = await asyncio.shield(spawn.started)
        except Refusal as refusal:
            await refuse(
                context,
                self.runtime.audit,
                self.runtime.name,
                method,
                refusal,
                request.labels,
                request.request_id,
                spawn_id=spawn.id if spawn is not None else "",
            )
        except asyncio.CancelledError:
            if spawn is not None and not attached:
                spawn.cancel()  # the client went away during the set-up
            raise
        started = convert.started_of(spawn, attached=attached) if pid or attached else None
        return spawn, started, attached

    async def Spawn(
        self, request: process_pb2.SpawnRequest, context: Context
    ) -> AsyncIterator[process_pb2.SpawnEvent | bytes]:
        self.runtime.active_calls += 1  # a shutdown lets these finish sending
        try:
            async for event in self._spawn(request, context):
                yield event
        finally:
            self.runtime.active_calls -= 1

    async def _spawn(
        self, request: process_pb2.SpawnRequest, context: Context
    ) -> AsyncIterator[process_pb2.SpawnEvent | bytes]:
        req = convert.request_from_wire(request)
        spawn, started, attached = await self._begin(req, context, "Spawn", streaming=True)
        if spawn is None or attached:
            # A dry run; or a retry, which gets the start and the end (the
            # output went to the original caller, who owns the tree).
            if started is not None:
                yield process_pb2.SpawnEvent(started=started)
            if spawn is not None:
                report = await asyncio.shield(spawn.done)
                yield process_pb2.SpawnEvent(exited=convert.exited_to_wire(spawn, report))
            return
        try:
            if started is not None:
                yield process_pb2.SpawnEvent(started=started)
            while True:
                kind, payload = await spawn.events.get()
                if kind == "output":
                    stream, data = payload
                    yield output_event(stream, data)
                    spawn.consumed(len(data))
                else:
                    for stream, buf in ((1, spawn.stdout), (2, spawn.stderr)):
                        tail = memoryview(buf.tail())
                        for start in range(0, len(tail), OUTPUT_CHUNK):
                            yield output_event(stream, tail[start : start + OUTPUT_CHUNK])
                    yield process_pb2.SpawnEvent(exited=convert.exited_to_wire(spawn, payload))
                    return
        finally:
            # The client went away (cancel, deadline, disconnect): kill the tree.
            if not spawn.done.done():
                spawn.cancel()

    async def Run(
        self, request: process_pb2.SpawnRequest, context: Context
    ) -> process_pb2.RunResult:
        self.runtime.active_calls += 1
        try:
            return await self._run(request, context)
        finally:
            self.runtime.active_calls -= 1

    async def _run(
        self, request: process_pb2.SpawnRequest, context: Context
    ) -> process_pb2.RunResult:
        req = convert.request_from_wire(request)
        spawn, started, attached = await self._begin(req, context, "Run", streaming=False)
        if spawn is None:
            return process_pb2.RunResult(started=started)
        try:
            report = await asyncio.shield(spawn.done)
        finally:
            if not spawn.done.done():
                spawn.cancel()
        return process_pb2.RunResult(
            started=convert.started_of(spawn, attached=attached),
            stdout=spawn.stdout.result(),
            stderr=spawn.stderr.result(),
            exited=convert.exited_to_wire(spawn, report),
        )

    async def Signal(
        self, request: process_pb2.SignalRequest, context: Context
    ) -> process_pb2.SignalResponse:
        try:
            if request.signal not in _VALID_SIGNALS:
                raise Refusal("INVALID_ARGUMENT", f"{request.signal} is not a signal number")
            target = request.WhichOneof("target")
            spawn = self.runtime.find(
                spawn_id=request.spawn_id if target == "spawn_id" else "",
                pid=request.pid if target == "pid" else 0,
            )
            if spawn is None or not spawn.pid:
                raise Refusal("NOT_FOUND", "no such live spawn for this tenant")
        except Refusal as refusal:
            await refuse(context, self.runtime.audit, self.runtime.name, "Signal", refusal, {}, "")
        spawn.signal(request.signal)
        if request.signal == signal_mod.SIGKILL:
            # An end: answered once the tree is gone, as a cancel is.
            await killing.wait_ended(
                spawn.done, self.runtime.deps.kill_grace + killing.SIGKILL_WAIT_MARGIN_S
            )
        return process_pb2.SignalResponse(spawn_id=spawn.id)

    async def List(
        self, request: process_pb2.ListRequest, context: Context
    ) -> process_pb2.ListResponse:
        return process_pb2.ListResponse(
            spawns=[convert.spawn_info(s) for s in self.runtime.spawns.values() if s.pid]
        )
