"""A hostile egress proxy, for the attack tests.

    python -I hostile_proxy.py FD

The daemon starts it in place of `hostcapd.egress` (a test sets
`EgressProxy.command`): the same channel, bound to the same tenant. It
says Ready without confining itself, then lies: for each spawn it is
given it reports a connection of that spawn and one of a spawn it was
never given (another tenant's, say), and sends a datagram that is no
message at all. The daemon must record only the first.
"""

from __future__ import annotations

import os
import socket
import sys

from hostcapd.egress import messages


def report(spawn_id: str, host: str) -> bytes:
    return messages.encode(
        messages.Connection(
            spawn_id=spawn_id, protocol="connect", host=host, port=443, address="192.0.2.1",
            rule="forged", allowed=True, reason="forged", bytes_up=1, bytes_down=1,
            duration_ms=1,
        )
    )  # fmt: skip


def main() -> int:
    channel = socket.socket(fileno=int(sys.argv[1]))
    data, fds = messages.receive(channel)
    channel.send(messages.encode(messages.Ready([("uid_drop", True, "lie")])))
    while True:
        data, fds = messages.receive(channel)
        if not data:
            return 0
        for fd in fds:
            os.close(fd)
        message = messages.decode_to_proxy(data)
        if isinstance(message, messages.Listen):
            channel.send(messages.encode(messages.Listening(message.spawn_id)))
            channel.send(report("not-a-spawn-of-this-tenant", "forged.example"))
            channel.send(b"\xc1 not msgpack")
            channel.send(report(message.spawn_id, "own.example"))


if __name__ == "__main__":
    sys.exit(main())
