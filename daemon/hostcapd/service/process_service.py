"""ProcessService for one tenant, on the channel's typed messages."""

from __future__ import annotations

import asyncio
import contextlib
import signal as signal_mod
from collections.abc import AsyncIterator
from typing import cast

from hostcapd.bridge import messages
from hostcapd.bridge.frontends import RelayedCall
from hostcapd.errors import Refusal
from hostcapd.process import killing, records
from hostcapd.process.environments import CLOSED_BY_CLIENT
from hostcapd.process.report import Report
from hostcapd.process.request import SpawnRequest
from hostcapd.process.spawn import Spawn
from hostcapd.service import convert, interactive
from hostcapd.service.refusals import refuse
from hostcapd.tenant import TenantRuntime

_VALID_SIGNALS = {int(s) for s in signal_mod.Signals}


class ProcessService:
    """hostcap.v1.ProcessService for one tenant."""

    def __init__(self, runtime: TenantRuntime) -> None:
        self.runtime = runtime

    async def _begin(
        self, request: SpawnRequest, method: str, streaming: bool
    ) -> tuple[Spawn | None, messages.Started | None, bool]:
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
                return None, convert.started_message(request, prepared, dry_run=True), False
            else:
                spawn = self.runtime.start(request, streaming=streaming)
            # Its own: a caller that goes away must not cancel the spawn's future.
            pid = await spawn.started_waiter()
        except Refusal as refusal:
            refuse(
                self.runtime.audit,
                self.runtime.name,
                method,
                refusal,
                request.labels,
                request.request_id,
                spawn_id=spawn.id if spawn is not None else "",
                details=records.refused_record(
                    request, spawn.prepared if spawn is not None else None
                ),
            )
        except asyncio.CancelledError:
            if spawn is not None and not attached:
                spawn.cancel()  # the client went away during the set-up
            raise
        started = convert.started_of(spawn, attached=attached) if pid or attached else None
        return spawn, started, attached

    async def Spawn(
        self, request: messages.SpawnCall, call: RelayedCall
    ) -> AsyncIterator[messages.SpawnEvent]:
        self.runtime.active_calls += 1  # a shutdown lets these finish sending
        try:
            async for event in self._spawn(convert.spawn_request(request, call.payload), call):
                yield event
        finally:
            self.runtime.active_calls -= 1

    async def _spawn(
        self, req: SpawnRequest, call: RelayedCall
    ) -> AsyncIterator[messages.SpawnEvent]:
        spawn, started, attached = await self._begin(req, "Spawn", streaming=not req.detached)
        if spawn is not None and req.detached and not attached:
            # It outlives this call: its output is read with ReadOutput.
            if started is not None:
                yield messages.SpawnEvent(started=started)
            else:
                yield messages.SpawnEvent(exited=convert.exited_message(spawn, await spawn.done))
            return
        if spawn is None or attached:
            # A dry run; or a retry, which gets the start and the end (the
            # output went to the original caller, who owns the tree).
            if started is not None:
                yield messages.SpawnEvent(started=started)
            if spawn is not None:
                report = await asyncio.shield(spawn.done)
                yield messages.SpawnEvent(exited=convert.exited_message(spawn, report))
            return
        try:
            if started is not None:
                yield messages.SpawnEvent(started=started)
            # Its front-end streams the head as it comes, and the tail
            # before the Exited (decision 0032).
            report = await _pass_output(spawn, call)
            yield messages.SpawnEvent(exited=convert.exited_message(spawn, report))
        finally:
            # The client went away (cancel, deadline, disconnect): kill the tree.
            spawn.stop_streaming()
            if not spawn.done.done():
                _cancel(spawn, call)

    async def Run(self, request: messages.RunCall, call: RelayedCall) -> messages.RunResult:
        self.runtime.active_calls += 1
        try:
            return await self._run(convert.spawn_request(request, call.payload), call)
        finally:
            self.runtime.active_calls -= 1

    async def _run(self, req: SpawnRequest, call: RelayedCall) -> messages.RunResult:
        if req.input_open and not req.detached:
            refuse(
                self.runtime.audit,
                self.runtime.name,
                "Run",
                Refusal(
                    "INVALID_ARGUMENT",
                    "a Run that is not detached cannot be written to while it waits: "
                    "stdin_open and tty are for Spawn or a detached Run",
                ),
                req.labels,
                req.request_id,
            )
        spawn, started, attached = await self._begin(req, "Run", streaming=not req.detached)
        if spawn is None:
            return messages.RunResult(started=started)
        if req.detached and not attached:
            if started is not None:  # it runs on; ReadOutput reads it
                return messages.RunResult(started=started)
            report = await asyncio.shield(spawn.done)  # it never ran
            return messages.RunResult(exited=convert.exited_message(spawn, report))
        try:
            # Its output goes to its front-end as it comes, which keeps the
            # head and tail and joins them to this result (decision 0032).
            # A retry gets the start and the end: the output went to the
            # first caller.
            report = await (asyncio.shield(spawn.done) if attached else _pass_output(spawn, call))
        finally:
            if not attached:
                spawn.stop_streaming()
            if not spawn.done.done():
                _cancel(spawn, call)
        return messages.RunResult(
            # (its pid is the same as when it started: built once a Run)
            started=started or convert.started_of(spawn, attached=attached),
            exited=convert.exited_message(spawn, report),
        )

    async def Signal(
        self, request: messages.SignalCall, call: RelayedCall
    ) -> messages.SignalResponse:
        try:
            if request.signal not in _VALID_SIGNALS:
                raise Refusal("INVALID_ARGUMENT", f"{request.signal} is not a signal number")
            spawn = self.runtime.find(spawn_id=request.spawn_id or "", pid=request.pid or 0)
            if spawn is None or not spawn.pid:
                raise Refusal("NOT_FOUND", "no such live spawn for this tenant")
        except Refusal as refusal:
            refuse(self.runtime.audit, self.runtime.name, "Signal", refusal, {}, "")
        spawn.signal(request.signal)
        if request.signal == signal_mod.SIGKILL:
            # An end: answered once the tree is gone, as a cancel is.
            await killing.wait_ended(
                spawn.done, self.runtime.deps.kill_grace + killing.SIGKILL_WAIT_MARGIN_S
            )
        return messages.SignalResponse(spawn_id=spawn.id)

    async def ReadOutput(
        self, request: messages.ReadOutputCall, call: RelayedCall
    ) -> messages.ReadOutputResponse:
        try:
            spawn = self.runtime.detached.get(request.spawn_id)
            log = spawn.log if spawn is not None else None
            if spawn is None or log is None:
                raise Refusal("NOT_FOUND", "no such detached spawn for this tenant")
            if request.offset > log.total:
                raise Refusal(
                    "INVALID_ARGUMENT",
                    f"offset {request.offset} is past the output's end ({log.total} bytes)",
                )
        except Refusal as refusal:
            refuse(self.runtime.audit, self.runtime.name, "ReadOutput", refusal, {}, "")
        if request.wait_ms and log.total == request.offset and not spawn.done.done():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(log.wait(), request.wait_ms / 1000)
        stdout, stderr, next_offset, dropped = log.read(request.offset)
        ended = spawn.done.done() and spawn.report is not None
        return messages.ReadOutputResponse(
            stdout=stdout,
            stderr=stderr,
            next_offset=next_offset,
            dropped_bytes=dropped,
            running=not ended,
            exited=convert.exited_message(spawn, spawn.report)
            if ended and spawn.report is not None
            else None,
        )

    async def OpenEnvironment(
        self, request: messages.OpenEnvironmentCall, call: RelayedCall
    ) -> messages.EnvironmentInfo:
        try:
            env = await self.runtime.environments.open(
                self.runtime,
                request.idle_timeout_seconds,
                request.lifetime_seconds,
                request.labels,
            )
        except Refusal as refusal:
            refuse(
                self.runtime.audit,
                self.runtime.name,
                "OpenEnvironment",
                refusal,
                request.labels,
                "",
            )
        return messages.EnvironmentInfo(**convert.environment_fields(env))

    async def CloseEnvironment(
        self, request: messages.CloseEnvironmentCall, call: RelayedCall
    ) -> messages.CloseEnvironmentResponse:
        try:
            ended = await self.runtime.environments.close(
                self.runtime, request.environment_id, CLOSED_BY_CLIENT
            )
        except Refusal as refusal:
            refuse(self.runtime.audit, self.runtime.name, "CloseEnvironment", refusal, {}, "")
        return messages.CloseEnvironmentResponse(
            environment_id=request.environment_id, spawns_ended=ended
        )

    async def ListEnvironments(
        self, request: messages.ListEnvironmentsCall, call: RelayedCall
    ) -> messages.ListEnvironmentsResponse:
        return messages.ListEnvironmentsResponse(
            environments=[
                messages.EnvironmentEntry(**convert.environment_fields(env))
                for env in self.runtime.environments.envs.values()
                if not env.closing
            ]
        )

    async def List(self, request: messages.ListCall, call: RelayedCall) -> messages.ListResponse:
        return messages.ListResponse(
            spawns=[convert.spawn_info(s) for s in self.runtime.spawns.values() if s.pid]
        )

    async def WriteStdin(
        self, request: messages.WriteStdinCall, call: RelayedCall
    ) -> messages.WriteStdinResponse:
        try:
            return await interactive.write_stdin(self.runtime, request, call.payload or b"")
        except Refusal as refusal:
            refuse(
                self.runtime.audit,
                self.runtime.name,
                "WriteStdin",
                refusal,
                {},
                "",
                spawn_id=request.spawn_id[:64],
            )

    async def Resize(
        self, request: messages.ResizeCall, call: RelayedCall
    ) -> messages.ResizeResponse:
        try:
            return await interactive.resize(self.runtime, request)
        except Refusal as refusal:
            refuse(
                self.runtime.audit,
                self.runtime.name,
                "Resize",
                refusal,
                {},
                "",
                spawn_id=request.spawn_id[:64],
            )


async def _pass_output(spawn: Spawn, call: RelayedCall) -> Report:
    """Pass the spawn's output to the call's front-end as it is read, each
    read once it has taken the one before; its report once it has ended."""
    assert call.pass_output is not None
    while True:
        kind, payload = await spawn.events.get()
        if kind != "output":
            return cast(Report, payload)
        stream, data = payload
        await call.pass_output(stream, data, spawn.keep)
        spawn.consumed(len(data))


def _cancel(spawn: Spawn, call: RelayedCall) -> None:
    """End a spawn whose call is over before it: the client went away, or
    its front-end ended the call and said why, which the exit record quotes
    as the front-end's word."""
    because = call.ended_because()
    spawn.cancel(message=f"ended by the tenant's front-end: {because}" if because else "")
