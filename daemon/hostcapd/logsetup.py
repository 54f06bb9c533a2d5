"""The daemon's log lines on stderr: with a timestamp unless stderr is the
journal (which stamps every line itself).

systemd puts `JOURNAL_STREAM=<dev>:<inode>` in the environment of a service
whose stderr it connected to the journal; stderr is the journal exactly when
its fd still is that file (a redirect in between gives another one).
"""

from __future__ import annotations

import logging
import os
import sys
import time
from typing import TextIO

JOURNAL_FORMAT = "hostcapd %(levelname)s %(name)s: %(message)s"
STAMPED_FORMAT = "%(asctime)s hostcapd %(levelname)s %(name)s: %(message)s"


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


class _UTCFormatter(logging.Formatter):
    """RFC 3339 UTC with milliseconds, like the audit log's times."""

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
        return f"{stamp}.{int(record.msecs):03d}Z"


def configure(level: str) -> None:
    """The root logger to stderr, stamped unless stderr is the journal."""
    handler = logging.StreamHandler(sys.stderr)
    if stderr_is_journal():
        handler.setFormatter(logging.Formatter(JOURNAL_FORMAT))
    else:
        handler.setFormatter(_UTCFormatter(STAMPED_FORMAT))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
