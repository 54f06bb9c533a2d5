"""The daemon's handle on a tenant's egress proxy, and the way in.

    egress = EgressProxy(tenant, audit, place=profile.place_daemon_side)
    await egress.start()                 # confined, serving; EgressUnavailable
    netns_fd = await egress.open(spawn_id)   # a network namespace, its listener handed over
    ...                                  # the spawn's child joins netns_fd
    egress.close(spawn_id)               # the spawn ended
    await egress.stop()

The way in: `open` makes a network namespace with its loopback up and a
TCP listener on 127.0.0.1:PROXY_PORT inside it, in a thread of its own
(setns and unshare are per thread), before the spawn's command exists. The
listener goes to the proxy (a socket keeps the namespace it was made in);
the namespace's fd goes to the spawner, whose child joins it. The spawn has
no other interface, no route and no DNS server: no UDP leaves it.

The daemon trusts nothing the proxy says: the listeners are keyed by spawn
id here, and a report naming a spawn this proxy was not given is refused
and logged. The `network.connect` record is the daemon's, written from the
report for a spawn it checked belongs to this proxy's tenant.

If the proxy dies, its listeners die with it (a spawn's connect then fails:
never an open network), and the next `open` starts a new one; while it
cannot, `open` raises EgressUnavailable and the spawn does not run.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import logging
import os
import socket
import struct
import subprocess
import sys
import threading
from collections.abc import Callable

import msgspec
from hostcap_proto.names import HelperProtectionName

from hostcapd import linux, metrics
from hostcapd.audit import AuditLog, AuditUnavailable
from hostcapd.config import Tenant
from hostcapd.egress import messages
from hostcapd.egress.rules import PROXY_PORT

log = logging.getLogger("hostcapd.egress")

CLONE_NEWNET = 0x40000000
START_TIMEOUT_S = 30.0
#: The variables a proxy-mode spawn's command gets, upper and lower case.
PROXY_URL = f"http://127.0.0.1:{PROXY_PORT}"
NO_PROXY = "localhost,127.0.0.1,::1"


def proxy_environment() -> dict[str, str]:
    env = {
        "HTTP_PROXY": PROXY_URL,
        "HTTPS_PROXY": PROXY_URL,
        "ALL_PROXY": f"socks5h://127.0.0.1:{PROXY_PORT}",
        "NO_PROXY": NO_PROXY,
    }
    return {**env, **{name.lower(): value for name, value in env.items()}}


class EgressUnavailable(Exception):
    """The tenant's egress proxy is not running and cannot be started now."""


def _loopback_up() -> None:
    siocgifflags, siocsifflags, up_running = 0x8913, 0x8914, 0x1 | 0x40
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        ifreq = struct.pack("16sH14x", b"lo", 0)
        flags = struct.unpack("16sH14x", fcntl.ioctl(s, siocgifflags, ifreq))[1]
        fcntl.ioctl(s, siocsifflags, struct.pack("16sH14x", b"lo", flags | up_running))


def netns_with_listener() -> tuple[int, socket.socket]:
    """(the fd of a new network namespace, a listener on its loopback),
    made on a thread of its own that ends in that namespace."""
    box: list[tuple[int, socket.socket] | OSError] = []

    def work() -> None:
        try:
            linux.unshare(CLONE_NEWNET)
            _loopback_up()
            listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
            try:
                listener.bind(("127.0.0.1", PROXY_PORT))
                listener.listen(128)
                fd = os.open("/proc/thread-self/ns/net", os.O_RDONLY | os.O_CLOEXEC)
            except BaseException:
                listener.close()
                raise
            box.append((fd, listener))
        except OSError as error:
            box.append(error)

    thread = threading.Thread(target=work, name="egress-netns")
    thread.start()
    thread.join()
    result = box[0]
    if isinstance(result, OSError):
        raise result
    return result


