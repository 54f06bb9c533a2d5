"""Minimal audit writer: exec/exit lines, durable exec. Hardened by the audit issue."""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import os
import uuid
from typing import Any

from hostcapd.config import AuditSettings

SCHEMA = "hostcapd.audit/v1"


class AuditUnavailable(Exception):
    """The audit log cannot be written; the action it would record must not happen."""


class AuditLog:
    def __init__(self, settings: AuditSettings, fd: int, boot_id: str) -> None:
        self._settings = settings
        self._fd = fd
        self._boot_id = boot_id
        self._seq = 0
        self._lock = asyncio.Lock()

    @classmethod
    def open(cls, settings: AuditSettings, boot_id: str) -> AuditLog:
        try:
            settings.path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(settings.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC,
                         settings.file_mode)
        except OSError as error:
            raise AuditUnavailable(f"cannot open audit log {settings.path}: {error.strerror}") from None
        return cls(settings, fd, boot_id)

    def _line(self, event: str, fields: dict[str, Any]) -> bytes:
        self._seq += 1
        record = {
            "schema": SCHEMA,
            "event": event,
            "seq": self._seq,
            "time": dt.datetime.now(dt.UTC).isoformat(timespec="microseconds").replace("+00:00", "Z"),
            "event_id": uuid.uuid4().hex,
            "boot_id": self._boot_id,
            **fields,
        }
        return (json.dumps(record, separators=(",", ":"), sort_keys=True) + "\n").encode()

    def write(self, event: str, **fields: Any) -> None:
        try:
            os.write(self._fd, self._line(event, fields))
        except OSError as error:
            raise AuditUnavailable(f"audit write failed: {error.strerror}") from None

    async def write_durable(self, event: str, **fields: Any) -> None:
        line = self._line(event, fields)
        try:
            os.write(self._fd, line)
            await asyncio.get_running_loop().run_in_executor(None, os.fsync, self._fd)
        except OSError as error:
            raise AuditUnavailable(f"audit write failed: {error.strerror}") from None

    async def close(self) -> None:
        try:
            os.fsync(self._fd)
        finally:
            os.close(self._fd)
