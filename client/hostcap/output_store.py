"""Run-scoped output stores: where over-ceiling results and binary content go.

A store belongs to one run and is swept when the run ends (`sweep()`, or
leaving its `async with`). Handles are opaque (`hostcap-spill:<run>/<n>`):
they name no path of this machine, so a marker line shown to the model
leaks nothing about the engine's file system.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import shutil
import tempfile
import uuid
from pathlib import Path
from types import TracebackType
from typing import Literal

from hostcap.bounding import DEFAULT_TOOL_RESULT_LIMITS, ToolResultLimits
from hostcap.host import MediaHandle, SpilledResult

#: Default ceiling of everything one run's store may hold.
DEFAULT_MAX_TOTAL_BYTES = 256 * 1024 * 1024


StoreRefusal = Literal["full", "swept", "unknown_handle", "too_large", "cancelled"]

#: What the marker line says for each refusal of a spill.
NOT_KEPT: dict[str, str] = {
    "full": "output store full",
    "swept": "output store swept: its run has ended",
    "too_large": "larger than the spill limit",
    "cancelled": "cancelled",
    "unknown_handle": "output store refused it",
}


class OutputStoreError(Exception):
    """The store cannot take or give the content; `kind` says why (swept,
    full, too large for one spill, cancelled, unknown handle)."""

    def __init__(self, message: str, *, kind: StoreRefusal) -> None:
        super().__init__(message)
        self.kind: StoreRefusal = kind

    @property
    def not_kept(self) -> str:
        """The refusal as the bounding marker line words it."""
        return NOT_KEPT.get(self.kind, "output store refused it")


class _StoreBase:
    def __init__(self, run_id: str | None, max_total_bytes: int) -> None:
        if max_total_bytes <= 0:
            raise ValueError("max_total_bytes must be positive")
        self.run_id = run_id or uuid.uuid4().hex[:12]
        self.max_total_bytes = max_total_bytes
        self._used = 0
        self._count = 0
        self._swept = False
        self._lock = asyncio.Lock()
        self._media: dict[str, MediaHandle] = {}

    def _next_handle(self, size: int, kind: str) -> str:
        if self._swept:
            raise OutputStoreError("the output store was swept: its run has ended", kind="swept")
        if self._used + size > self.max_total_bytes:
            raise OutputStoreError("the output store is full", kind="full")
        self._used += size
        self._count += 1
        return f"hostcap-{kind}:{self.run_id}/{self._count:04d}"

    @property
    def swept(self) -> bool:
        return self._swept

    async def media(self, handle: str) -> MediaHandle:
        """The media this store holds under `handle`: a spill handle, another
        run's handle or a swept one is refused."""
        found = None if self._swept else self._media.get(handle)
        if found is None:
            raise OutputStoreError("no such media in this run's store", kind="unknown_handle")
        return found

    @staticmethod
    def _admit_spill(size: int, limits: ToolResultLimits, signal: asyncio.Event | None) -> None:
        if signal is not None and signal.is_set():
            raise OutputStoreError("the spill was cancelled", kind="cancelled")
        if limits.max_spill_bytes is not None and size > limits.max_spill_bytes:
            raise OutputStoreError("the result is larger than the spill limit", kind="too_large")


class MemoryOutputStore(_StoreBase):
    """An output store held in memory."""

    def __init__(
        self, run_id: str | None = None, *, max_total_bytes: int = DEFAULT_MAX_TOTAL_BYTES
    ) -> None:
        super().__init__(run_id, max_total_bytes)
        self._items: dict[str, bytes] = {}

    async def spill(
        self,
        text: str,
        limits: ToolResultLimits = DEFAULT_TOOL_RESULT_LIMITS,
        signal: asyncio.Event | None = None,
    ) -> SpilledResult:
        data = text.encode()
        self._admit_spill(len(data), limits, signal)
        handle = self._next_handle(len(data), "spill")
        self._items[handle] = data
        return SpilledResult(handle=handle, byte_length=len(data))

    async def store_media(self, data: bytes, media_type: str) -> MediaHandle:
        handle = self._next_handle(len(data), "media")
        self._items[handle] = bytes(data)
        media = MediaHandle(
            handle=handle,
            media_type=media_type,
            byte_length=len(data),
            sha256=hashlib.sha256(data).hexdigest(),
        )
        self._media[handle] = media
        return media

    async def open(self, handle: str) -> bytes:
        try:
            return self._items[handle]
        except KeyError:
            raise OutputStoreError(
                "unknown or swept output handle", kind="unknown_handle"
            ) from None

    async def sweep(self) -> None:
        self._items.clear()
        self._media.clear()
        self._swept = True

    def __len__(self) -> int:
        return len(self._items)


class LocalOutputStore(_StoreBase):
    """An output store in a private temporary directory (mode 0700, files
    0600), removed by `sweep()`."""

    def __init__(
        self,
        run_id: str | None = None,
        *,
        max_total_bytes: int = DEFAULT_MAX_TOTAL_BYTES,
        parent_dir: str | os.PathLike[str] | None = None,
    ) -> None:
        super().__init__(run_id, max_total_bytes)
        self._dir = Path(tempfile.mkdtemp(prefix=f"hostcap-run-{self.run_id}-", dir=parent_dir))
        self._files: dict[str, Path] = {}

    @property
    def directory(self) -> Path:
        """Where this run's content lives until the sweep (for the engine, never the model)."""
        return self._dir

    async def _put(self, data: bytes, kind: str) -> str:
        async with self._lock:
            handle = self._next_handle(len(data), kind)
            path = self._dir / f"{self._count:04d}.{kind}"
            try:
                await asyncio.to_thread(_write_private, path, data)
            except BaseException:
                self._used -= len(data)
                raise
            self._files[handle] = path
            return handle

    async def spill(
        self,
        text: str,
        limits: ToolResultLimits = DEFAULT_TOOL_RESULT_LIMITS,
        signal: asyncio.Event | None = None,
    ) -> SpilledResult:
        data = text.encode()
        self._admit_spill(len(data), limits, signal)
        return SpilledResult(handle=await self._put(data, "spill"), byte_length=len(data))

    async def store_media(self, data: bytes, media_type: str) -> MediaHandle:
        handle = await self._put(bytes(data), "media")
        media = MediaHandle(
            handle=handle,
            media_type=media_type,
            byte_length=len(data),
            sha256=hashlib.sha256(data).hexdigest(),
        )
        self._media[handle] = media
        return media

    async def open(self, handle: str) -> bytes:
        path = self._files.get(handle)
        if path is None or self._swept:
            raise OutputStoreError("unknown or swept output handle", kind="unknown_handle")
        return await asyncio.to_thread(path.read_bytes)

    async def sweep(self) -> None:
        async with self._lock:
            self._swept = True
            self._files.clear()
            self._media.clear()
            await asyncio.to_thread(shutil.rmtree, self._dir, True)

    async def __aenter__(self) -> LocalOutputStore:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.sweep()


def _write_private(path: Path, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    try:
        with os.fdopen(fd, "wb") as file:
            file.write(data)
    except BaseException:
        path.unlink(missing_ok=True)
        raise
