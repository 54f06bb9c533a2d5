"""A record's header stamps: its time and its event id, each made per record
(`hostcapd.audit.writer` puts them in every record it appends)."""

from __future__ import annotations

import functools
import os
import time


@functools.lru_cache(maxsize=2)
def _utc_second(seconds: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds))


def now() -> str:
    """The current UTC time as RFC 3339 with microseconds, ``2026-12-02T12:49:35.006190Z``.

    Records come many a second: the date and time of day are formatted once
    a second, only the microseconds each time."""
    seconds, nanoseconds = divmod(time.time_ns(), 1_000_000_000)
    return f"{_utc_second(seconds)}.{nanoseconds // 1000:06d}Z"


#: Random bytes drawn from the kernel 4 KiB at a time: an event id takes
#: 16 of them, so 256 records share one getrandom(2); so do the ids of the
#: spawns, warm children and cgroups made ahead (`hostcapd.process`), one
#: getrandom and one UUID object a spawn fewer. A forked child starts
#: without them (never the parent's next ids).
_RANDOM = bytearray()
os.register_at_fork(after_in_child=_RANDOM.clear)


def event_id() -> str:
    """A random (version 4) UUID as 32 hex digits, like ``uuid.uuid4().hex``,
    without building a UUID object."""
    if len(_RANDOM) < 16:
        _RANDOM[:] = os.urandom(4096)
    raw = _RANDOM[-16:]
    del _RANDOM[-16:]
    raw[6] = (raw[6] & 0x0F) | 0x40  # version 4
    raw[8] = (raw[8] & 0x3F) | 0x80  # the RFC 4122 variant
    return raw.hex()
