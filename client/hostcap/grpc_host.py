"""The ToolHost over hostcapd: `hostcap.connect(socket_path)`.

    async with hostcap.connect(".hostcap/run/dev.sock") as host:
        registry = hostcap.create_tool_registry(tools=hostcap.BUILTIN_TOOLS, host=host)

The `process` arm runs commands with ProcessService.Run (cancelling the
awaiting task cancels the RPC, and the daemon kills the whole tree); the
`fs` arm uses FsService; `output_store` is a run-scoped local store swept
when the `async with` ends. `egress` runs `http_request` through the
tenant's egress proxy (a `curl` spawn, hostcap.egress) when the tenant's
network mode is "proxy", else it is None and `egress_unavailable` says why;
`os` and `mcp` are None: hostcapd does not provide them. Every refusal becomes a `HostError` with the daemon's
wire reason, or `UNREACHABLE` / `UNIMPLEMENTED` / `CANCELLED` when the call
carried none.
"""

from __future__ import annotations

import asyncio
import codecs
import contextlib
import os
import time
import uuid
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import Any

import grpc
from hostcap_proto.errors import from_rpc_error
from hostcap_proto.messages import MAX_REPLY_BYTES
from hostcap_proto.v1 import (
    common_pb2,
    fs_pb2,
    fs_pb2_grpc,
    host_pb2,
    host_pb2_grpc,
    process_pb2,
    process_pb2_grpc,
)

from hostcap import grpc_input
from hostcap.egress import SpawnEgress
from hostcap.errors import ClientHostReason, HostError, host_reason
from hostcap.host import (
    DirEntry,
    DirListing,
    FileRead,
    FileStat,
    FileType,
    FileWritten,
    InputWritten,
    Outcome,
    OutputHandler,
    ProcessLimits,
    ProcessResult,
    SessionInfo,
    SessionOutput,
    SpawnOptions,
    TerminalSize,
    ToolOutputStore,
)
from hostcap.output_store import LocalOutputStore

#: Largest message the client accepts: the largest reply any tenant's
#: ceilings allow (the daemon refuses a config above it, LIMIT_INVALID).
MAX_MESSAGE_BYTES = MAX_REPLY_BYTES
_CHANNEL_OPTIONS = [
    ("grpc.max_receive_message_length", MAX_REPLY_BYTES),
    ("grpc.max_send_message_length", MAX_REPLY_BYTES),
]

#: Longest a cancelled command's call waits for the daemon to say the tree
#: is gone (the daemon's kill grace and its SIGKILL are far shorter).
SETTLE_TIMEOUT_S = 30.0

_STATUS_REASONS: Mapping[grpc.StatusCode, ClientHostReason] = {
    grpc.StatusCode.UNAVAILABLE: "UNREACHABLE",
    grpc.StatusCode.UNIMPLEMENTED: "UNIMPLEMENTED",
    grpc.StatusCode.CANCELLED: "CANCELLED",
    grpc.StatusCode.DEADLINE_EXCEEDED: "DEADLINE_EXCEEDED",
}

_FILE_TYPES: Mapping[int, FileType] = {
    fs_pb2.REGULAR: FileType.REGULAR,
    fs_pb2.DIRECTORY: FileType.DIRECTORY,
    fs_pb2.SYMLINK: FileType.SYMLINK,
}


class HostUnreachableError(ConnectionError):
    """No hostcapd answers on the socket."""


def host_error(error: grpc.RpcError) -> HostError:
    """The HostError a failed call stands for."""
    wire = from_rpc_error(error)
    if wire is not None:
        reason = host_reason(wire.reason)
        known = reason == wire.reason
        return HostError(reason, wire.message if known else f"{wire.reason}: {wire.message}")
    code = error.code() if isinstance(error, grpc.aio.AioRpcError) else None
    reason = _STATUS_REASONS.get(code, "HOST_FAILURE") if code is not None else "HOST_FAILURE"
    details = error.details() if isinstance(error, grpc.aio.AioRpcError) else ""
    return HostError(reason, f"{code.name if code else 'error'}: {details or ''}")


