"""A spawn without stdin reads /dev/null: one open file description per
tenant, kept by the root and lent to each order (hostcapd.process.launch,
`null_stdin`). Its status flags are the description's, which a child can
set: another tenant's children never see them."""

from __future__ import annotations

from collections.abc import Callable

from support.daemon import Daemon
from support.process import Client, outcome

#: Sets O_NONBLOCK on its stdin (argv[1] == "set"), then prints whether
#: stdin has it, and what a read of it gives.
FLAGS = r"""
import fcntl, os, sys
if sys.argv[1] == "set":
    fcntl.fcntl(0, fcntl.F_SETFL, fcntl.fcntl(0, fcntl.F_GETFL) | os.O_NONBLOCK)
print(bool(fcntl.fcntl(0, fcntl.F_GETFL) & os.O_NONBLOCK), os.read(0, 16))
"""


async def test_a_childs_stdin_flags_never_reach_another_tenants_children(
    start_daemon: Callable[..., Daemon],
) -> None:
    daemon = start_daemon(tenants={"alpha": {}, "beta": {}})
    alpha, beta = Client(daemon.socket_of("alpha")), Client(daemon.socket_of("beta"))
    try:
        for client in (alpha, beta):  # each tenant's kept /dev/null opened
            first = await client.run("python3", "-c", FLAGS, "read")
            assert outcome(first) == "EXITED", first.exited.message
            assert first.stdout == b"False b''\n"
        marked = await alpha.run("python3", "-c", FLAGS, "set")
        assert outcome(marked) == "EXITED", marked.exited.message
        assert marked.stdout == b"True b''\n"
        for _ in range(3):  # fresh and warm ones alike
            other = await beta.run("python3", "-c", FLAGS, "read")
            assert outcome(other) == "EXITED", other.exited.message
            assert other.stdout == b"False b''\n"
        # Within alpha the description is shared: its stdin is still /dev/null.
        again = await alpha.run("python3", "-c", FLAGS, "read")
        assert outcome(again) == "EXITED", again.exited.message
        assert again.stdout.endswith(b" b''\n")
    finally:
        await alpha.close()
        await beta.close()
