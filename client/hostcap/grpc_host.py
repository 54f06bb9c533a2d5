"""The ToolHost over hostcapd: `hostcap.connect(socket_path)`.

    async with hostcap.connect(".hostcap/run/dev.sock") as host:
        registry = hostcap.create_tool_registry(tools=hostcap.BUILTIN_TOOLS, host=host)

The `process` arm runs commands with ProcessService.Run (cancelling the
awaiting task cancels the RPC, and the daemon kills the whole tree); the
`fs` arm uses FsService; `output_store` is a run-scoped local store swept
when the `async with` ends. `egress`, `os` and `mcp` are None: hostcapd does
not provide them. Every refusal becomes a `HostError` with the daemon's
wire reason, or `UNREACHABLE` / `UNIMPLEMENTED` / `CANCELLED` when the call
carried none.
"""

from __future__ import annotations

import asyncio
import codecs
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

from hostcap.errors import ClientHostReason, HostError, host_reason
from hostcap.host import (
    DirEntry,
    DirListing,
    FileRead,
    FileStat,
    FileType,
    FileWritten,
    Outcome,
    OutputHandler,
    ProcessLimits,
    ProcessResult,
    SpawnOptions,
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


class GrpcProcessArm:
    """ProcessCapability over ProcessService."""

    def __init__(self, channel: grpc.aio.Channel) -> None:
        self._stub = process_pb2_grpc.ProcessServiceStub(channel)  # type: ignore[no-untyped-call]

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

    egress: None = None
    os: None = None
    mcp: None = None

    def __init__(self, channel: grpc.aio.Channel, output_store: ToolOutputStore) -> None:
        self._channel = channel
        self.process = GrpcProcessArm(channel)
        self.fs = GrpcFsArm(channel)
        self.output_store = output_store
        self._host_stub = host_pb2_grpc.HostServiceStub(channel)  # type: ignore[no-untyped-call]

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
        yield GrpcToolHost(channel, store)
    finally:
        await channel.close(grace=None)
        if output_store is None:
            await store.sweep()
