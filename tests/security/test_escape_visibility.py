"""Sandboxed programs try to see and reach what lies outside the sandbox:
the daemon's environment and fds, host processes, the network, the daemon's
sockets. The `layers` tenant (no pid or net namespace) shows the next layer
holding where a namespace is off."""

from __future__ import annotations

import contextlib
import ctypes
import os
import socket
import threading
from collections.abc import Iterator

import pytest
from escape_attempts import SecurityHost, as_nobody, attack, host_sleeper
from support.daemon import connectable, environ
from support.process import Client


async def test_daemon_environment_is_not_visible(alpha: Client, host: SecurityHost) -> None:
    # Control: the canary really is in the daemon's environment.
    assert b"HOSTCAP_CANARY=daemon-secret-canary" in environ(host.daemon.pid)
    result = await alpha.run(
        "sh",
        "-c",
        f"env; cat /proc/1/environ /proc/self/environ /proc/{host.daemon.pid}/environ; "
        "cat /proc/$PPID/environ; true",
    )
    assert b"daemon-secret-canary" not in result.stdout + result.stderr
    assert b"HOSTCAP_CANARY" not in result.stdout + result.stderr


async def test_only_stdio_fds_are_open(alpha: Client) -> None:
    found = await attack(
        alpha,
        """
def is_open(fd):
    try:
        os.fstat(fd)
        return True
    except OSError:
        return False
listed = [int(f) for f in os.listdir("/proc/self/fd")]
report(fds=sorted(fd for fd in listed if is_open(fd)),
       probed=[fd for fd in range(3, 4096) if is_open(fd)])
""",
        stdin=b"",
    )
    assert found == {"fds": [0, 1, 2], "probed": []}


async def test_host_processes_are_not_visible(alpha: Client, host: SecurityHost) -> None:
    with host_sleeper() as sleeper:
        found = await attack(
            alpha,
            f"""
pids = sorted(int(p) for p in os.listdir("/proc") if p.isdigit())
report(pids=pids, me=os.getpid(),
       sleeper=os.path.exists("/proc/{sleeper.pid}"),
       daemon=os.path.exists("/proc/{host.daemon.pid}"),
       host_init_cmdline=open("/proc/1/cmdline", "rb").read().decode(errors="replace"))
""",
        )
    # The sandbox's own pid namespace: its init is pid 1, the command pid 2,
    # nothing else; the init's command line names it, not the daemon's.
    assert found["me"] == 2 and found["pids"] == [1, 2]
    assert (found["sleeper"], found["daemon"]) == (False, False)
    assert found["host_init_cmdline"].rstrip("\0") == "hostcap-init"


@pytest.mark.parametrize("tenant", ["alpha", "layers"])
async def test_a_process_outside_cannot_be_signalled(
    tenant: str, alpha: Client, layers: Client, host: SecurityHost
) -> None:
    client = {"alpha": alpha, "layers": layers}[tenant]
    with host_sleeper() as sleeper:
        found = await attack(
            client,
            f"""
import signal, subprocess
child = subprocess.Popen(["sleep", "30"])
own = attempt(os.kill, child.pid, signal.SIGTERM)
child.wait()
report(own=own,
       sleeper=attempt(os.kill, {sleeper.pid}, signal.SIGKILL),
       sleeper_group=attempt(os.killpg, {sleeper.pid}, signal.SIGKILL),
       daemon=attempt(os.kill, {host.daemon.pid}, signal.SIGKILL),
       # Everyone the caller may signal (SIGCONT: harmless if it got through).
       everyone=attempt(os.kill, -1, signal.SIGCONT))
""",
        )
        # Control: signals inside the sandbox work; the host process is untouched.
        assert found.pop("own") == "ok"
        assert sleeper.poll() is None
        sleeper.terminate()
        heard = sleeper.communicate(timeout=10)[0]
    assert heard == "", f"the host process received a signal from the sandbox: {heard!r}"
    assert host.daemon.proc is not None and host.daemon.proc.poll() is None
    everyone = found.pop("everyone")
    if tenant == "alpha":
        # Its own pid namespace: no outside pid names a process there.
        assert found == {"sleeper": "ESRCH", "sleeper_group": "ESRCH", "daemon": "ESRCH"}
        assert everyone == "ESRCH"  # no process in its namespace but itself
    else:
        # The host's pid namespace, same uid: landlock's signal scope refuses.
        # (kill(-1) reports success even when every target refused: what
        # counts is that the sleeper heard nothing.)
        assert found == {"sleeper": "EPERM", "sleeper_group": "EPERM", "daemon": "EPERM"}