class EgressProxy:
    """One tenant's proxy process, supervised (see the module docstring)."""

    command: list[str] = [sys.executable, "-I", "-m", "hostcapd.egress"]

    def __init__(
        self,
        tenant: Tenant,
        audit: AuditLog,
        identity: tuple[int, int],
        place: Callable[[int], None] | None = None,
    ) -> None:
        self.tenant = tenant
        self.audit = audit
        self.identity = identity
        self.place = place
        self.proc: subprocess.Popen[bytes] | None = None
        self.channel: socket.socket | None = None
        #: spawn id -> labels of the spawn (its audit correlation).
        self.listeners: dict[str, dict[str, str]] = {}
        self.protections: list[tuple[HelperProtectionName, bool, str]] = []
        self.starts = 0
        #: spawn id -> the proxy's word that it accepts on the spawn's listener.
        self._listening: dict[str, asyncio.Future[None]] = {}
        self._lock = asyncio.Lock()
        self._stopping = False

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None and self.channel is not None

    async def start(self) -> None:
        """Start the proxy and wait until it is confined; EgressUnavailable
        saying why not."""
        ours, theirs = socket.socketpair(
            socket.AF_UNIX, socket.SOCK_SEQPACKET | socket.SOCK_CLOEXEC
        )
        uid, gid = self.identity
        network = self.tenant.network
        hello = messages.Hello(
            tenant=self.tenant.name,
            allow=list(network.allow),
            deny=list(network.deny),
            resolve=dict(network.resolve),
            max_connections=network.max_connections,
            max_bytes=network.max_bytes,
            connect_timeout=network.connect_timeout_seconds,
            parent_pid=os.getpid(),
            uid=uid,
            gid=gid,
        )
        try:
            proc = subprocess.Popen(
                [*self.command, str(theirs.fileno())],
                pass_fds=(theirs.fileno(),),
                stdin=subprocess.DEVNULL,
                cwd="/",
                env={"LC_ALL": "C.UTF-8"},
            )
        except OSError as error:
            ours.close()
            theirs.close()
            raise EgressUnavailable(f"the egress proxy cannot be started: {error}") from None
        theirs.close()
        self.starts += 1
        try:
            if self.place is not None:
                self.place(proc.pid)
            ours.send(messages.encode(hello))
            ours.setblocking(False)
            loop = asyncio.get_running_loop()
            data = await asyncio.wait_for(
                loop.sock_recv(ours, messages.MAX_DATAGRAM), START_TIMEOUT_S
            )
            ready = messages.decode_from_proxy(data) if data else None
            if not isinstance(ready, messages.Ready):
                raise EgressUnavailable(
                    f"the egress proxy of tenant {self.tenant.name!r} did not start "
                    f"(status {proc.poll()}: its stderr says why)"
                )
        except BaseException as error:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            await asyncio.to_thread(proc.wait)
            ours.close()
            if isinstance(error, EgressUnavailable):
                raise
            if isinstance(
                error, (OSError, TimeoutError, msgspec.DecodeError, msgspec.ValidationError)
            ):
                raise EgressUnavailable(
                    f"the egress proxy of tenant {self.tenant.name!r} did not start: {error}"
                ) from None
            raise
        self.proc, self.channel = proc, ours
        self.protections = list(ready.protections)
        self.listeners.clear()
        loop.add_reader(ours.fileno(), self._readable)
        log.info(
            "tenant %s: egress proxy (pid %d) serving, confined: %s",
            self.tenant.name,
            proc.pid,
            ", ".join(name for name, applied, _ in self.protections if applied),
        )

    async def open(self, spawn_id: str, labels: dict[str, str] | None = None) -> int:
        """A new network namespace for spawn `spawn_id`, its listener handed
        to the proxy (started again first if it died); the namespace's fd,
        the caller's to close. EgressUnavailable when there is no proxy."""
        for attempt in (1, 2):
            async with self._lock:
                if self._stopping:
                    raise EgressUnavailable("the daemon is stopping the egress proxy")
                if not self.running:
                    self._lost()
                    log.warning(
                        "tenant %s: egress proxy not running; starting it", self.tenant.name
                    )
                    await self.start()
            netns_fd, listener = await asyncio.to_thread(netns_with_listener)
            listening = asyncio.get_running_loop().create_future()
            self._listening[spawn_id] = listening
            self.listeners[spawn_id] = dict(labels or {})
            try:
                assert self.channel is not None
                messages.send_with_fd(
                    self.channel, messages.encode(messages.Listen(spawn_id)), listener.fileno()
                )
                # Only once the proxy says it accepts: a proxy dying meanwhile
                # is found here, not by the command's first connect.
                await asyncio.wait_for(listening, START_TIMEOUT_S)
                return netns_fd
            except (OSError, TimeoutError, EgressUnavailable) as error:
                os.close(netns_fd)
                self.listeners.pop(spawn_id, None)
                if attempt == 2:
                    raise EgressUnavailable(
                        f"the egress proxy did not take the listener: {error}"
                    ) from None
                self._lost()
            finally:
                listener.close()  # the proxy holds it now, or nobody does
                self._listening.pop(spawn_id, None)
        raise AssertionError("unreachable")

    def close(self, spawn_id: str) -> None:
        if self.listeners.pop(spawn_id, None) is None or self.channel is None:
            return
        with contextlib.suppress(OSError):
            self.channel.send(messages.encode(messages.Forget(spawn_id)))

    def _readable(self) -> None:
        channel = self.channel
        if channel is None:
            return
        try:
            data, fds = messages.receive(channel)
        except BlockingIOError:
            return
        except OSError:
            data, fds = b"", []
        for fd in fds:  # a proxy never sends one
            os.close(fd)
        if not data:
            self._lost()
            return
        try:
            report = messages.decode_from_proxy(data)
        except (msgspec.DecodeError, msgspec.ValidationError) as error:
            log.error(
                "tenant %s: egress proxy sent a malformed report: %s", self.tenant.name, error
            )
            return
        if isinstance(report, messages.Listening):
            waiting = self._listening.get(report.spawn_id)
            if waiting is not None and not waiting.done():
                waiting.set_result(None)
            return
        if not isinstance(report, messages.Connection):
            return
        labels = self.listeners.get(report.spawn_id)
        if labels is None:
            log.error(
                "tenant %s: egress proxy reported a connection of spawn %r, which it was not "
                "given: refused",
                self.tenant.name,
                report.spawn_id[:64],
            )
            return
        self._record(report, labels)

    def _record(self, report: messages.Connection, labels: dict[str, str]) -> None:
        decision = "allowed" if report.allowed else "denied"
        metrics.count_egress(self.tenant.name, decision, report.bytes_up, report.bytes_down)
        try:
            self.audit.write(
                "network.connect",
                tenant=self.tenant.name,
                spawn_id=report.spawn_id,
                labels=labels,
                protocol=report.protocol,
                host=report.host,
                port=report.port,
                address=report.address,
                rule=report.rule,
                allowed=report.allowed,
                reason=report.reason,
                bytes_up=max(0, report.bytes_up),
                bytes_down=max(0, report.bytes_down),
                duration_ms=max(0, report.duration_ms),
            )
        except AuditUnavailable as error:
            log.error("tenant %s: network.connect not recorded: %s", self.tenant.name, error)

    def _lost(self) -> None:
        """The proxy is gone: its listeners with it."""
        if self.channel is not None:
            with contextlib.suppress(Exception):
                asyncio.get_running_loop().remove_reader(self.channel.fileno())
            self.channel.close()
            self.channel = None
        if self.proc is not None and self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.kill()
        if self.listeners and not self._stopping:
            log.warning(
                "tenant %s: egress proxy lost; %d running spawn(s) lose their way out",
                self.tenant.name,
                len(self.listeners),
            )
        self.listeners.clear()
        for waiting in self._listening.values():
            if not waiting.done():
                waiting.set_exception(EgressUnavailable("the egress proxy went away"))

    async def stop(self) -> None:
        self._stopping = True
        proc = self.proc
        self._lost()
        if proc is not None:
            await asyncio.to_thread(proc.wait)
