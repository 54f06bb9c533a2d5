"""A server and a client inside one spawn talk over loopback (issue 30): the
spawn's own network namespace behaves as any machine's loopback."""

from __future__ import annotations

import json

from support.process import Client, outcome

PROGRAM = r"""
import json, socket, threading
def serve(family, addr, kind):
    if kind == "tcp":
        srv = socket.create_server((addr, 0), family=family)
        port = srv.getsockname()[1]
        def run():
            conn, _ = srv.accept()
            conn.sendall(b"pong:" + conn.recv(16))
            conn.close()
        threading.Thread(target=run).start()
        with socket.create_connection((addr, port), timeout=5) as c:
            c.sendall(b"ping")
            return c.recv(32).decode()
    srv = socket.socket(family, socket.SOCK_DGRAM)
    srv.bind((addr, 0))
    cli = socket.socket(family, socket.SOCK_DGRAM)
    cli.settimeout(5)
    cli.sendto(b"ping", srv.getsockname()[:2])
    data, peer = srv.recvfrom(16)
    srv.sendto(b"pong:" + data, peer)
    return cli.recv(32).decode()
print(json.dumps({f"{kind}{v}": serve(fam, addr, kind)
                  for kind in ("tcp", "udp")
                  for v, fam, addr in ((4, socket.AF_INET, "127.0.0.1"), (6, socket.AF_INET6, "::1"))}))
"""


async def test_tcp_and_udp_over_loopback_in_one_spawn(client: Client) -> None:
    result = await client.run("python3", "-I", "-c", PROGRAM)
    assert outcome(result) == "EXITED", result.stderr.decode(errors="replace")
    assert result.exited.exit_code == 0, result.stderr.decode(errors="replace")
    assert json.loads(result.stdout) == dict.fromkeys(("tcp4", "tcp6", "udp4", "udp6"), "pong:ping")
