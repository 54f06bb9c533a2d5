"""The daemon's side of the spawner channel (asyncio).

The spawner is started with posix_spawn of a fresh interpreter
(`python -m hostcapd.spawner`), never by forking the gRPC process: gRPC's
threads make fork unsafe, and a fresh interpreter that never imports gRPC
keeps the spawner's own clones cheap. If it dies it is started again; the
spawns it owned end with SPAWN_FAILED (their trees died with it).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import sys
from collections.abc import Callable
from dataclasses import dataclass

from hostcap_proto.names import Rusage

from hostcapd.spawner import channel, messages

log = logging.getLogger("hostcapd.spawner")


class SpawnerLost(Exception):
    """The spawner died; what it was doing is lost (and its children killed)."""


class SetupFailed(Exception):
    """The child's set-up failed at `step` with `errno` (nothing was executed)."""

    def __init__(self, step: str, errno: int, detail: str = "") -> None:
        super().__init__(f"{step}: {os.strerror(errno) if errno else detail or 'failed'}")
        self.step = step
        self.errno = errno
        self.detail = detail


@dataclass(frozen=True)
class ExitStatus:
    pid: int
    status: int
    rusage: Rusage


class SpawnerClient:
    def __init__(self) -> None:
        self._sock: socket.socket | None = None
        self.pid = 0
        self._started: dict[str, asyncio.Future[int]] = {}
        self._exits: dict[str, asyncio.Future[ExitStatus]] = {}
        self._profiles: dict[str, messages.RegisterProfile] = {}
        #: Warm children ordered: their ready futures, and who to tell when
        #: one is lost (it died waiting, or the spawner did).
        self._warming: dict[str, asyncio.Future[int]] = {}
        self._warm_lost: dict[str, Callable[[str], None]] = {}
        #: Environments being opened: their answers.
        self._env_opens: dict[str, asyncio.Future[None]] = {}
        self._hello: asyncio.Future[int] | None = None
        self._closing = False
        self.restarts = 0
        #: Called (with no arguments) after the spawner was lost and restarted.
        self.on_restart: Callable[[], None] | None = None
        #: Called when the spawner died (before it is restarted).
        self.on_lost: Callable[[], None] | None = None
        self._ready = asyncio.Event()
        #: The loop it runs on, once started (asyncio.get_running_loop is a
        #: getpid on Python 3.11: asked once, not per order).
        self._loop: asyncio.AbstractEventLoop | None = None

    async def start(self) -> None:
        loop = self._loop = asyncio.get_running_loop()
        ours, theirs = channel.socketpair()
        ours.setblocking(False)
        os.set_inheritable(theirs.fileno(), True)
        self._hello = loop.create_future()
        try:
            self.pid = os.posix_spawn(
                sys.executable,
                [sys.executable, "-m", "hostcapd.spawner", str(theirs.fileno()), str(os.getpid())],
                _spawner_env(),
                setpgroup=0,  # out of the terminal's process group: Ctrl-C is ours to handle
            )
        finally:
            theirs.close()
        loop.add_reader(ours.fileno(), self._readable, ours)
        try:
            await asyncio.wait_for(self._hello, 30)
            for key, profile in self._profiles.items():
                channel.send(ours, profile.to_wire())
                log.debug("registered profile %s", key)
        except BaseException:
            loop.remove_reader(ours.fileno())
            ours.close()
            raise
        # Only now may orders go to it: it has every profile they can name.
        self._sock = ours
        self._ready.set()

    async def ready(self, timeout: float = 10.0) -> None:
        """Wait (bounded) while a lost spawner is being replaced."""
        if self._ready.is_set():
            return
        try:
            await asyncio.wait_for(self._ready.wait(), timeout)
        except TimeoutError:
            raise SpawnerLost(f"no spawner became ready within {timeout:g} s") from None

    def register_profile(self, profile: messages.RegisterProfile) -> None:
        """Register (or replace) a tenant's prepared profile; kept for restarts
        (a spawner being started gets it before it takes any order)."""
        self._profiles[profile.key] = profile
        if self._sock is not None:
            channel.send(self._sock, profile.to_wire())

    def drop_profile(self, key: str) -> None:
        self._profiles.pop(key, None)
        if self._sock is not None:
            channel.send(self._sock, messages.DropProfile(key).to_wire())

    @property
    def running(self) -> bool:
        """The spawner takes orders now (False while it is restarted)."""
        return self._sock is not None

    def _require(self) -> socket.socket:
        if self._sock is None:
            raise SpawnerLost("the spawner is not running")
        return self._sock

    def spawn(
        self, order: messages.SpawnOrder, fds: list[int]
    ) -> tuple[asyncio.Future[int], asyncio.Future[ExitStatus]]:
        """Send a spawn order now (the fds are duplicated into the message, so
        the caller may close its copies on return). The first future gives the
        pid once the child has exec'd (or raises SetupFailed / SpawnerLost);
        the second, its exit. Raises SpawnerLost at once, having sent
        nothing, if the spawner is already gone."""
        loop = self._loop or asyncio.get_running_loop()
        spawn_id = order.id
        started: asyncio.Future[int] = loop.create_future()
        exited: asyncio.Future[ExitStatus] = loop.create_future()
        self._order(order.to_wire(), fds)
        self._started[spawn_id] = started
        self._exits[spawn_id] = exited
        return started, exited

    def warm(
        self, order: messages.WarmOrder, fds: list[int], lost: Callable[[str], None]
    ) -> asyncio.Future[int]:
        """Order a warm child (fds duplicated as for spawn); the future gives
        its pid once it waits (or raises SetupFailed / SpawnerLost). `lost`
        is called with its id if it dies before a spawn order takes it.
        Raises SpawnerLost at once if the spawner is gone."""
        self._order(order.to_wire(), fds)
        ready: asyncio.Future[int] = (self._loop or asyncio.get_running_loop()).create_future()
        self._warming[order.id] = ready
        self._warm_lost[order.id] = lost
        return ready

    def _order(self, wire: messages.Wire, fds: list[int]) -> None:
        """Send an order now, or raise SpawnerLost having sent nothing."""
        sock = self._require()
        try:
            channel.send(sock, wire, fds)
        except OSError as error:
            # It died and we have not read its EOF yet: nothing was sent, so
            # nothing ran. Start the replacement now; the caller may retry.
            self._lost(sock)
            raise SpawnerLost(f"the spawner is gone ({error.strerror})") from None

    def warm_taken(self, warm_id: str) -> None:
        """A spawn order takes the warm child: its loss is that spawn's now."""
        self._warm_lost.pop(warm_id, None)

    def drop_warm(self, warm_id: str) -> None:
        """Kill the warm child `warm_id` if it still waits."""
        self._warm_lost.pop(warm_id, None)
        self._warming.pop(warm_id, None)
        if self._sock is not None:
            with contextlib.suppress(OSError):
                channel.send(self._sock, messages.DropWarm(warm_id).to_wire())

    async def open_env(self, env_id: str, profile_key: str, netns_fd: int = -1) -> None:
        """Have the spawner make environment `env_id`'s namespaces; returns
        once they are made. Raises SetupFailed("environment", ...) if they
        could not be, SpawnerLost if the spawner is gone."""
        opened: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        given = [netns_fd] if netns_fd >= 0 else []
        self._order(messages.OpenEnv(env_id, profile_key, bool(given)).to_wire(), given)
        self._env_opens[env_id] = opened
        try:
            await opened
        finally:
            self._env_opens.pop(env_id, None)

    def close_env(self, env_id: str) -> None:
        """Drop environment `env_id`'s namespaces (after its spawns ended)."""
        if self._sock is not None:
            with contextlib.suppress(OSError):
                channel.send(self._sock, messages.CloseEnv(env_id).to_wire())

    def kill(self, spawn_id: str, pid: int, sig: int) -> None:
        if self._sock is not None:
            with contextlib.suppress(OSError):
                channel.send(self._sock, messages.Kill(spawn_id, pid, int(sig)).to_wire())

    def _readable(self, sock: socket.socket) -> None:
        # One report a call: the loop's poll is level-triggered, so another
        # waiting comes in its next pass, and a report that came alone (most
        # do) costs no second recvmsg that finds nothing.
        report: messages.FromSpawner | None = None
        try:
            received = channel.receive(sock)
            if received is not None:
                for fd in received[1]:
                    os.close(fd)
                # A report that is not one of ours: the channel is not
                # trusted further (the spawner is replaced, fail closed).
                report = messages.from_spawner(received[0])
        except BlockingIOError:
            return
        except (OSError, ValueError) as error:
            log.error("spawner channel failed: %s", error)
        if report is None:
            self._lost(sock)
            return
        self._dispatch(report)

    def _dispatch(self, m: messages.FromSpawner) -> None:
        if isinstance(m, messages.Started):
            fut = self._started.pop(m.id, None)
            if fut and not fut.done():
                fut.set_result(m.pid)
        elif isinstance(m, messages.Exited):
            ex = self._exits.pop(m.id, None)
            if ex and not ex.done():
                ex.set_result(ExitStatus(m.pid, m.status, m.rusage))
        elif isinstance(m, messages.Warmed):
            ready = self._warming.pop(m.id, None)
            if ready and not ready.done():
                ready.set_result(m.pid)
        elif isinstance(m, messages.WarmLost):
            lost = self._warm_lost.pop(m.id, None)
            if lost is not None:
                lost(m.id)
        elif isinstance(m, messages.EnvOpened):
            opened = self._env_opens.pop(m.id, None)
            if opened and not opened.done():
                opened.set_result(None)
        elif isinstance(m, messages.Failed) and m.id in self._env_opens:
            opened = self._env_opens.pop(m.id)
            if not opened.done():
                opened.set_exception(SetupFailed(m.step, m.errno, m.detail))
        elif isinstance(m, messages.Failed):
            self._exits.pop(m.id, None)
            fut = self._started.pop(m.id, None) or self._warming.pop(m.id, None)
            if fut and not fut.done():
                fut.set_exception(SetupFailed(m.step, m.errno, m.detail))
            self._warm_lost.pop(m.id, None)
        elif isinstance(m, messages.Hello):
            if self._hello and not self._hello.done():
                self._hello.set_result(m.pid)
        elif isinstance(m, messages.OrderRefused):
            log.warning("the spawner refused a message: %s", m.message)

    def _lost(self, sock: socket.socket) -> None:
        self._ready.clear()
        if self._sock is sock:
            self._sock = None
        asyncio.get_running_loop().remove_reader(sock.fileno())
        sock.close()
        if self._hello and not self._hello.done():
            self._hello.set_exception(SpawnerLost("the spawner died while starting"))
        error = SpawnerLost("the spawner died")
        for futures in (self._started, self._exits, self._warming, self._env_opens):
            for fut in futures.values():
                if not fut.done():
                    fut.set_exception(error)
            futures.clear()
        lost, self._warm_lost = self._warm_lost, {}
        for warm_id, callback in lost.items():
            callback(warm_id)
        if self._closing:
            return
        log.error("spawner died; starting a new one")
        self.restarts += 1
        if self.on_lost:
            self.on_lost()
        asyncio.get_running_loop().create_task(self._restart())

    async def _restart(self) -> None:
        await self._reap_process()
        pause = 0.05
        while not self._closing:
            try:
                await self.start()
            except Exception:
                log.exception("could not restart the spawner; trying again in %.1f s", pause)
                await self._reap_process()
                await asyncio.sleep(pause)
                pause = min(pause * 2, 5.0)
                continue
            if self.on_restart:
                self.on_restart()
            return

    async def _reap_process(self, grace: float = 2.0) -> None:
        """Reap the (dying or told-to-stop) spawner, killing it after `grace`."""
        pid, self.pid = self.pid, 0
        if not pid:
            return
        for _ in range(int(grace / 0.01)):
            try:
                done, _status = os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                return
            if done:
                return
            await asyncio.sleep(0.01)
        os.kill(pid, 9)
        os.waitpid(pid, 0)

    async def close(self) -> None:
        """Stop the spawner: it kills and reaps whatever is still running."""
        self._closing = True
        sock = self._sock
        if sock is not None:
            with contextlib.suppress(OSError):
                channel.send(sock, messages.Shutdown().to_wire())
        await self._reap_process()
        if self._sock is not None:
            asyncio.get_running_loop().remove_reader(self._sock.fileno())
            self._sock.close()
            self._sock = None


def _spawner_env() -> dict[str, str]:
    # The spawner needs only what the interpreter needs to find this package.
    env = {"PATH": "/usr/bin:/bin"}
    for name in ("PYTHONPATH", "VIRTUAL_ENV"):
        if name in os.environ:
            env[name] = os.environ[name]
    return env