def rpc_timeout(deadline: float | None) -> float | None:
    """The RPC timeout for an absolute `deadline` (seconds since the epoch);
    a deadline already passed refuses entry."""
    if deadline is None:
        return None
    remaining = deadline - time.time()
    if remaining <= 0:
        raise HostError("DEADLINE_EXCEEDED", "the deadline passed before the call")
    return remaining


def _limits(limits: ProcessLimits) -> common_pb2.Limits:
    message = common_pb2.Limits()
    for name, value in vars(limits).items():
        if value is not None:
            setattr(message, name, value)
    return message


def _outcome(value: int) -> Outcome:
    name = common_pb2.Outcome.Name(value) if value in common_pb2.Outcome.values() else ""
    try:
        return Outcome(name)
    except ValueError:
        raise HostError("HOST_FAILURE", f"the daemon reported outcome {value}") from None


async def settle(stub: Any, request: process_pb2.SpawnRequest) -> str:
    """After a cancelled Run or Spawn: wait until the daemon says its spawn ended.

    A dry run with the same request_id attaches to the spawn the first
    call started (live or finished) and returns once it has ended, its
    whole tree gone; if nothing was started under that id, it is only a
    dry run and nothing runs. "" when the end is confirmed, else why not.
    """
    probe = process_pb2.SpawnRequest()
    probe.CopyFrom(request)
    probe.dry_run = True
    try:
        await asyncio.wait_for(stub.Run(probe), SETTLE_TIMEOUT_S)
    except grpc.RpcError as error:
        if from_rpc_error(error) is not None:
            return ""  # refused as a dry run: nothing was started under the id
        return f"the end of the process tree was not confirmed ({host_error(error)})"
    except TimeoutError:
        return f"the end of the process tree was not confirmed within {SETTLE_TIMEOUT_S:g} s"
    return ""


#: Sessions an arm remembers (the oldest is forgotten past it).
MAX_SESSIONS = 256
#: A session read stops gathering past this many bytes (the rest waits for the next).
MAX_SESSION_READ = 4 * 1024 * 1024


class _Session:
    """A detached spawn this arm started: what it runs, its next offset and decoders."""

    def __init__(self, info: SessionInfo) -> None:
        self.info = info
        self.offset = 0
        self.stdout = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self.stderr = codecs.getincrementaldecoder("utf-8")(errors="replace")


