"""The deferred queue: records that found no room (ENOSPC, EIO on write),
written as soon as the log takes a record again."""

from __future__ import annotations

import asyncio
import collections
import contextlib
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from hostcapd.audit.errors import AuditUnavailable

#: Records kept while the log finds no room (beyond this the oldest go: the
#: job ledger closes their spawns at the next start), and how often they are
#: retried when nothing else is written.
MAX_DEFERRED = 10_000
DEFERRED_RETRY_S = 1.0


class DeferredQueue:
    """The deferred half of `AuditLog` (whose `__init__` sets these)."""

    _failure: str | None
    _closed: bool
    #: Records that found no room, oldest first: see `write_or_defer`.
    _deferred: collections.deque[tuple[str, dict[str, Any]]]
    _retry_handle: asyncio.TimerHandle | None

    if TYPE_CHECKING:

        def write(self, event: str, **fields: Any) -> dict[str, Any]: ...

        def write_built(self, event: str, body: Mapping[str, Any]) -> dict[str, Any]: ...

        def _write_record(
            self,
            event: str,
            fields: Mapping[str, Any],
            *,
            flushing: bool = False,
            built: bool = False,
        ) -> dict[str, Any]: ...

        def _schedule_batch_sync(self) -> None: ...

    def write_or_defer(self, event: str, **fields: Any) -> bool:
        """`write`, or, when the record finds no room, keep it and write it
        (with its fields as given, the time of its writing) before the next
        record the log takes, or on a retry every `DEFERRED_RETRY_S`. For a
        spawn's exit: its true outcome survives a full volume that is freed
        while the daemon runs (else the ledger closes it at the next start).
        False when deferred; raises `AuditUnavailable` once the log failed
        closed (an fsync failed: nothing more is written)."""
        return self._write_or_defer(event, fields, built=False)

    def write_built_or_defer(self, event: str, body: Mapping[str, Any]) -> bool:
        """`write_or_defer` for built fields (`AuditLog.write_built`); kept,
        they are written later as any fields are."""
        return self._write_or_defer(event, body, built=True)

    def _write_or_defer(self, event: str, fields: Mapping[str, Any], *, built: bool) -> bool:
        try:
            if built:
                self.write_built(event, fields)
            else:
                self.write(event, **fields)
            return True
        except AuditUnavailable:
            if self._failure is not None or self._closed:
                raise
        if len(self._deferred) >= MAX_DEFERRED:
            self._deferred.popleft()  # the ledger closes that spawn at the next start
        self._deferred.append((event, dict(fields)))
        self._arm_retry()
        return False

    @property
    def deferred(self) -> int:
        """Records waiting for room (monitoring)."""
        return len(self._deferred)

    def _flush_deferred(self) -> None:
        """Write the deferred records, oldest first; raises `AuditUnavailable`
        (keeping the rest) if one still finds no room."""
        while self._deferred:
            event, fields = self._deferred[0]
            self._write_record(event, fields, flushing=True)
            self._deferred.popleft()

    def _arm_retry(self) -> None:
        if self._retry_handle is not None or not self._deferred:
            return
        with contextlib.suppress(RuntimeError):  # no loop: the next write retries
            self._retry_handle = asyncio.get_running_loop().call_later(
                DEFERRED_RETRY_S, self._retry_deferred
            )

    def _retry_deferred(self) -> None:
        self._retry_handle = None
        if self._closed or self._failure is not None:
            return
        try:
            self._flush_deferred()
        except AuditUnavailable:
            pass
        else:
            self._schedule_batch_sync()
        self._arm_retry()
