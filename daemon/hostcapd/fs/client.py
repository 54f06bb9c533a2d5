"""The daemon's handle on a tenant's fs worker process.

    worker = FsWorker(settings)
    await worker.start()                       # FsWorkerUnavailable if it refuses to serve
    async with worker.session() as session:    # one request at a time
        reply = await session.exchange({"op": "stat", "path": "a.txt"})
        reply.header["size"]                   # the answer's fields

A request is a dict with its `op` (the fs service's), checked against
`hostcapd.fs.messages` before it is sent; an answer that is not one of
those messages is a worker lost (killed, and started anew next time).
    await worker.close()                       # the process is gone when this returns

One worker per tenant, requests serialised by an asyncio lock: the worker is
single-threaded and a write is a prepare / audit / commit exchange that must
not interleave with anything. A session is the unit that holds the lock.

The worker is a fresh interpreter started with subprocess (vfork + exec,
no preexec_fn): the daemon has gRPC's threads and must never fork. If
the worker dies or stops answering within `op_timeout_s`, it is killed, the
request in flight fails with `FsWorkerUnavailable`, and the next session
starts a new one. Start it from the event loop's thread: the worker's
parent-death signal fires when the thread that spawned it exits.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

from hostcapd.applied import Applied, Unavailable
from hostcapd.errors import UNAVAILABLE, Refusal
from hostcapd.fs import messages
from hostcapd.fs.direct import Links
from hostcapd.fs.protocol import FrameLink, ProtocolError, make_link
from hostcapd.fs.worker import WorkerSettings, prepare_handover

START_TIMEOUT_S = 30.0
CLOSE_GRACE_S = 2.0
#: A worker with a front-end's read link that died is started again at
#: once (its front-end's reads wait for it), then after this back-off.
REVIVE_BACKOFF_S = (0.1, 10.0)
log = logging.getLogger("hostcapd.fs")


@dataclass
class Reply:
    """A worker's answer: its header, any data, and any fd it passed (owned
    by whoever holds the reply: close it)."""

    header: dict[str, Any]
    data: bytes
    fd: int | None

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


class FsWorkerUnavailable(Refusal):
    """The worker cannot serve: it refused to start, died, or hung (gRPC
    UNAVAILABLE for the call)."""

    def __init__(self, message: str) -> None:
        super().__init__(UNAVAILABLE, message)


class FsWorker:
    """Owns one worker process, its link, and the lock that serialises it."""

    def __init__(self, settings: WorkerSettings, *, op_timeout_s: float) -> None:
        self.settings = settings
        self.op_timeout_s = op_timeout_s
        self._lock = asyncio.Lock()
        self._proc: subprocess.Popen[bytes] | None = None
        self._link: FrameLink | None = None
        self._closed = False
        self.protections: tuple[Applied, ...] = ()
        #: How many times a worker was started (1 after start()).
        self.starts = 0
        #: Makes a started worker its tenant's cost (cgroups, oom_score_adj);
        #: raises OSError.
        self.place: Callable[[int], None] | None = None
        #: The front-end's read link and the report link (decision 0034):
        #: their worker ends go to every worker started, which is then
        #: started again as soon as it dies.
        self.links: Links | None = None
        #: The read link's generation the running worker holds.
        self._generation = 0
        self._revive: asyncio.Task[None] | None = None
        self._backoff = REVIVE_BACKOFF_S[0]

    @property
    def pid(self) -> int | None:
        """The live worker's pid (None when none runs)."""
        return self._proc.pid if self._proc is not None else None

    async def start(self) -> None:
        async with self._lock:
            await self._spawn()

    async def _spawn(self) -> None:
        try:
            handover = prepare_handover(self.settings)
        except Unavailable as error:
            raise FsWorkerUnavailable(str(error)) from None
        front, child = make_link()
        direct: tuple[int, ...] = ()
        if self.links is not None:
            direct = self.links.worker_fds()
            self._generation = self.links.generation
        try:
            # -I: no PYTHON* variables, no user site, no cwd on sys.path.
            proc = subprocess.Popen(
                [
                    sys.executable,
                    "-I",
                    "-m",
                    "hostcapd.fs.worker",
                    str(child.fileno()),
                    *(str(fd) for fd in direct),
                    *([str(self._generation)] if direct else []),
                ],
                pass_fds=(child.fileno(), *handover.fds(), *direct),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                cwd="/",
                env={"LC_ALL": "C.UTF-8"},
                start_new_session=True,
            )
        except OSError as error:
            front.close()
            raise FsWorkerUnavailable(f"cannot start the fs worker: {error.strerror}") from None
        finally:
            child.close()
            hello = messages.Hello(self.settings, handover.to_hello())
            handover.close()  # the worker has its own copies now
        self._proc = proc
        if self.place is not None:
            try:
                self.place(proc.pid)
            except OSError as error:
                await self._discard()
                raise FsWorkerUnavailable(
                    f"the fs worker cannot be placed in its tenant's cgroups: {error.strerror}"
                ) from None
        self.starts += 1
        self._link = FrameLink(front)
        try:
            await self._link.send(hello)
            header, _, fd = await asyncio.wait_for(self._link.receive(0), START_TIMEOUT_S)
            if fd is not None:
                os.close(fd)
            ready = messages.decode_answer(header)
        except (OSError, EOFError, ProtocolError, TimeoutError):
            await self._discard()
            raise FsWorkerUnavailable("the fs worker exited during start-up") from None
        if not isinstance(ready, messages.Ready):
            await self._discard()
            why = ready.message if isinstance(ready, messages.Refused) else "an unexpected answer"
            raise FsWorkerUnavailable(why)
        self.protections = tuple(ready.protections)
        if self.links is not None:
            self._watch(proc)

    async def _discard(self) -> None:
        """Kill and reap the worker; whatever it was doing is lost."""
        proc, link = self._proc, self._link
        self._proc = self._link = None
        if link is not None:
            link.close()
        if proc is not None:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGKILL)
            await asyncio.to_thread(proc.wait)
            self._revive_soon(0.0)

    # --- a worker its front-end reads from directly ---------------------------

    def _watch(self, proc: subprocess.Popen[bytes]) -> None:
        """Start it again as soon as it dies: its front-end's reads wait."""
        loop = asyncio.get_running_loop()
        pidfd = os.pidfd_open(proc.pid)

        def exited() -> None:
            loop.remove_reader(pidfd)
            os.close(pidfd)
            if proc is self._proc:
                self._revive_soon(0.0)

        loop.add_reader(pidfd, exited)

    def _revive_soon(self, delay: float) -> None:
        if self.links is None or self._closed:
            return
        if self._revive is None or self._revive.done():
            self._revive = asyncio.ensure_future(self._revived(delay))

    async def _revived(self, delay: float) -> None:
        await asyncio.sleep(delay)
        # Shielded: a close() meanwhile waits for the lock, and finds (and
        # stops) a worker this started, rather than one half started.
        await asyncio.shield(self._revive_now())

    async def _revive_now(self) -> None:
        try:
            async with self._lock:
                if self._closed:
                    return
                running = self._proc is not None and self._proc.poll() is None
                current = self.links is None or self._generation == self.links.generation
                if running and current:
                    return
                if self._proc is not None:
                    await self._discard()
                await self._spawn()
        except FsWorkerUnavailable as error:
            log.warning(
                "tenant %s: its fs worker could not be restarted: %s", self.settings.tenant, error
            )
            delay, self._backoff = self._backoff, min(self._backoff * 2, REVIVE_BACKOFF_S[1])
            self._revive = None
            self._revive_soon(delay)
            return
        self._backoff = REVIVE_BACKOFF_S[0]

    def relink(self) -> None:
        """The read link was renewed (a new front-end): start the worker
        again with its new end."""
        self._revive_soon(0.0)

    @contextlib.asynccontextmanager
    async def session(self) -> AsyncIterator[WorkerSession]:
        """Exclusive use of a running worker (started anew if it had died)."""
        async with self._lock:
            if self._closed:
                raise FsWorkerUnavailable("the fs service is shutting down")
            if self._proc is not None and self._proc.poll() is not None:
                await self._discard()
            if self._proc is None:
                await self._spawn()
            yield WorkerSession(self)

    async def _exchange(self, header: dict[str, Any] | messages.Request, data: bytes) -> Reply:
        link = self._link
        if link is None:
            raise FsWorkerUnavailable("the fs worker is not running")
        if isinstance(header, dict):
            try:
                request = messages.request_of(header)
            except ProtocolError as error:
                raise Refusal("INTERNAL", str(error)) from None
        else:
            request = header  # already one of ours (a read's hot path)
        try:
            # asyncio.timeout, not wait_for: no task and no extra pass of the
            # loop per exchange (a read's hot path).
            await link.send(request, data)
            async with asyncio.timeout(self.op_timeout_s):
                received, content, fd = await link.receive(0)
            try:
                answer = messages.decode_answer(received)
            except ProtocolError:
                if fd is not None:
                    os.close(fd)
                raise
        except TimeoutError:
            await self._discard()
            raise FsWorkerUnavailable(
                f"the fs worker did not answer within {self.op_timeout_s:g} s; it is restarted"
            ) from None
        except (OSError, EOFError, ProtocolError):
            await self._discard()
            raise FsWorkerUnavailable(
                "the fs worker died during the request; it is restarted"
            ) from None
        except asyncio.CancelledError:
            # the reply would arrive for nobody and desynchronise the link
            await asyncio.shield(self._discard())
            raise
        if isinstance(answer, messages.Refused):
            if fd is not None:
                os.close(fd)
            # The worker parses untrusted paths: its reason is believed only
            # if it is one the wire has.
            raise Refusal(Refusal.reason_of(answer.reason), answer.message)
        return Reply(messages.answer_fields(answer), content, fd)

    async def close(self) -> None:
        """Stop the worker: EOF first (it aborts a pending write and exits),
        SIGKILL after a grace period. Waits for any session in progress."""
        self._closed = True
        if self._revive is not None:
            self._revive.cancel()
        async with self._lock:
            proc, link = self._proc, self._link
            self._proc = self._link = None
            if link is not None:
                link.close()
            if proc is None:
                return
            try:
                await asyncio.to_thread(proc.wait, CLOSE_GRACE_S)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    proc.send_signal(signal.SIGKILL)
                await asyncio.to_thread(proc.wait)


class WorkerSession:
    """Request / reply exchanges while the worker's lock is held."""

    def __init__(self, worker: FsWorker) -> None:
        self._worker = worker

    async def exchange(self, header: dict[str, Any] | messages.Request, data: bytes = b"") -> Reply:
        """Send one request (a dict with its `op`, or the typed request),
        wait for its reply. Raises Refusal for an
        `ok: false` reply, FsWorkerUnavailable if the worker died or hung."""
        return await self._worker._exchange(header, data)