class GrpcProcessArm:
    """ProcessCapability over ProcessService."""

    def __init__(self, channel: grpc.aio.Channel) -> None:
        self._stub = process_pb2_grpc.ProcessServiceStub(channel)  # type: ignore[no-untyped-call]
        #: The detached sessions this arm started, and how far each was read.
        self._sessions: dict[str, _Session] = {}

    async def spawn(
        self, command: str, args: Sequence[str], declared_env: Mapping[str, str], opts: SpawnOptions
    ) -> ProcessResult:
        request = process_pb2.SpawnRequest(
            argv=[command, *args],
            cwd=opts.cwd or "",
            env=dict(declared_env),
            limits=_limits(opts.limits),
            # Always an id: a cancelled call finds its spawn again by it.
            request_id=opts.request_id or f"hostcap:{uuid.uuid4().hex}",
            labels=dict(opts.labels),
        )
        if opts.stdin is not None:
            request.stdin = opts.stdin
        grpc_input.interactive_fields(request, opts)
        if opts.on_output is not None:
            return await self._stream(request, opts.on_output, opts.deadline)
        try:
            response: Any = await self._stub.Run(request, timeout=rpc_timeout(opts.deadline))
        except grpc.RpcError as error:
            raise host_error(error) from None
        except asyncio.CancelledError:
            # The RPC is cancelled, so the daemon kills the tree; the call
            # settles only once the daemon says the tree is gone.
            unconfirmed = await settle(self._stub, request)
            if unconfirmed:
                raise asyncio.CancelledError(unconfirmed) from None
            raise
        exited = response.exited
        outcome = _outcome(exited.outcome)
        started = response.started
        return ProcessResult(
            spawn_id=started.spawn_id,
            outcome=outcome,
            exit_code=exited.exit_code if outcome is Outcome.EXITED else None,
            signal_name=exited.signal_name or None,
            stdout=bytes(response.stdout).decode("utf-8", errors="replace"),
            stderr=bytes(response.stderr).decode("utf-8", errors="replace"),
            stdout_dropped_bytes=exited.stdout.dropped_bytes,
            stderr_dropped_bytes=exited.stderr.dropped_bytes,
            duration_seconds=exited.duration_seconds,
            message=exited.message,
            executable=started.executable.path or None,
            executable_sha256=started.executable.sha256 or None,
        )

    # --- sessions: detached spawns read later (issue 30) --------------------

    async def start_detached(
        self,
        command: str,
        args: Sequence[str],
        declared_env: Mapping[str, str],
        opts: SpawnOptions,
        *,
        environment_id: str = "",
    ) -> str:
        request = process_pb2.SpawnRequest(
            argv=[command, *args],
            cwd=opts.cwd or "",
            env=dict(declared_env),
            limits=_limits(opts.limits),
            request_id=opts.request_id or f"hostcap:{uuid.uuid4().hex}",
            labels=dict(opts.labels),
            detached=True,
            environment_id=environment_id,
        )
        if opts.stdin is not None:
            request.stdin = opts.stdin
        grpc_input.interactive_fields(request, opts)
        try:
            response: Any = await self._stub.Run(request, timeout=rpc_timeout(opts.deadline))
        except grpc.RpcError as error:
            raise host_error(error) from None
        if response.HasField("exited"):  # it never ran
            # A set-up step failed (SPAWN_FAILED), or the daemon was stopping.
            ended = _outcome(response.exited.outcome)
            raise HostError(
                "DAEMON_SHUTDOWN" if ended is Outcome.DAEMON_SHUTDOWN else "SPAWN_FAILED",
                response.exited.message or "not started",
            )
        started = response.started
        session_id = str(started.spawn_id)
        tty = grpc_input.terminal_of(started)
        if (request.stdin_open and not started.stdin_open) or (opts.tty and tty is None):
            # A daemon that does not know the fields ran it without them: end it, say so.
            with contextlib.suppress(grpc.RpcError):
                await self._stub.Signal(process_pb2.SignalRequest(spawn_id=session_id, signal=9))
            raise HostError(
                "UNIMPLEMENTED", "the daemon did not open the session's input or terminal"
            )
        self._sessions[session_id] = _Session(
            SessionInfo(
                session_id=session_id,
                command=command,
                args=tuple(args),
                stdin_open=bool(started.stdin_open),
                tty=tty,
                engine_session=opts.labels.get("session", ""),
                started_by=opts.labels.get("tool_call_id", ""),
            )
        )
        while len(self._sessions) > MAX_SESSIONS:
            self._sessions.pop(next(iter(self._sessions)))
        return session_id

    def _session(self, session_id: str) -> _Session:
        session = self._sessions.get(session_id)
        if session is None:
            raise HostError("NOT_FOUND", f"no session {session_id!r} was started here")
        return session

    async def read_session(self, session_id: str, *, yield_ms: int) -> SessionOutput:
        session = self._session(session_id)
        deadline = time.monotonic() + max(0, yield_ms) / 1000
        out, err = bytearray(), bytearray()
        dropped = 0
        while True:
            left_ms = int(max(0.0, deadline - time.monotonic()) * 1000)
            try:
                answer: Any = await self._stub.ReadOutput(
                    process_pb2.ReadOutputRequest(
                        spawn_id=session_id, offset=session.offset, wait_ms=min(left_ms, 30_000)
                    )
                )
            except grpc.RpcError as error:
                raise host_error(error) from None
            out += answer.stdout
            err += answer.stderr
            dropped += answer.dropped_bytes
            session.offset = answer.next_offset
            if not answer.running or left_ms == 0 or len(out) + len(err) >= MAX_SESSION_READ:
                break
        result = None
        if not answer.running:
            exited = answer.exited
            outcome = _outcome(exited.outcome)
            result = ProcessResult(
                spawn_id=session_id,
                outcome=outcome,
                exit_code=exited.exit_code if outcome is Outcome.EXITED else None,
                signal_name=exited.signal_name or None,
                stdout_dropped_bytes=exited.stdout.dropped_bytes,
                stderr_dropped_bytes=exited.stderr.dropped_bytes,
                duration_seconds=exited.duration_seconds,
                message=exited.message,
            )
        return SessionOutput(
            session_id=session_id,
            stdout=session.stdout.decode(bytes(out), final=result is not None),
            stderr=session.stderr.decode(bytes(err), final=result is not None),
            dropped_bytes=dropped,
            running=answer.running,
            result=result,
        )

    async def kill_session(self, session_id: str) -> None:
        self._session(session_id)
        try:
            await self._stub.Signal(process_pb2.SignalRequest(spawn_id=session_id, signal=9))
        except grpc.RpcError as error:
            wire = host_error(error)
            if wire.reason != "NOT_FOUND":  # already ended: nothing to kill
                raise wire from None

    def session_info(self, session_id: str) -> SessionInfo | None:
        session = self._sessions.get(session_id)
        return session.info if session is not None else None

    async def write_stdin(
        self, session_id: str, data: bytes, *, close: bool = False
    ) -> InputWritten:
        self._session(session_id)
        try:
            return await grpc_input.write_stdin(self._stub, session_id, data, close)
        except grpc.RpcError as error:
            raise host_error(error) from None

    async def resize(self, session_id: str, size: TerminalSize) -> None:
        self._session(session_id)
        try:
            await grpc_input.resize(self._stub, session_id, size)
        except grpc.RpcError as error:
            raise host_error(error) from None

    async def open_environment(
        self,
        *,
        idle_timeout_s: float = 0.0,
        lifetime_s: float = 0.0,
        labels: Mapping[str, str] | None = None,
    ) -> str:
        try:
            info: Any = await self._stub.OpenEnvironment(
                process_pb2.OpenEnvironmentRequest(
                    idle_timeout_seconds=idle_timeout_s,
                    lifetime_seconds=lifetime_s,
                    labels=dict(labels or {}),
                )
            )
        except grpc.RpcError as error:
            raise host_error(error) from None
        return str(info.environment_id)

    async def close_environment(self, environment_id: str) -> list[str]:
        try:
            closed: Any = await self._stub.CloseEnvironment(
                process_pb2.CloseEnvironmentRequest(environment_id=environment_id)
            )
        except grpc.RpcError as error:
            raise host_error(error) from None
        return list(closed.spawns_ended)

    async def _stream(
        self, request: Any, on_output: OutputHandler, deadline: float | None
    ) -> ProcessResult:
        """The streaming Spawn RPC: each piece of output goes to `on_output`
        as it arrives (decoded per stream, so a character split across two
        chunks arrives whole); the result is what Run would have returned."""
        call = self._stub.Spawn(request, timeout=rpc_timeout(deadline))
        out = {common_pb2.STDOUT: bytearray(), common_pb2.STDERR: bytearray()}
        decoders = {
            stream: codecs.getincrementaldecoder("utf-8")(errors="replace") for stream in out
        }
        started: Any = None
        exited: Any = None
        try:
            async for event in call:
                kind = event.WhichOneof("event")
                if kind == "started":
                    started = event.started
                elif kind == "output":
                    which = event.output.stream
                    if which not in out:
                        continue
                    out[which].extend(event.output.data)
                    text = decoders[which].decode(bytes(event.output.data))
                    if text:
                        await on_output("stderr" if which == common_pb2.STDERR else "stdout", text)
                elif kind == "exited":
                    exited = event.exited
        except grpc.RpcError as error:
            raise host_error(error) from None
        except asyncio.CancelledError:
            # Cancelling the RPC makes the daemon kill the tree; the call
            # settles only once the daemon says the tree is gone.
            call.cancel()
            unconfirmed = await settle(self._stub, request)
            if unconfirmed:
                raise asyncio.CancelledError(unconfirmed) from None
            raise
        finally:
            call.cancel()
        if exited is None:
            raise HostError("HOST_FAILURE", "the spawn stream ended without an exit report")
        outcome = _outcome(exited.outcome)
        return ProcessResult(
            spawn_id=started.spawn_id if started is not None else "",
            outcome=outcome,
            exit_code=exited.exit_code if outcome is Outcome.EXITED else None,
            signal_name=exited.signal_name or None,
            stdout=bytes(out[common_pb2.STDOUT]).decode("utf-8", errors="replace"),
            stderr=bytes(out[common_pb2.STDERR]).decode("utf-8", errors="replace"),
            stdout_dropped_bytes=exited.stdout.dropped_bytes,
            stderr_dropped_bytes=exited.stderr.dropped_bytes,
            duration_seconds=exited.duration_seconds,
            message=exited.message,
            executable=started.executable.path or None if started is not None else None,
            executable_sha256=started.executable.sha256 or None if started is not None else None,
        )

    async def live_spawns(self) -> list[Any]:
        """This tenant's live spawns (ProcessService.List), as wire SpawnInfo messages."""
        try:
            response: Any = await self._stub.List(process_pb2.ListRequest())
        except grpc.RpcError as error:
            raise host_error(error) from None
        return list(response.spawns)


