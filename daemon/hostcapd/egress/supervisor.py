"""The daemon's handle on a tenant's egress proxy, and the way in.

    egress = EgressProxy(tenant, audit, place=profile.place_daemon_side)
    await egress.start()                 # confined, serving; EgressUnavailable
    netns_fd = await egress.open(spawn_id)   # a network namespace, its ends handed over
    ...                                  # the spawn's child joins netns_fd
    egress.close(spawn_id)               # the spawn ended
    await egress.stop()

The way in: `open` makes a network namespace (egress/netns.py) before the
spawn's command exists: its loopback with the proxy's listeners on
127.0.0.1 and [::1]:PROXY_PORT, and a tun device that every other route
leads into. The listeners and the tun's fd go to the proxy (a socket keeps
the namespace it was made in); the namespace's fd goes to the spawner,
whose child joins it. No packet leaves it but through the proxy: what the
program sends past it lands on the tun, where the proxy answers it with an
ICMP error and reports it (egress/direct.py). An environment (decision
0028) gets one namespace for all its spawns, `open`ed under its id.

The daemon trusts nothing the proxy says: the spawns are keyed by id here,
and a report naming a spawn this proxy was not given is refused and
logged. The `network.connect` record is the daemon's, written from the
report for a spawn it checked belongs to this proxy's tenant.

The daemon keeps its own copy of each spawn's ends. If the proxy dies, the
daemon starts a new one at once (again with a growing pause while it
cannot) and hands it every running spawn's ends: a connect meanwhile waits
in the listener's backlog, a packet in the tun's queue, and the new proxy
serves them; never an open network. While no proxy can be started, `open`
raises EgressUnavailable and a new spawn does not run.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import subprocess
import sys
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field

import msgspec
from hostcap_proto.names import HelperProtectionName

from hostcapd import metrics
from hostcapd.audit import AuditLog, AuditUnavailable
from hostcapd.config import Tenant
from hostcapd.egress import messages
from hostcapd.egress.netns import make_namespace, tun_problem
from hostcapd.egress.rules import PROXY_PORT

log = logging.getLogger("hostcapd.egress")

START_TIMEOUT_S = 30.0
#: Pauses between the attempts to start a dead proxy again for its running spawns.
REVIVE_PAUSES_S = (0.0, 0.5, 1.0, 2.0, 5.0, 10.0)
#: Ended spawns whose late reports (a connection closed as it ended) are still taken.
ENDED_KEPT = 1024
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


@dataclass
class Handed:
    """A spawn's (or environment's) part of the proxy: its audit labels and
    the daemon's copies of the ends the proxy serves it on."""

    labels: dict[str, str]
    ends: list[tuple[str, int]] = field(default_factory=list)

    def close(self) -> None:
        """Close the ends, on a thread when a loop runs: the last close of a
        tun fd unregisters its device, which waits for RCU grace periods
        (some 30 ms; bench.egress_bench's egress.netns.close_us)."""
        fds, self.ends = [fd for _kind, fd in self.ends], []
        try:
            asyncio.get_running_loop().run_in_executor(None, _close_fds, fds)
        except RuntimeError:
            _close_fds(fds)


