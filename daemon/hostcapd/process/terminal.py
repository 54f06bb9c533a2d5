"""A tty spawn's terminal, as the daemon holds it (decision 0031).

The child's set-up (childsetup_c/pty.c) mounts a devpts instance of the
spawn's own, opens its master and slave there, and sends the master back
on a socket pair this module makes; the daemon only reads and writes the
master (the line discipline is the kernel's, in the spawn's instance) and
sets its size:

    ours, childs = channel()              # childs goes with the spawn order
    master = receive_master(ours)         # once the command exec'd
    set_size(master, rows, cols)          # Resize: the kernel sends SIGWINCH
"""

from __future__ import annotations

import array
import fcntl
import os
import socket
import struct
import termios

from hostcapd.errors import Refusal

#: Each side of a terminal's size (hostcap.v1.TerminalSize).
MAX_SIDE = 1000
#: TERM when the request does not set it (through the tenant's allowlist).
DEFAULT_TERM = "xterm-256color"


def check_size(rows: int, cols: int) -> tuple[int, int]:
    if not (1 <= rows <= MAX_SIDE and 1 <= cols <= MAX_SIDE):
        raise Refusal(
            "LIMIT_INVALID",
            f"a terminal is 1..{MAX_SIDE} rows and columns, not {rows}x{cols}",
        )
    return rows, cols


def channel() -> tuple[socket.socket, int]:
    """A socket pair: ours (non-blocking), and the child's end as an fd."""
    ours, childs = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC)
    ours.setblocking(False)
    return ours, childs.detach()


def receive_master(ours: socket.socket) -> int:
    """The master the child sent (it did before it exec'd); OSError if none."""
    try:
        _, fds, _, _ = socket.recv_fds(ours, 16, 1)
    except BlockingIOError:
        raise OSError("the child sent no terminal") from None
    if len(fds) != 1:
        for fd in fds:
            os.close(fd)
        raise OSError("the child sent no terminal")
    fd = fds[0]
    os.set_inheritable(fd, False)
    os.set_blocking(fd, False)
    return fd


def set_size(master: int, rows: int, cols: int) -> None:
    """TIOCSWINSZ on the master: the foreground group gets SIGWINCH."""
    fcntl.ioctl(master, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))


def get_size(master: int) -> tuple[int, int]:
    buf = array.array("H", [0, 0, 0, 0])
    fcntl.ioctl(master, termios.TIOCGWINSZ, buf, True)
    return buf[0], buf[1]


def drain(master: int, first: bytes, limit: int) -> bytes:
    """`first` and what else the master holds now, up to `limit` bytes: a
    master gives at most its line discipline's 4 KiB a read, a pipe all it
    holds; one event for what piled up, not one per 4 KiB."""
    parts, size = [first], len(first)
    while size < limit:
        try:
            more = os.read(master, limit - size)
        except OSError:  # EAGAIN: nothing more now; EIO: the next read says so
            break
        if not more:
            break
        parts.append(more)
        size += len(more)
    return b"".join(parts) if len(parts) > 1 else first
