"""The init's exit record: what the command itself did.

A spawn with a pid namespace runs a minimal init as its pid 1 (see
`init_main` in childsetup_c/init.c) and the command as its pid 2. A pid 1 cannot
end itself by a signal (the kernel drops a signal it sends itself), so the
status the spawner reaps is the init's, not always the command's. The init
writes the command's wait status and rusage on its report pipe, in one
write, right before it exits; the spawner reads it once it has reaped the
init (so it is complete by then, or absent: the init was SIGKILLed, and then
the init's own status, SIGKILL, is what ended the command too).

The layout is childsetup_c/init.c's: nine int64 in the machine's byte order,
{magic, status, utime_us, stime_us, maxrss_kib, nvcsw, nivcsw, inblock, oublock}.
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass

from hostcapd import _childsetup  # type: ignore[attr-defined]

EXIT_MAGIC = 0x31454348  # "HCE1"
_RECORD = struct.Struct("=9q")


@dataclass(frozen=True)
class CommandExit:
    """The command's own wait status and rusage, as the init reaped it."""

    status: int
    utime: float
    stime: float
    maxrss_kib: int
    nvcsw: int
    nivcsw: int
    inblock: int
    oublock: int


def parse(data: bytes) -> CommandExit | None:
    """The record in `data`, or None if it is not exactly one valid record."""
    if len(data) != _RECORD.size:
        return None
    magic, status, utime, stime, maxrss, nvcsw, nivcsw, inblock, oublock = _RECORD.unpack(data)
    if magic != EXIT_MAGIC or not 0 <= status <= 0xFFFF or min(utime, stime, maxrss) < 0:
        return None
    return CommandExit(status, utime / 1e6, stime / 1e6, maxrss, nvcsw, nivcsw, inblock, oublock)


def read_and_close(fd: int) -> CommandExit | None:
    """Read the exit record from a reaped init's report pipe, and close it."""
    try:
        os.set_blocking(fd, False)
        data = os.read(fd, _RECORD.size + 1)
    except OSError:
        data = b""
    finally:
        os.close(fd)
    return parse(data)


_SETUP = struct.Struct("=3q")


def _setup_record(data: bytes, done_magic: int, missing: str) -> tuple[str, int] | None:
    """A {magic, step, errno} record: None when it is {done_magic, "none"},
    else (the step that failed, errno); anything else (the child died before
    it said) is step `missing`."""
    if len(data) == _SETUP.size:
        magic, step, err = _SETUP.unpack(data)
        if magic == done_magic and step == 0:
            return None
        if magic == _childsetup.INIT_SETUP_MAGIC and 0 < step < len(_childsetup.STEPS):
            return _childsetup.STEPS[step], err
    return missing, 0


def parse_ready(data: bytes) -> tuple[str, int] | None:
    """A warm child's first record: None when it is ready (waits for its
    request), else (the step that failed, errno); none (it died before it
    said) is step "warm"."""
    return _setup_record(data, _childsetup.WARM_MAGIC, "warm")


def parse_exec(data: bytes) -> tuple[str, int] | None:
    """The set-up record of a warm child given its request: None once its
    command exec'd, else (the step that failed, errno); none at all (it
    died before it said) is step "init"."""
    return _setup_record(data, _childsetup.INIT_SETUP_MAGIC, "init")