def _close_fds(fds: list[int]) -> None:
    for fd in fds:
        with contextlib.suppress(OSError):
            os.close(fd)


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
        #: spawn id -> its labels (its audit correlation) and ends.
        self.handed: dict[str, Handed] = {}
        #: Ended spawns' labels, for their connections' late reports.
        self.ended: OrderedDict[str, dict[str, str]] = OrderedDict()
        self._revive: asyncio.Task[None] | None = None
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
        problem = tun_problem()
        if problem:  # fail closed: no spawn of this tenant without it
            raise EgressUnavailable(problem)
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
        loop.add_reader(ours.fileno(), self._readable)
        log.info(
            "tenant %s: egress proxy (pid %d) serving, confined: %s",
            self.tenant.name,
            proc.pid,
            ", ".join(name for name, applied, _ in self.protections if applied),
        )
        # The running spawns' ends, kept here, to the new proxy.
        await self._hand_all()

    async def _hand_all(self) -> None:
        """Every running spawn's ends to a new proxy."""
        for spawn_id in list(self.handed):
            try:
                await self._hand(spawn_id)
            except (OSError, EgressUnavailable):
                return  # the channel is broken: _readable finds the proxy gone

    async def _hand(self, spawn_id: str) -> None:
        """Spawn `spawn_id`'s ends to the proxy, waiting while its channel is
        full (a proxy restarted under many spawns); OSError if it is broken."""
        for _ in range(int(START_TIMEOUT_S * 100)):
            handed = self.handed.get(spawn_id)
            if handed is None:
                return  # it ended meanwhile
            if self.channel is None:
                raise EgressUnavailable("the egress proxy went away")
            listen = messages.Listen(spawn_id, [kind for kind, _fd in handed.ends])  # type: ignore[misc]
            try:
                messages.send_with_fds(
                    self.channel, messages.encode(listen), [fd for _kind, fd in handed.ends]
                )
                return
            except BlockingIOError:
                await asyncio.sleep(0.01)
        raise TimeoutError("the egress proxy's channel stayed full")

    async def _running(self) -> None:
        async with self._lock:
            if self._stopping:
                raise EgressUnavailable("the daemon is stopping the egress proxy")
            if not self.running:
                self._lost()
                log.warning("tenant %s: egress proxy not running; starting it", self.tenant.name)
                await self.start()

    async def open(self, spawn_id: str, labels: dict[str, str] | None = None) -> int:
        """A new network namespace for spawn `spawn_id`, its ends handed to
        the proxy (started again first if it died); the namespace's fd, the
        caller's to close. EgressUnavailable when there is no proxy."""
        await self._running()
        self.close(spawn_id)  # one opened before under this id (a warm child's) goes
        way = await asyncio.to_thread(make_namespace)
        handed = self.handed[spawn_id] = Handed(dict(labels or {}), way.ends)
        way.ends = []
        try:
            for attempt in (1, 2):
                listening = asyncio.get_running_loop().create_future()
                self._listening[spawn_id] = listening
                try:
                    if attempt == 2:
                        await self._running()  # a new proxy is handed every spawn's ends
                    await self._hand(spawn_id)  # (again: a proxy served already says so)
                    # Only once the proxy says it serves them: a proxy dying
                    # meanwhile is found here, not by the command's first connect.
                    await asyncio.wait_for(listening, START_TIMEOUT_S)
                    return way.netns
                except (OSError, TimeoutError, EgressUnavailable) as error:
                    if attempt == 2:
                        raise EgressUnavailable(
                            f"the egress proxy did not take the spawn's listeners: {error}"
                        ) from None
                    self._lost()
                finally:
                    self._listening.pop(spawn_id, None)
        except BaseException:
            way.close()
            if self.handed.pop(spawn_id, None) is handed:
                handed.close()
            raise
        raise AssertionError("unreachable")

    def relabel(self, spawn_id: str, labels: dict[str, str]) -> None:
        """The labels of the spawn that took `spawn_id`'s namespace (a warm
        child's, opened before its request)."""
        handed = self.handed.get(spawn_id)
        if handed is not None:
            handed.labels = dict(labels)

    def close(self, spawn_id: str) -> None:
        handed = self.handed.pop(spawn_id, None)
        if handed is None:
            return
        handed.close()
        self.ended[spawn_id] = handed.labels
        while len(self.ended) > ENDED_KEPT:
            self.ended.popitem(last=False)
        if self.channel is not None:
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
        handed = self.handed.get(report.spawn_id)
        labels = handed.labels if handed is not None else self.ended.get(report.spawn_id)
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
        # An environment's namespace is shared by its spawns: its id, not one spawn's.
        env = report.spawn_id.startswith("env-")
        whose = (
            {"spawn_id": "", "environment_id": report.spawn_id}
            if env
            else {"spawn_id": report.spawn_id}
        )
        try:
            self.audit.write(
                "network.connect",
                tenant=self.tenant.name,
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
                **whose,
            )
        except AuditUnavailable as error:
            log.error("tenant %s: network.connect not recorded: %s", self.tenant.name, error)

    def _lost(self) -> None:
        """The proxy is gone (its running spawns' ends are kept here): a new
        one is started for them."""
        if self.channel is not None:
            with contextlib.suppress(Exception):
                asyncio.get_running_loop().remove_reader(self.channel.fileno())
            self.channel.close()
            self.channel = None
        if self.proc is not None and self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.kill()
        for waiting in self._listening.values():
            if not waiting.done():
                waiting.set_exception(EgressUnavailable("the egress proxy went away"))
        if self.handed and not self._stopping and self._revive is None:
            log.warning(
                "tenant %s: egress proxy lost; starting a new one for %d running spawn(s)",
                self.tenant.name,
                len(self.handed),
            )
            self._revive = asyncio.get_running_loop().create_task(self._revived())

    async def _revived(self) -> None:
        """Start a new proxy for the running spawns, pausing longer after each failure."""
        try:
            for attempt in range(1_000_000):
                await asyncio.sleep(REVIVE_PAUSES_S[min(attempt, len(REVIVE_PAUSES_S) - 1)])
                if self._stopping or not self.handed or self.running:
                    return
                try:
                    await self._running()
                    return
                except EgressUnavailable as error:
                    log.error("tenant %s: %s", self.tenant.name, error)
        finally:
            self._revive = None

    async def stop(self) -> None:
        self._stopping = True
        proc = self.proc
        if self._revive is not None:
            self._revive.cancel()
        self._lost()
        for handed in self.handed.values():
            handed.close()
        self.handed.clear()
        if proc is not None:
            await asyncio.to_thread(proc.wait)