class GrpcFsArm:
    """FsCapability over FsService."""

    def __init__(self, channel: grpc.aio.Channel) -> None:
        self._stub = fs_pb2_grpc.FsServiceStub(channel)  # type: ignore[no-untyped-call]

    async def _call(self, method: Any, request: Any) -> Any:
        try:
            return await method(request)
        except grpc.RpcError as error:
            raise host_error(error) from None

    async def read_file(self, path: str, *, max_bytes: int | None = None) -> FileRead:
        request = fs_pb2.ReadFileRequest(path=path)
        if max_bytes is not None:
            request.max_bytes = max_bytes
        response = await self._call(self._stub.ReadFile, request)
        return FileRead(
            path=response.path, data=bytes(response.data), size=response.size, truncated=response.truncated,
            is_binary=response.is_binary, media_type=response.media_type or "application/octet-stream",
            sha256=response.sha256,
        )  # fmt: skip

    async def write_file(
        self,
        path: str,
        data: bytes,
        *,
        labels: Mapping[str, str],
        create_parents: bool = True,
        expected_sha256: str | None = None,
    ) -> FileWritten:
        request = fs_pb2.WriteFileRequest(
            path=path, data=data, create_parents=create_parents, labels=dict(labels),
            request_id=f"{labels.get('tool_call_id', 'write')}:{uuid.uuid4().hex[:12]}",
        )  # fmt: skip
        if expected_sha256 is not None:
            request.expected_sha256 = expected_sha256
        response = await self._call(self._stub.WriteFile, request)
        return FileWritten(
            path=response.path, size=response.size, sha256=response.sha256, created=response.created,
            previous_sha256=response.previous_sha256 or None,
        )  # fmt: skip

    async def list_directory(
        self,
        path: str,
        *,
        max_entries: int | None = None,
        depth: int | None = None,
        include_hidden: bool = False,
    ) -> DirListing:
        request = fs_pb2.ListDirectoryRequest(path=path, include_hidden=include_hidden)
        if max_entries is not None:
            request.max_entries = max_entries
        if depth is not None:
            request.depth = depth
        response = await self._call(self._stub.ListDirectory, request)
        entries = tuple(
            DirEntry(
                name=e.name,
                type=_FILE_TYPES.get(e.type, FileType.OTHER),
                size=e.size,
                mtime=e.mtime,
            )
            for e in response.entries
        )
        return DirListing(path=response.path, entries=entries, truncated=response.truncated)

    async def stat(self, path: str) -> FileStat:
        response = await self._call(self._stub.Stat, fs_pb2.StatRequest(path=path))
        return FileStat(
            path=response.path, type=_FILE_TYPES.get(response.type, FileType.OTHER), size=response.size,
            mode=response.mode, mtime=response.mtime, writable=response.writable,
        )  # fmt: skip


