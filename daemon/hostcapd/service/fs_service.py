"""FsService for one tenant: validates requests, asks the fs worker, audits.

The service is bound to its tenant, its audit log and its worker at
construction; no request can name another tenant. It checks what needs no
file system (sizes against the tenant's ceilings, argument shapes), leaves
every path decision to the worker (which runs as the tenant beneath the
roots), and raises the worker's refusals as they are (the channel carries
each as an Abort with its reason).

WriteFile's audit order (docs/decisions/0020-fs-write-audit-order.md): the
worker prepares the write (all checks done, content fsynced in an unnamed
file), the `file.write` record is made durable, and only then is the file
renamed into place. No audit, no write. A write that fails after its record
also gets a `policy.deny` record (same path and request_id, its message
saying so).

A started operation runs to its end even if the client goes away (bounded
by the worker's timeout): a write is never cut between its audit record and
its rename, and the worker's link stays in step.
"""

from __future__ import annotations

import asyncio
import functools
import re
from collections.abc import Awaitable
from typing import Any, NoReturn, TypeVar

from hostcapd.audit import AuditLog, AuditUnavailable
from hostcapd.bridge import messages
from hostcapd.bridge.frontends import RelayedCall
from hostcapd.callers import caller_field
from hostcapd.config import Tenant
from hostcapd.errors import Refusal
from hostcapd.fs import content
from hostcapd.fs import messages as fs_messages
from hostcapd.fs.client import FsWorker, FsWorkerUnavailable
from hostcapd.fs.direct import AUDITED_READ_REASONS, read_bounds
from hostcapd.fs.errors import refusal_from_errno
from hostcapd.labels import validate_correlation
from hostcapd.service.refusals import refuse

T = TypeVar("T")

#: Reads up to this size are read and hashed on the loop; larger ones in a thread.
INLINE_READ_BYTES = 256 << 10
_SHA256 = re.compile(r"^[0-9a-f]{64}$")

#: The worker's file types as the wire names them (hostcap.v1.FileType).
_FILE_TYPES = {
    "regular": "REGULAR",
    "directory": "DIRECTORY",
    "symlink": "SYMLINK",
    "other": "OTHER",
}


