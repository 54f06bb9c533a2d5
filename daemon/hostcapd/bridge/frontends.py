"""The daemon's handle on a front-end process: the process, its
supervision and restart, and the channel to it (whose root end, running
the calls it relays, is `hostcapd.bridge.relay.Bridge`; its names are
re-exported here).

    frontend = FrontendProcess(endpoint, audit, methods, on_lost)
    temp = await frontend.start()        # bound, confined, listening under `temp`
    ...                                  # the daemon renames `temp` into place
    await frontend.stop(grace)           # as grpc.aio.Server.stop

A front-end runs as an unprivileged user (`frontend_identity`), parses
every byte its clients send, and relays each call as one typed `Call`. The
root side validates it (`hostcapd.bridge.messages`) and runs the service's
method on the typed request, bound to this channel's tenant
(`hostcapd.service`): its typed answers go back as `Reply` or `Event`, a
`Refusal` as an `Abort` (status code, reason, message). Nothing here
touches protobuf or gRPC. Every
privilege (identity, roots, landlock, seccomp, namespaces, environment,
executable, cwd, ceilings) comes from the root side's config for that
tenant, and the exec record is written here before the exec. A datagram
that is not a valid message is a `policy.deny` naming the tenant, and the
channel is closed: the front-end is restarted (with back-off) and the
tenant's running spawns end DAEMON_SHUTDOWN, their trees gone. The admin
socket has a front-end of its own, whose channel carries only the admin
operations (docs/decisions/0027-the-privilege-split.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import os
import pwd
import shutil
import signal
import stat
import subprocess
import sys
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Literal

import msgspec

from hostcapd.audit import AuditLog
from hostcapd.bridge import channel, messages
from hostcapd.bridge.relay import (
    Behaviour,
    Bridge,
    Relayed,
    RelayedCall,
    abort_of,
    call_result,
    relayed_methods,
)
from hostcapd.config import Tenant
from hostcapd.logsetup import fields, relay_stderr
from hostcapd.sandbox.tenant_ceilings import frontend_output_budget
from hostcapd.service.sockets import StartupError

__all__ = [
    "ADMIN",
    "Behaviour",
    "Bridge",
    "Endpoint",
    "FrontendProcess",
    "Relayed",
    "RelayedCall",
    "abort_of",
    "call_result",
    "frontend_identity",
    "relayed_methods",
]

log = logging.getLogger("hostcapd.bridge")

#: The dedicated user of the front-ends (systemd/sysusers.d); `nobody` when
#: it does not exist (a --dev run on a machine without the package).
FRONTEND_USER = "hostcap-frontend"
START_TIMEOUT_S = 30.0
#: Restart back-off after a front-end died: doubling from the first to the last.
RESTART_BACKOFF_S = (0.1, 10.0)
#: A front-end that served this long before dying restarts at the first back-off.
STABLE_S = 30.0
#: Room in a call's message for all but its request (the channel's header
#: is MessagePack of the values the request's protobuf held).
HEADER_ROOM = 1024 * 1024
#: A tenant's budget of request bytes the root side holds for its calls in
#: flight, in its largest requests: a call past it is refused QUOTA_EXCEEDED,
#: its payload unread.
IN_FLIGHT_REQUESTS = 4
#: The socket file's name in a front-end's bind directory.
BIND_NAME = "s"
#: The name the admin socket's front-end goes by (in logs and policy.deny):
#: no tenant can be so named.
ADMIN = "(admin)"
_bind_dirs = itertools.count(1)


def frontend_identity() -> tuple[int, int]:
    """(uid, gid) the front-ends run as: the dedicated user, else nobody;
    the daemon's own when it is not root (it cannot be anyone else)."""
    if os.geteuid() != 0:
        return os.getuid(), os.getgid()
    for name in (FRONTEND_USER, "nobody"):
        try:
            entry = pwd.getpwnam(name)
        except KeyError:
            continue
        if entry.pw_uid != 0 and entry.pw_gid != 0:
            return entry.pw_uid, entry.pw_gid
    raise StartupError(
        f"no user to run the front-ends as: create {FRONTEND_USER} "
        "(systemd/sysusers.d/hostcap.conf) or nobody"
    )