class GrpcToolHost:
    """A ToolHost backed by one hostcapd tenant socket."""

    os: None = None
    mcp: None = None

    def __init__(self, channel: grpc.aio.Channel, output_store: ToolOutputStore) -> None:
        self._channel = channel
        self.process = GrpcProcessArm(channel)
        self.fs = GrpcFsArm(channel)
        self.output_store = output_store
        self._host_stub = host_pb2_grpc.HostServiceStub(channel)  # type: ignore[no-untyped-call]
        #: The egress arm, when the tenant's network mode is "proxy" (see
        #: `discover_egress`); else None, and `egress_unavailable` says why.
        self.egress: SpawnEgress | None = None
        self.egress_unavailable = "not asked yet"

    async def discover_egress(self) -> None:
        """Offer the egress arm when the daemon runs this tenant's spawns
        behind an egress proxy (capabilities: network.mode = "proxy")."""
        try:
            caps = await self.capabilities()
        except HostError as error:
            self.egress, self.egress_unavailable = None, f"capabilities failed: {error.reason}"
            return
        mode = caps.network.mode or "none"
        if mode == "proxy" and caps.network.proxy_running:
            self.egress, self.egress_unavailable = SpawnEgress(self.process), ""
        elif mode == "proxy":
            self.egress = None
            self.egress_unavailable = "the tenant's egress proxy is not running"
        else:
            self.egress = None
            self.egress_unavailable = (
                f'the tenant\'s network mode is "{mode}", not "proxy": hostcapd gives '
                "http_request no way out (ask the operator for [tenants.NAME.network] "
                'mode = "proxy" and allow rules)'
            )

    async def capabilities(self) -> Any:
        """What the daemon enforces for this tenant (HostService.Capabilities, the wire message)."""
        try:
            return await self._host_stub.Capabilities(host_pb2.CapabilitiesRequest())
        except grpc.RpcError as error:
            raise host_error(error) from None


