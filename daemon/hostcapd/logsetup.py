"""The daemon's log lines on stderr: one line per record, in either format.

- `text` (the default): `hostcapd LEVEL logger: message`, with a timestamp
  first unless stderr is the journal (which stamps every line itself);
- `json`: one object per line, `{"time", "level", "logger", "message"}` and,
  where the record has them, `tenant`, `spawn_id`, `reason`, ... as fields
  (`log.info(..., extra=fields(tenant=..., spawn_id=...))`).

A record never spans lines: a message or a traceback with newlines is
joined with " | " in text (JSON escapes them). When stderr is the journal
every line starts with its syslog priority (`<3>` for an error, as
sd-daemon(3) describes), so `journalctl -p err` finds the errors.

systemd puts `JOURNAL_STREAM=<dev>:<inode>` in the environment of a service
whose stderr it connected to the journal; stderr is the journal exactly when
its fd still is that file (a redirect in between gives another one).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import sys
import threading
import time
from typing import IO, Any, TextIO

JOURNAL_FORMAT = "hostcapd %(levelname)s %(name)s: %(message)s"
STAMPED_FORMAT = "%(asctime)s hostcapd %(levelname)s %(name)s: %(message)s"
#: What --log-level accepts.
LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
#: What --log-format accepts.
FORMATS = ("text", "json")
#: Structured fields a record may carry (`extra=`), in the order JSON gives them.
FIELDS = ("tenant", "spawn_id", "reason", "request_id", "method", "spawns", "suppressed")
#: sd-daemon(3) priority prefixes.
_PRIORITY = {
    logging.CRITICAL: 2,
    logging.ERROR: 3,
    logging.WARNING: 4,
    logging.INFO: 6,
    logging.DEBUG: 7,
}


def fields(**values: Any) -> dict[str, Any]:
    """`extra=` for a record with structured fields (those not empty)."""
    return {k: v for k, v in values.items() if v not in (None, "")}


def stderr_is_journal(stream: TextIO | None = None, environ: dict[str, str] | None = None) -> bool:
    value = (os.environ if environ is None else environ).get("JOURNAL_STREAM", "")
    dev, _, inode = value.partition(":")
    if not (dev.isdigit() and inode.isdigit()):
        return False
    try:
        st = os.fstat((stream or sys.stderr).fileno())
    except (OSError, ValueError):
        return False
    return (st.st_dev, st.st_ino) == (int(dev), int(inode))


def _stamp(created: float, msecs: float) -> str:
    """RFC 3339 UTC with milliseconds, like the audit log's times."""
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(created)) + f".{int(msecs):03d}Z"


def one_line(text: str) -> str:
    return " | ".join(part.strip() for part in text.splitlines() if part.strip())


def _priority(record: logging.LogRecord) -> str:
    level = max((lvl for lvl in _PRIORITY if lvl <= record.levelno), default=logging.DEBUG)
    return f"<{_PRIORITY[level]}>"


class TextFormatter(logging.Formatter):
    """`[stamp ]hostcapd LEVEL logger: message`, on one line."""

    def __init__(self, journal: bool) -> None:
        super().__init__(JOURNAL_FORMAT if journal else STAMPED_FORMAT)
        self.journal = journal

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:
        return _stamp(record.created, record.msecs)

    def format(self, record: logging.LogRecord) -> str:
        line = one_line(super().format(record))
        return _priority(record) + line if self.journal else line


class JsonFormatter(logging.Formatter):
    """One JSON object per record."""

    def __init__(self, journal: bool) -> None:
        super().__init__()
        self.journal = journal

    def format(self, record: logging.LogRecord) -> str:
        body: dict[str, Any] = {
            "time": _stamp(record.created, record.msecs),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for name in FIELDS:
            value = getattr(record, name, None)
            if value not in (None, ""):
                body[name] = value
        if record.exc_info:
            body["exception"] = self.formatException(record.exc_info)
        line = json.dumps(body, ensure_ascii=False, default=str)
        return _priority(record) + line if self.journal else line


def configure(level: str, log_format: str = "text") -> None:
    """The root logger to stderr in `log_format`, stamped unless stderr is
    the journal (then with priority prefixes)."""
    journal = stderr_is_journal()
    handler = logging.StreamHandler(sys.stderr)
    formatter = JsonFormatter(journal) if log_format == "json" else TextFormatter(journal)
    handler.setFormatter(formatter)
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    sys.excepthook = _uncaught  # a crash's traceback is one record too


def _uncaught(kind: type[BaseException], value: BaseException, tb: Any) -> None:
    if issubclass(kind, KeyboardInterrupt):
        sys.__excepthook__(kind, value, tb)
        return
    logging.getLogger("hostcapd").critical("uncaught exception", exc_info=(kind, value, tb))


#: The most of a child's stderr one record holds.
STDERR_CHUNK = 16384
#: What a child writes within this many seconds of its first line is one
#: record (a traceback is written line by line).
STDERR_QUIET_S = 0.2


def relay_stderr(
    stream: IO[bytes], logger: logging.Logger, prefix: str, extra: dict[str, Any]
) -> None:
    """Log what a child process (a front-end) writes to its stderr pipe, on
    the running loop: what comes within STDERR_QUIET_S is one WARNING
    record, its lines joined, so a traceback stays one record in either
    format. Closes the pipe at EOF."""
    loop = asyncio.get_running_loop()
    fd = stream.fileno()
    os.set_blocking(fd, False)
    pending = bytearray()
    timer: list[asyncio.TimerHandle] = []

    def flush() -> None:
        for handle in timer:
            handle.cancel()
        timer.clear()
        text = pending.decode(errors="replace").strip()
        pending.clear()
        if text:
            logger.warning("%s%s", prefix, text, extra=extra)

    def readable() -> None:
        try:
            data = os.read(fd, STDERR_CHUNK)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:
            loop.remove_reader(fd)
            stream.close()
            flush()
            return
        pending.extend(data)
        if len(pending) >= STDERR_CHUNK:
            flush()
        elif not timer:
            timer.append(loop.call_later(STDERR_QUIET_S, flush))

    loop.add_reader(fd, readable)


class RateLimited:
    """At most one line per `interval` seconds for each key (a tenant and a
    reason); the next line says how many were left out meanwhile."""

    def __init__(self, interval: float = 10.0, keys: int = 4096) -> None:
        self.interval = interval
        self.keys = keys
        self._last: dict[tuple[str, ...], tuple[float, int]] = {}
        self._lock = threading.Lock()

    def allow(self, *key: str) -> int | None:
        """None: leave this one out; else how many were left out before it."""
        now = time.monotonic()
        with self._lock:
            last, skipped = self._last.get(key, (float("-inf"), 0))
            if now - last < self.interval:
                self._last[key] = (last, skipped + 1)
                return None
            if len(self._last) >= self.keys and key not in self._last:
                self._last.clear()  # bounded: a flood of keys forgets the old ones
            self._last[key] = (now, 0)
            return skipped