@dataclass(frozen=True)
class Endpoint:
    """A socket a front-end serves: of which kind, for whom, and its file."""

    kind: Literal["tenant", "admin"]
    #: The tenant's name; ADMIN for the admin socket.
    name: str
    socket: Path
    uid: int
    gid: int
    mode: int
    max_receive: int
    max_send: int
    #: Output its front-end keeps for its calls at once (0: unbounded).
    output_budget: int = 0

    @classmethod
    def of_tenant(cls, tenant: Tenant, max_receive: int, max_send: int) -> Endpoint:
        return cls(
            "tenant",
            tenant.name,
            tenant.socket,
            tenant.socket_uid,
            tenant.socket_gid,
            tenant.socket_mode,
            max_receive,
            max_send,
            frontend_output_budget(tenant),
        )


# --- the process ---------------------------------------------------------------


class FrontendProcess:
    """One front-end process, supervised: what the daemon holds as that
    socket's server (stop / enter_graceful_shutdown as grpc.aio's).

    With `in_process`, the same front-end code (`hostcapd.frontend.server`)
    runs as a task on this loop instead, over the same channel, unconfined
    (`frontend_processes = false`; the benchmark's in-process row and the fs
    tests' in-process endpoint). Only then does this process load gRPC."""

    #: The program, given its channel's fd number. A test replaces it (and
    #: `stdout`) with a hostile front-end that takes the same first steps.
    command: ClassVar[list[str]] = [sys.executable, "-I", "-m", "hostcapd.frontend"]
    stdout: ClassVar[int | None] = None

    def __init__(
        self,
        endpoint: Endpoint,
        audit: AuditLog,
        methods: Mapping[str, Relayed],
        on_lost: Callable[[], None],
        *,
        in_process: bool = False,
        record_callers: bool = True,
        event_loop: str = "asyncio",
        cpu: str = "any",
    ) -> None:
        self.endpoint = endpoint
        #: The front-end process's event loop (`daemon.frontend_event_loop`).
        self.event_loop = event_loop
        #: Where its threads run (`daemon.frontend_cpu`).
        self.cpu = cpu
        self.in_process = in_process
        #: Take over the accept and relay callers (decision 0033): a front-end
        #: process only (it needs a network namespace of its own).
        self.record_callers = record_callers and not in_process
        self.identity = (os.getuid(), os.getgid()) if in_process else frontend_identity()
        limit = endpoint.max_receive + HEADER_ROOM
        self.bridge = Bridge(
            endpoint.name,
            endpoint.kind,
            audit,
            methods,
            self._lost,
            limit=limit,
            in_flight=channel.InFlight(IN_FLIGHT_REQUESTS * limit),
        )
        self._on_lost = on_lost
        self.proc: subprocess.Popen[bytes] | None = None
        self.bind_dir: Path | None = None
        self.starts = 0
        #: What the front-end said it applied, for HostService.Capabilities
        #: (reported, never relied on).
        self.protections: tuple[messages.Protection, ...] = ()
        self._started_at = 0.0
        self._backoff = RESTART_BACKOFF_S[0]
        self._stopping = False
        self._exited: asyncio.Future[int] | None = None
        self._restart: asyncio.Task[None] | None = None
        self._task: asyncio.Task[int] | None = None
        #: Called with the new socket's temporary path after a restart: the
        #: owner puts it in place.
        self.on_restarted: Callable[[Path], Awaitable[None]] | None = None
        #: Why each health service is not serving ("" for all of them; a
        #: reason of "": it is); told again to a restarted front-end.
        self.serving_reasons: dict[str, str] = {}
        #: Makes the started process its tenant's cost (its cgroups, its
        #: oom_score_adj: TenantProfile.place_daemon_side); raises OSError.
        self.place: Callable[[int], None] | None = None
        #: Gives a starting front-end process its end of the read link to
        #: its tenant's fs worker (decision 0034), or None: reads relayed.
        self.read_link: Callable[[], Any] | None = None

    @property
    def pid(self) -> int:
        if self.in_process:
            return os.getpid()
        return self.proc.pid if self.proc is not None else 0

    async def start(self) -> Path:
        """Start the process and wait until it is confined and listening;
        the bound socket's path (in a directory of its own, beside the
        socket's path). Raises StartupError saying why it did not start."""
        endpoint = self.endpoint
        uid, gid = self.identity
        parent = endpoint.socket.parent
        parent.mkdir(parents=True, exist_ok=True)
        bind_dir = parent / f".{endpoint.socket.name}.fe.{os.getpid()}.{next(_bind_dirs)}"
        as_root = os.geteuid() == 0
        ours, theirs = channel.socketpair()
        try:
            # Root's, the front-end's group may write: the front-end binds in
            # it, and root renames the socket out without CAP_DAC_OVERRIDE
            # (the unit has none).
            bind_dir.mkdir(mode=0o700)
            self.bind_dir = bind_dir
            if as_root:
                os.chown(bind_dir, -1, gid)
                os.chmod(bind_dir, 0o770)
            self.bridge.attach(ours)
            hello = messages.Hello(
                kind=endpoint.kind,
                tenant=endpoint.name,
                bind_path=BIND_NAME,
                socket_mode=endpoint.mode,
                max_receive=endpoint.max_receive,
                max_send=endpoint.max_send,
                output_budget=endpoint.output_budget,
                parent_pid=os.getpid(),
                uid=uid,
                gid=gid,
                record_callers=self.record_callers,
                event_loop=self.event_loop,
                cpu=self.cpu,
            )
            if self.in_process:
                self._start_here(theirs, hello, bind_dir)
            else:
                self._start_process(theirs, hello, bind_dir)
            assert self.bridge.ready is not None
            try:
                ready = await asyncio.wait_for(asyncio.shield(self.bridge.ready), START_TIMEOUT_S)
            except (ConnectionError, TimeoutError):
                raise StartupError(
                    f"the front-end of {self.bridge._who} did not start: {await self._why()}"
                ) from None
            self.protections = tuple(ready.protections)
            for service, reason in self.serving_reasons.items():
                self.bridge.send(messages.Serving(reason=reason, service=service))
            path = bind_dir / BIND_NAME
            # The front-end made it with the mode (its umask); root gives it
            # its owner, and checks.
            if as_root:
                os.chown(path, endpoint.uid, endpoint.gid)
            if stat.S_IMODE(path.lstat().st_mode) != endpoint.mode:
                os.chmod(path, endpoint.mode)
            self._started_at = asyncio.get_running_loop().time()
            return path
        except BaseException:
            if self._task is None:
                theirs.close()  # else the in-process front-end's, closed as it ends
            await self._kill()
            self.remove_bind_dir()
            raise

    def _start_process(self, theirs: Any, hello: messages.Hello, bind_dir: Path) -> None:
        link = self.read_link() if self.read_link is not None else None
        extra = () if link is None else (link.fileno(),)
        try:
            self._popen(theirs, extra, bind_dir)
        finally:
            if link is not None:
                link.close()  # the process has its own
        self._started(theirs, hello)

    def _popen(self, theirs: Any, extra: tuple[int, ...], bind_dir: Path) -> None:
        self.proc = subprocess.Popen(
            [*self.command, str(theirs.fileno()), *(str(fd) for fd in extra)],
            pass_fds=(theirs.fileno(), *extra),
            stdin=subprocess.DEVNULL,
            stdout=self.stdout,
            # What it prints (an error before it serves, a crash's
            # traceback) becomes the daemon's log records (`relay_stderr`).
            stderr=subprocess.PIPE,
            # It starts as root, as the fs worker does: the interpreter
            # may live where the front-end user cannot read (a pyenv
            # under /root); it imports all it needs, then takes its
            # identity (Hello.uid/gid) before it reads a client's byte.
            # It binds a name relative to this directory.
            cwd=bind_dir,
            env={"LC_ALL": "C.UTF-8"},
            # A session of its own, as the fs worker's: a terminal's Ctrl-C
            # or a signal to the daemon's process group reaches the daemon,
            # which stops its front-ends in order (they die with it anyway:
            # PDEATHSIG), instead of each dying first and being restarted.
            start_new_session=True,
        )

    def _started(self, theirs: Any, hello: messages.Hello) -> None:
        assert self.proc is not None
        theirs.close()
        if self.place is not None:
            try:
                self.place(self.proc.pid)
            except OSError as error:
                raise StartupError(
                    f"the front-end of {self.bridge._who} cannot be placed in its "
                    f"tenant's cgroups: {error.strerror}: {error.filename}"
                ) from None
        self.starts += 1
        self._exited = _watch_exit(self.proc)
        assert self.proc.stderr is not None
        relay_stderr(
            self.proc.stderr,
            log,
            f"{self.bridge._who}: its front-end says: ",
            fields(tenant="" if hello.tenant == ADMIN else hello.tenant),
        )
        self._exited.add_done_callback(self._on_exit)
        self.bridge.send(hello)

    def _start_here(self, theirs: Any, hello: messages.Hello, bind_dir: Path) -> None:
        # Imported here: the daemon loads gRPC only when a socket is served in-process.
        from hostcapd.frontend import server

        here = msgspec.structs.replace(hello, bind_path=str(bind_dir / BIND_NAME))
        self.starts += 1
        self._task = asyncio.ensure_future(server.serve(theirs, here, []))
        exited: asyncio.Future[int] = asyncio.get_running_loop().create_future()

        def done(task: asyncio.Task[int]) -> None:
            if not exited.done():
                failed = task.cancelled() or task.exception() is not None
                exited.set_result(-1 if failed else task.result())

        self._task.add_done_callback(done)
        self._exited = exited
        self._exited.add_done_callback(self._on_exit)

    async def _why(self) -> str:
        """Why a starting front-end went away (its exit status)."""
        if self._exited is None:
            return "it was not started"
        with contextlib.suppress(TimeoutError):
            code = await asyncio.wait_for(asyncio.shield(self._exited), 2.0)
            return f"it exited with status {code} (its stderr says why)"
        return "it did not answer in time"

    def remove_bind_dir(self) -> None:
        """Once the socket was renamed into place (or never bound)."""
        if self.bind_dir is not None:
            shutil.rmtree(self.bind_dir, ignore_errors=True)
            self.bind_dir = None

    # --- the server's interface ---------------------------------------------

    async def enter_graceful_shutdown(self) -> None:
        self.bridge.send(messages.Drain(health_only=True))

    async def report(self, reason: str, service: str = "") -> None:
        """Health: NOT_SERVING saying why, or SERVING (""); of every service
        (a tenant's front-end), or of the one named."""
        reason = reason[:1024]
        self.serving_reasons[service] = reason
        self.bridge.send(messages.Serving(reason=reason, service=service))

    async def stop(self, grace: float | None) -> None:
        """Stop taking calls; calls in flight get `grace` seconds (a later,
        shorter grace takes precedence); returns once the process is gone."""
        self._stopping = True
        if self._restart is not None:
            self._restart.cancel()
        if self._exited is None:
            return
        if grace is None:
            await self._kill()
            return
        self.bridge.send(messages.Drain(grace=grace))
        try:
            await asyncio.wait_for(asyncio.shield(self._exited), grace + 5.0)
        except TimeoutError:
            await self._kill()
        self.bridge.close()

    def _end(self) -> None:
        """Kill the process (or cancel the in-process front-end)."""
        if self._task is not None and not self._task.done():
            self._task.cancel()
        if self.proc is not None and self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.send_signal(signal.SIGKILL)

    async def _kill(self) -> None:
        self._end()
        if self._exited is not None:
            with contextlib.suppress(Exception):
                await asyncio.shield(self._exited)
        self.bridge.close()

    # --- dying and restarting --------------------------------------------------

    def _lost(self) -> None:
        """The channel is gone: the calls end, and the tenant's spawns end
        (unless the daemon is stopping it, which ends them its own way)."""
        if not self._stopping:
            self._on_lost()
        self._end()

    def _on_exit(self, exited: asyncio.Future[int]) -> None:
        if exited.cancelled():
            return
        self.bridge.lost()
        if self._stopping or self.on_restarted is None or self._started_at == 0.0:
            return
        loop = asyncio.get_running_loop()
        if loop.time() - self._started_at > STABLE_S:
            self._backoff = RESTART_BACKOFF_S[0]
        log.warning(
            "%s: its front-end (pid %d) exited with status %s; restarting in %.1f s",
            self.bridge._who,
            self.pid,
            exited.result(),
            self._backoff,
        )
        self._restart = asyncio.ensure_future(self._restart_after(self._backoff))
        self._backoff = min(self._backoff * 2, RESTART_BACKOFF_S[1])

    async def _restart_after(self, delay: float) -> None:
        await asyncio.sleep(delay)
        if self._stopping:
            return
        self._started_at = 0.0
        try:
            path = await self.start()
        except (StartupError, OSError) as error:
            log.error("%s: its front-end could not be restarted: %s", self.bridge._who, error)
            self._started_at = 1.0  # a failed start is retried like a death
            self._on_exit(_done(-1))
            return
        assert self.on_restarted is not None
        await self.on_restarted(path)


def _done(value: int) -> asyncio.Future[int]:
    future: asyncio.Future[int] = asyncio.get_running_loop().create_future()
    future.set_result(value)
    return future


def _watch_exit(proc: subprocess.Popen[bytes]) -> asyncio.Future[int]:
    """A future of the process's exit status, from its pidfd on the loop."""
    loop = asyncio.get_running_loop()
    exited: asyncio.Future[int] = loop.create_future()
    pidfd = os.pidfd_open(proc.pid)

    def readable() -> None:
        loop.remove_reader(pidfd)
        os.close(pidfd)
        code = proc.wait()
        if not exited.done():
            exited.set_result(code)

    loop.add_reader(pidfd, readable)
    return exited