@asynccontextmanager
async def connect(
    socket_path: str | os.PathLike[str],
    *,
    run_id: str | None = None,
    output_store: ToolOutputStore | None = None,
    ready_timeout: float = 10.0,
) -> AsyncIterator[GrpcToolHost]:
    """A ToolHost over the hostcapd tenant socket at `socket_path`, for one run.

    Waits up to `ready_timeout` seconds for the daemon to answer
    (HostUnreachableError otherwise). On exit the channel is closed and the
    run's output store swept (a store passed in stays the caller's to sweep).
    """
    path = os.fspath(socket_path)
    if not os.path.exists(path):
        raise HostUnreachableError(f"no hostcapd socket at {path}")
    store = output_store if output_store is not None else LocalOutputStore(run_id)
    channel = grpc.aio.insecure_channel("unix:" + path, options=_CHANNEL_OPTIONS)
    try:
        try:
            await asyncio.wait_for(channel.channel_ready(), ready_timeout)
        except TimeoutError:
            raise HostUnreachableError(
                f"hostcapd did not answer on {path} within {ready_timeout:g} s"
            ) from None
        host = GrpcToolHost(channel, store)
        await host.discover_egress()
        yield host
    finally:
        await channel.close(grace=None)
        if output_store is None:
            await store.sweep()
