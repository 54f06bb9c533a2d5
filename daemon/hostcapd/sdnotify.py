"""The service manager's notification protocol (sd_notify), standard library only.

    sdnotify.ready()                      # READY=1: every tenant socket is served
    sdnotify.status("serving 3 tenants")  # STATUS=... (one line)
    sdnotify.reloading()                  # RELOADING=1 + MONOTONIC_USEC=...
    sdnotify.stopping()                   # STOPPING=1: draining
    async with asyncio.TaskGroup() as tg:
        tg.create_task(sdnotify.watchdog_loop())   # WATCHDOG=1 at half the interval

Each message is one datagram to the AF_UNIX socket named by $NOTIFY_SOCKET: a
path, or an abstract name written with a leading "@". When the variable is
unset (not run by systemd, or run without Type=notify) every call is a no-op
that returns False, in every mode, `--dev` included. systemd authenticates the
sender by the kernel-attached credentials, so with NotifyAccess=main only the
daemon's main process can change the unit's state; the spawner and children
never can (and children never see NOTIFY_SOCKET: their environment is built
from the tenant config, and the config refuses that name).
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import socket
import time

log = logging.getLogger(__name__)

#: systemd reads one notification into a buffer of this size and drops longer ones.
MAX_MESSAGE_BYTES = 4096
#: A STATUS= text is cut to this many characters (it is for humans: `systemctl status`).
MAX_STATUS_CHARS = 1024
#: How long one send may block when the manager's queue is full.
SEND_TIMEOUT_SECONDS = 5.0

_ASSIGNMENT = re.compile(r"[A-Z][A-Z0-9_]*=[^\n\0]*")


class NotifyError(Exception):
    """$NOTIFY_SOCKET or $WATCHDOG_USEC is set but unusable, a message is
    malformed, or the manager's socket refused it."""


def notify(state: str) -> bool:
    """Send `state` (newline-separated KEY=VALUE assignments) to the manager.

    Returns True when sent, False when $NOTIFY_SOCKET is unset. Raises
    NotifyError for a malformed state (nothing is sent), an unusable address,
    or a failed send.
    """
    message = _encode(state)
    address = _address(os.environ.get("NOTIFY_SOCKET"))
    if address is None:
        return False
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as sock:
        sock.settimeout(SEND_TIMEOUT_SECONDS)
        try:
            sock.sendto(message, address)
        except OSError as error:
            raise NotifyError(
                f"cannot notify the service manager at {_shown(address)}: {error}"
            ) from None
    return True


def ready() -> bool:
    """READY=1: start-up finished (systemd's `start` returns, dependents start)."""
    return notify("READY=1")


def stopping() -> bool:
    """STOPPING=1: shutting down; no new work is accepted."""
    return notify("STOPPING=1")


def reloading() -> bool:
    """RELOADING=1 with MONOTONIC_USEC, as systemd's reload protocol asks; send
    ready() when the new config is in force (or has been refused)."""
    usec = time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000
    return notify(f"RELOADING=1\nMONOTONIC_USEC={usec}")


def status(text: str) -> bool:
    """STATUS=text, shown by `systemctl status`. Line breaks become spaces (so a
    multi-line error can never smuggle in another assignment such as READY=1),
    NUL bytes are dropped, and the text is cut at MAX_STATUS_CHARS."""
    line = " ".join(text.replace("\0", "").split())[:MAX_STATUS_CHARS]
    return notify(f"STATUS={line}")


def watchdog_interval() -> float | None:
    """Seconds within which the manager expects WATCHDOG=1, or None when it
    does not ($WATCHDOG_USEC unset, or $WATCHDOG_PID names another process).

    Raises NotifyError when $WATCHDOG_USEC or $WATCHDOG_PID is not a positive
    integer.
    """
    usec = os.environ.get("WATCHDOG_USEC")
    if usec is None:
        return None
    pid = os.environ.get("WATCHDOG_PID")
    # The variables may have been inherited from a watched parent: they are
    # meant for the process they name.
    if pid is not None and _positive_int("WATCHDOG_PID", pid) != os.getpid():
        return None
    return _positive_int("WATCHDOG_USEC", usec) / 1_000_000


async def watchdog_loop() -> None:
    """Send WATCHDOG=1 at half the watchdog interval until cancelled; return at
    once when the manager asks for no watchdog.

    A failed send is logged and the loop goes on: the manager enforces its
    own deadline, and a daemon whose pings stop is restarted by it.
    """
    interval = watchdog_interval()
    if interval is None:
        return
    while True:
        try:
            notify("WATCHDOG=1")
        except NotifyError as error:
            log.warning("watchdog ping not delivered: %s", error)
        await asyncio.sleep(interval / 2)


def _encode(state: str) -> bytes:
    if not state:
        raise NotifyError("empty notification")
    for line in state.split("\n"):
        if not _ASSIGNMENT.fullmatch(line):
            raise NotifyError(f"notification line {line[:40]!r} is not KEY=VALUE")
    message = state.encode()
    if len(message) > MAX_MESSAGE_BYTES:
        raise NotifyError(f"notification of {len(message)} bytes exceeds {MAX_MESSAGE_BYTES}")
    return message


def _address(value: str | None) -> bytes | None:
    if not value:
        return None
    if value.startswith("@"):
        # Linux abstract namespace: sun_path starts with a NUL byte.
        return b"\0" + os.fsencode(value[1:])
    if value.startswith("/"):
        return os.fsencode(value)
    raise NotifyError(f"NOTIFY_SOCKET={value!r} is neither an absolute path nor an @abstract name")


def _shown(address: bytes) -> str:
    return "@" + os.fsdecode(address[1:]) if address.startswith(b"\0") else os.fsdecode(address)


def _positive_int(name: str, value: str) -> int:
    if not (value.isascii() and value.isdigit()) or int(value) <= 0:
        raise NotifyError(f"{name}={value!r} is not a positive integer")
    return int(value)