@contextlib.contextmanager
def tcp_listener() -> Iterator[tuple[int, list[str]]]:
    """A loopback TCP listener on the host; yields (port, peers it accepted)."""
    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(0.2)
    accepted: list[str] = []
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, peer = server.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            accepted.append(f"{peer[0]}:{peer[1]}")
            conn.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield server.getsockname()[1], accepted
    finally:
        stop.set()
        thread.join()
        server.close()


def host_addresses() -> list[str]:
    """The host's non-loopback IPv4 addresses (to try those too)."""
    with contextlib.suppress(OSError), socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.connect(("192.0.2.1", 9))  # no packet is sent; picks the routed source address
        return [s.getsockname()[0]]
    return []


@pytest.mark.parametrize("tenant", ["alpha", "layers"])
async def test_tcp_to_a_host_listener_fails(tenant: str, alpha: Client, layers: Client) -> None:
    client = {"alpha": alpha, "layers": layers}[tenant]
    with tcp_listener() as (port, accepted):
        # Control: the listener does accept from the host.
        socket.create_connection(("127.0.0.1", port), timeout=5).close()
        addresses = ["127.0.0.1", *host_addresses()]
        found = await attack(
            client,
            f"""
def connect(addr):
    s = socket.socket()
    s.settimeout(5)
    try:
        s.connect((addr, {port}))
    finally:
        s.close()
report(**{{addr: attempt(connect, addr) for addr in {addresses!r}}})
""",
        )
        for _ in range(10):  # let the accept loop notice anything in flight
            threading.Event().wait(0.05)
        assert len(accepted) == 1, accepted
    if tenant == "layers":
        # No net namespace: landlock's TCP rules refuse every connect.
        assert found == dict.fromkeys(found, "EACCES")
    else:
        # Its own net namespace: its loopback has no listener there, and
        # nothing routes out (test_escape_loopback.py has more).
        assert found.pop("127.0.0.1") == "ECONNREFUSED"
        assert found == dict.fromkeys(found, "ENETUNREACH")


async def test_udp_to_a_host_listener_never_arrives(alpha: Client) -> None:
    receiver = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    receiver.bind(("0.0.0.0", 0))
    receiver.settimeout(0.5)
    port = receiver.getsockname()[1]
    addresses = ["127.0.0.1", *host_addresses()]
    try:
        # Control: a datagram from the host arrives.
        socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b"control", ("127.0.0.1", port))
        assert receiver.recv(64) == b"control"
        found = await attack(
            alpha,
            f"""
def send(addr):
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.sendto(b"from the sandbox", (addr, {port}))
report(**{{addr: attempt(send, addr) for addr in {addresses!r}}})
""",
        )
        with contextlib.suppress(TimeoutError):
            leaked = receiver.recv(64)
            raise AssertionError(f"a datagram from the sandbox arrived: {leaked!r}")
    finally:
        receiver.close()
    # The sandbox's own loopback takes the datagram to no one; nothing else routes.
    assert found["127.0.0.1"] == "ok"
    assert all(found[a] == "ENETUNREACH" for a in addresses[1:]), found


async def test_tcp_bind_is_refused_without_a_net_namespace(layers: Client) -> None:
    found = await attack(
        layers,
        """
def bind(port):
    s = socket.socket()
    try:
        s.bind(("127.0.0.1", port))
        s.listen()
    finally:
        s.close()
report(bind=attempt(bind, 0), bind_port=attempt(bind, 47123))
""",
    )
    assert found == {"bind": "EACCES", "bind_port": "EACCES"}


