"""WriteStdin and Resize (issue 31, decision 0031): input to a live spawn of
the tenant started with its input open, and its terminal's size.

    written = await write_stdin(runtime, call, payload)   # Refusal if it cannot
    await resize(runtime, call)

A write is audited before its bytes reach the command (a `process.input`
record: no record, no input), then waits for room in the pipe or the
terminal: the caller feels the back-pressure, the daemon holds at most the
payloads the tenant's in-flight budget admitted, and a few per spawn.
"""

from __future__ import annotations

import asyncio

from hostcapd.audit import AuditUnavailable
from hostcapd.bridge import messages
from hostcapd.bridge.calls import MAX_WRITE_STDIN
from hostcapd.callers import caller_field
from hostcapd.errors import Refusal
from hostcapd.process import records, terminal
from hostcapd.process.input import SpawnInput
from hostcapd.process.spawn import Spawn
from hostcapd.tenant import TenantRuntime


def _spawn(runtime: TenantRuntime, spawn_id: str) -> Spawn:
    """A live spawn of this tenant, or a refusal: NOT_FOUND for any id that
    is not one of its own (another tenant's included), SPAWN_ENDED for one of
    its detached spawns that has ended."""
    spawn = runtime.find(spawn_id=spawn_id) if spawn_id else None
    if spawn is None:
        ended = runtime.detached.get(spawn_id) if spawn_id else None
        if ended is not None:
            raise Refusal("SPAWN_ENDED", "the spawn has ended")
        raise Refusal("NOT_FOUND", "no such live spawn for this tenant")
    if spawn.done.done():
        raise Refusal("SPAWN_ENDED", "the spawn has ended")
    return spawn


async def _running_input(spawn: Spawn) -> SpawnInput:
    """Its input once it runs (a write may come before its exec)."""
    if spawn.input is None:
        try:
            pid = await asyncio.shield(spawn.started)
        except Refusal:  # refused before it ran (its caller was told why)
            pid = 0
        if not pid or spawn.input is None:
            raise Refusal("SPAWN_ENDED", "the spawn has ended")
    return spawn.input


async def write_stdin(
    runtime: TenantRuntime, request: messages.WriteStdinCall, data: bytes
) -> messages.WriteStdinResponse:
    spawn = _spawn(runtime, request.spawn_id)
    if len(data) > MAX_WRITE_STDIN:
        raise Refusal("TOO_LARGE", f"a write is at most {MAX_WRITE_STDIN} bytes, not {len(data)}")
    if not spawn.request.input_open:
        raise Refusal(
            "STDIN_NOT_OPEN", "the spawn was not started with its input open (stdin_open or tty)"
        )
    if not data and not request.close:
        raise Refusal("INVALID_ARGUMENT", "nothing to write: no data and no close")
    spawn_input = await _running_input(spawn)
    spawn_input.check()
    spawn_input.audited += 1
    try:
        runtime.audit.write(
            "process.input",
            **records.input_record(
                runtime.name, spawn.id, spawn.request, spawn_input.audited, data, request.close
            ),
            **caller_field(),  # who typed it (decision 0033)
        )
    except AuditUnavailable as error:
        raise Refusal(
            "AUDIT_UNAVAILABLE", f"the audit log cannot be written, nothing was written: {error}"
        ) from None
    written = await spawn_input.write(data, request.close)
    return messages.WriteStdinResponse(
        spawn_id=spawn.id,
        bytes_written=written,
        total_bytes=spawn_input.bytes,
        writes=spawn_input.writes,
    )


async def resize(runtime: TenantRuntime, request: messages.ResizeCall) -> messages.ResizeResponse:
    spawn = _spawn(runtime, request.spawn_id)
    if spawn.request.tty is None:
        raise Refusal("NOT_A_TERMINAL", "the spawn has no terminal")
    rows, cols = terminal.check_size(request.rows, request.cols)
    spawn_input = await _running_input(spawn)
    if spawn_input.fd < 0:
        raise Refusal("SPAWN_ENDED", "the spawn has ended")
    try:
        terminal.set_size(spawn_input.fd, rows, cols)
    except OSError:
        raise Refusal("SPAWN_ENDED", "the spawn's terminal is gone") from None
    spawn.tty_size = (rows, cols)
    return messages.ResizeResponse(spawn_id=spawn.id)
