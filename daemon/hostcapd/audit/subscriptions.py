"""Subscriptions to the records as they are written (for ``audit tail -f``)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any


class AuditSubscriptionLagged(Exception):
    """A subscriber fell too far behind; records were not delivered to it."""


class AuditSubscription:
    """An async iterator of the records written after `AuditLog.subscribe`.

    Ends when the log closes; raises `AuditSubscriptionLagged` once the
    records queued for it passed its bound (it never slows the writer)."""

    _END: Any = object()

    def __init__(self, subscribers: set[AuditSubscription], max_queue: int) -> None:
        #: The log's subscribers (AuditLog._subscribers), which `close` leaves.
        self._subscribers = subscribers
        self._queue: asyncio.Queue[Any] = asyncio.Queue(max_queue)
        self._lagged = False
        self._ended = False

    def _push(self, record: dict[str, Any]) -> None:
        if self._lagged or self._ended:
            return
        try:
            self._queue.put_nowait(record)
        except asyncio.QueueFull:
            self._lagged = True

    def _end(self) -> None:
        self._ended = True
        with contextlib.suppress(asyncio.QueueFull):
            self._queue.put_nowait(self._END)

    def __aiter__(self) -> AsyncIterator[dict[str, Any]]:
        return self

    async def __anext__(self) -> dict[str, Any]:
        if self._queue.empty():
            if self._lagged:
                raise AuditSubscriptionLagged("audit subscriber fell behind; records were dropped")
            if self._ended:
                raise StopAsyncIteration
        item = await self._queue.get()
        if item is self._END:
            raise StopAsyncIteration
        return item  # type: ignore[no-any-return]

    def close(self) -> None:
        """Stop receiving records."""
        self._subscribers.discard(self)
        self._end()