class FsService:
    """hostcap.v1.FsService for one tenant."""

    def __init__(self, tenant: Tenant, audit: AuditLog, worker: FsWorker) -> None:
        self._tenant = tenant
        self._audit = audit
        self._worker = worker
        self._fs = tenant.fs

    # --- the four methods ---------------------------------------------

    async def ReadFile(
        self, request: messages.ReadFileCall, call: RelayedCall
    ) -> messages.ReadFileResponse:
        try:
            max_bytes = read_bounds(request.offset, request.max_bytes, self._fs.max_read_bytes)
            path, result = await _run_to_end(self._read(request.path, request.offset, max_bytes))
        except Refusal as failure:
            self._refuse("ReadFile", request.path, failure)
        return messages.ReadFileResponse(
            path=path,
            data=result.data,
            size=result.size,
            offset=result.offset,
            truncated=result.truncated,
            is_binary=result.is_binary,
            media_type=result.media_type,
            sha256=result.sha256,
            file_sha256=result.file_sha256,
        )

    async def _read(self, path: str, offset: int, max_bytes: int) -> tuple[str, content.ReadResult]:
        """The worker resolves, checks and opens as the tenant; the content is
        read here from the fd it passed, after the worker is free again."""
        async with self._worker.session() as session:
            reply = await session.exchange(fs_messages.OpenRead(path=path))
        if reply.fd is None:
            raise FsWorkerUnavailable("the fs worker answered a read without its file")
        try:
            wanted = min(max_bytes, max(int(reply.header["size"]) - offset, 0))
            read = functools.partial(
                content.read_range, reply.fd, offset, max_bytes, reply.header["name"]
            )
            # hashing megabytes would stall every other call on the loop
            result = await asyncio.to_thread(read) if wanted > INLINE_READ_BYTES else read()
        except content.NotRegularFile:
            raise Refusal("INVALID_ARGUMENT", "read: not a regular file") from None
        except OSError as error:
            raise refusal_from_errno(error, "read") from None
        finally:
            reply.close()
        return str(reply.header["path"]), result

    async def WriteFile(
        self, request: messages.WriteFileCall, call: RelayedCall
    ) -> messages.WriteFileResponse:
        labels = dict(request.labels)
        data = call.payload or b""
        try:
            self._validate_write(request, data, labels)
            expected = request.expected_sha256
            prepare = {
                "op": "write_prepare",
                "path": request.path,
                "create_parents": request.create_parents,
                "exclusive": request.exclusive,
                "expected_sha256": expected,
            }
            prepared = await _run_to_end(self._write(prepare, data, labels, request.request_id))
        except Refusal as failure:
            self._refuse("WriteFile", request.path, failure, labels, request.request_id)
        return messages.WriteFileResponse(
            path=prepared["path"],
            size=prepared["size"],
            sha256=prepared["sha256"],
            previous_sha256=prepared["previous_sha256"],
            created=prepared["created"],
        )

    async def ListDirectory(
        self, request: messages.ListDirectoryCall, call: RelayedCall
    ) -> messages.ListDirectoryResponse:
        try:
            max_entries = self._bounded(
                "max_entries",
                request.max_entries,
                self._fs.max_list_entries,
                self._fs.max_list_entries,
            )
            depth = self._bounded("depth", request.depth, self._fs.max_list_depth, 1)
            header = await self._single(
                {
                    "op": "list",
                    "path": request.path,
                    "max_entries": max_entries,
                    "depth": depth,
                    "include_hidden": request.include_hidden,
                }
            )
        except Refusal as failure:
            self._refuse("ListDirectory", request.path, failure)
        return messages.ListDirectoryResponse(
            path=header["path"],
            entries=[
                messages.DirEntry(
                    name=entry["name"],
                    type=_FILE_TYPES[entry["type"]],
                    size=entry["size"],
                    mtime=entry["mtime"],
                    target=entry["target"],
                )
                for entry in header["entries"]
            ],
            truncated=header["truncated"],
        )

    async def Stat(self, request: messages.StatCall, call: RelayedCall) -> messages.StatResponse:
        try:
            header = await self._single(fs_messages.Stat(path=request.path))
        except Refusal as failure:
            self._refuse("Stat", request.path, failure)
        return messages.StatResponse(
            path=header["path"],
            type=_FILE_TYPES[header["type"]],
            size=header["size"],
            mode=header["mode"],
            mtime=header["mtime"],
            writable=header["writable"],
        )

    # --- helpers -----------------------------------------------------------

    async def _single(self, header: dict[str, Any] | fs_messages.Request) -> dict[str, Any]:
        async def one() -> dict[str, Any]:
            async with self._worker.session() as session:
                reply = await session.exchange(header)
            reply.close()
            return reply.header

        return await _run_to_end(one())

    async def _write(
        self, prepare: dict[str, Any], data: bytes, labels: dict[str, str], request_id: str
    ) -> dict[str, Any]:
        async with self._worker.session() as session:
            prepared = (await session.exchange(prepare, data)).header
            try:
                await self._audit.write_durable(
                    "file.write",
                    tenant=self._tenant.name,
                    path=prepared["path"],
                    size=prepared["size"],
                    sha256_before=prepared["previous_sha256"] or None,
                    sha256_after=prepared["sha256"],
                    labels=labels,
                    request_id=request_id or None,
                    **caller_field(),
                )
            except AuditUnavailable:
                await session.exchange({"op": "write_abort"})
                raise Refusal(
                    "AUDIT_UNAVAILABLE", "the audit log cannot be written; nothing was written"
                ) from None
            try:
                await session.exchange({"op": "write_commit"})
            except FsWorkerUnavailable:
                raise FsWorkerUnavailable(
                    "the fs worker died while committing the write; whether it took effect is unknown"
                ) from None
            except Refusal as refusal:
                # the policy.deny that follows tells the reader of the log
                # that this file.write did not take effect
                raise Refusal(
                    refusal.reason, f"not committed after its file.write record: {refusal.message}"
                ) from None
        return prepared

    def _validate_write(
        self, request: messages.WriteFileCall, data: bytes, labels: dict[str, str]
    ) -> None:
        limit = self._fs.max_write_bytes
        if len(data) > limit:
            raise Refusal(
                "TOO_LARGE",
                f"content of {len(data)} bytes is above the tenant's write ceiling of {limit}",
            )
        if request.expected_sha256 and not _SHA256.match(request.expected_sha256):
            raise Refusal(
                "INVALID_ARGUMENT", "expected_sha256 must be 64 lowercase hex digits, or empty"
            )
        validate_correlation(labels, request.request_id)

    @staticmethod
    def _bounded(name: str, requested: int | None, ceiling: int, default: int) -> int:
        """A requested bound: `default` when unset; zero or above the ceiling
        is LIMIT_INVALID, never clamped."""
        if requested is None:
            return default
        value = int(requested)
        if value == 0 or value > ceiling:
            raise Refusal(
                "LIMIT_INVALID",
                f"{name} must be between 1 and the tenant's ceiling of {ceiling}",
            )
        return value

    def _refuse(
        self,
        method: str,
        path: str,
        failure: Refusal,
        labels: dict[str, str] | None = None,
        request_id: str = "",
    ) -> NoReturn:
        """Every refused write is audited; of reads, listings and stats only
        the refusals in AUDITED_READ_REASONS (a missing file is not)."""
        refuse(
            self._audit,
            self._tenant.name,
            method,
            failure,
            labels or {},
            request_id,
            path=path,
            audited=method == "WriteFile" or failure.reason in AUDITED_READ_REASONS,
        )


async def _run_to_end(operation: Awaitable[T]) -> T:
    """Await `operation` in its own task, shielded: if the RPC is cancelled,
    the operation still finishes (and releases the worker) on its own."""
    task: asyncio.Task[T] = asyncio.ensure_future(operation)
    task.add_done_callback(_retrieve)
    return await asyncio.shield(task)


def _retrieve(task: asyncio.Task[Any]) -> None:
    # the caller of a shielded task may be gone: its failure is already
    # answered (or nobody is left to answer), not an "exception never retrieved"
    if not task.cancelled():
        task.exception()
