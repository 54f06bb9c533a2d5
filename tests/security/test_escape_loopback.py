"""Loopback works inside a spawn's own network namespace (issue 30), and that
loopback is the spawn's alone: a spawn reaches neither a listener on the
host's loopback nor one in another spawn's namespace."""

from __future__ import annotations

import asyncio
import socket

from escape_attempts import SecurityHost, attack
from support.process import Client


async def test_host_loopback_listener_is_not_reached(alpha: Client) -> None:
    with (
        socket.create_server(("127.0.0.1", 0)) as server,
        socket.create_server(("::1", 0), family=socket.AF_INET6) as server6,
    ):
        port, port6 = server.getsockname()[1], server6.getsockname()[1]
        # Control: the listeners accept from the host.
        socket.create_connection(("127.0.0.1", port), timeout=5).close()
        socket.create_connection(("::1", port6), timeout=5).close()
        server.accept()[0].close()
        server6.accept()[0].close()
        server.settimeout(0.5)
        server6.settimeout(0.5)
        found = await attack(
            alpha,
            f"""
def connect(family, addr, port):
    s = socket.socket(family)
    s.settimeout(5)
    try:
        s.connect((addr, port))
    finally:
        s.close()
report(v4=attempt(connect, socket.AF_INET, "127.0.0.1", {port}),
       v6=attempt(connect, socket.AF_INET6, "::1", {port6}))
""",
        )
        for listener in (server, server6):
            try:
                peer = listener.accept()
                raise AssertionError(f"the sandbox reached the host's loopback: {peer!r}")
            except TimeoutError:
                pass
    # The spawn's own loopback has nothing on those ports.
    assert found == {"v4": "ECONNREFUSED", "v6": "ECONNREFUSED"}


async def test_another_spawns_listener_is_not_reached(alpha: Client, host: SecurityHost) -> None:
    """Spawn A listens on fixed ports and says so in the shared workspace; spawn
    B, of the same tenant, waits for that and tries to connect."""
    ready = host.workspace("alpha") / "loopback-listener-ready"
    ready.unlink(missing_ok=True)
    listener = asyncio.ensure_future(
        attack(
            alpha,
            f"""
import time
s4 = socket.create_server(("127.0.0.1", 47311))
s6 = socket.create_server(("::1", 47311), family=socket.AF_INET6)
s4.settimeout(0.2); s6.settimeout(0.2)
open({str(ready)!r}, "w").close()
got = []
deadline = time.monotonic() + 8
while time.monotonic() < deadline and not os.path.exists({str(ready)!r} + ".done"):
    for s in (s4, s6):
        try:
            got.append(str(s.accept()[1]))
        except (TimeoutError, socket.timeout):
            pass
report(accepted=got)
""",
        )
    )
    try:
        found = await attack(
            alpha,
            f"""
import time
deadline = time.monotonic() + 20
while not os.path.exists({str(ready)!r}) and time.monotonic() < deadline:
    time.sleep(0.05)
def connect(family, addr):
    s = socket.socket(family)
    s.settimeout(5)
    try:
        s.connect((addr, 47311))
    finally:
        s.close()
r = dict(ready=os.path.exists({str(ready)!r}),
         v4=attempt(connect, socket.AF_INET, "127.0.0.1"),
         v6=attempt(connect, socket.AF_INET6, "::1"))
open({str(ready)!r} + ".done", "w").close()
report(**r)
""",
        )
        served = await listener
    finally:
        listener.cancel()
    assert found == {"ready": True, "v4": "ECONNREFUSED", "v6": "ECONNREFUSED"}
    assert served == {"accepted": []}