@pytest.mark.parametrize(("tenant", "refusal"), [("alpha", "ECONNREFUSED"), ("layers", "EPERM")])
async def test_abstract_unix_socket_outside_cannot_be_reached(
    tenant: str, refusal: str, alpha: Client, layers: Client, marker: str
) -> None:
    client = {"alpha": alpha, "layers": layers}[tenant]
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(f"\0{marker}")
    server.listen()
    try:
        found = await attack(
            client,
            f"""
def connect():
    s = socket.socket(socket.AF_UNIX)
    try:
        s.connect("\\0{marker}")
    finally:
        s.close()
report(connect=attempt(connect))
""",
        )
        # Control: the listener is reachable from the host.
        probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        probe.connect(f"\0{marker}")
        probe.close()
    finally:
        server.close()
    # Abstract names live in the net namespace (alpha has its own); without
    # one, landlock's abstract-socket scope refuses.
    assert found == {"connect": refusal}


@pytest.mark.parametrize("which", ["alpha", "beta", "admin"])
async def test_daemon_sockets_cannot_be_connected(
    which: str, alpha: Client, host: SecurityHost
) -> None:
    path = host.daemon.admin_socket if which == "admin" else host.socket(which)
    assert connectable(path)  # control: the daemon serves it, root can connect
    found = await attack(
        alpha,
        f"""
def connect():
    s = socket.socket(socket.AF_UNIX)
    try:
        s.connect({str(path)!r})
    finally:
        s.close()
report(connect=attempt(connect))
""",
    )
    # The daemon's sockets are not in the sandbox's root at all (ENOENT); on
    # the host their owner and mode (root, 0660 / 0600) refuse the run-as uid.
    assert found == {"connect": "ENOENT"}


async def test_host_unix_socket_outside_the_roots_cannot_be_connected(
    alpha: Client, host: SecurityHost, marker: str
) -> None:
    path = host.outside / f"{marker[-8:]}.sock"
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    os.chmod(path, 0o777)  # connectable by anyone, as the D-Bus system bus is
    server.listen()
    try:
        found = await attack(
            alpha,
            f"""
def connect():
    s = socket.socket(socket.AF_UNIX)
    try:
        s.connect({str(path)!r})
    finally:
        s.close()
report(connect=attempt(connect))
""",
        )
    finally:
        server.close()
        path.unlink()
    # Only the tenant's roots and the system dirs exist in the sandbox's root
    # (pivot_root): a socket anywhere else on the host is not even there.
    assert found == {"connect": "ENOENT"}


async def test_host_sysv_ipc_is_not_reachable(alpha: Client) -> None:
    # A world-accessible SysV shared-memory segment on the host.
    libc = ctypes.CDLL(None, use_errno=True)
    key = 0x6A057 + os.getpid()
    shmid = libc.shmget(key, 4096, 0o1666)  # IPC_CREAT | 0666
    assert shmid >= 0, os.strerror(ctypes.get_errno())
    try:
        # Control: unsandboxed, the run-as uid can attach to it.
        probe = f"import ctypes; print(ctypes.CDLL(None).shmget({key}, 0, 0o666) >= 0)"
        assert as_nobody("/usr/bin/python3", "-I", "-c", probe).stdout.strip() == "True"
        found = await attack(
            alpha,
            f"""
shmid = libc.shmget({key}, 0, 0o666)
report(shmget="ok" if shmid >= 0 else name(ctypes.get_errno()),
       listed=str({shmid}) in open("/proc/sysvipc/shm").read().split())
""",
        )
    finally:
        libc.shmctl(shmid, 0, None)  # IPC_RMID
    # Its own IPC namespace: the key names nothing there.
    assert found == {"shmget": "ENOENT", "listed": False}


async def test_hostname_is_the_sandboxs_own(alpha: Client) -> None:
    result = await alpha.run("uname", "-n")
    assert result.stdout == b"hostcap\n"
    assert socket.gethostname() != "hostcap"
