"""The front-end's handle on a tenant's fs worker process.

    worker = FsWorker(settings)
    await worker.start()                       # FsWorkerUnavailable if it refuses to serve
    async with worker.session() as session:    # one request at a time
        header, data = await session.exchange({"op": "stat", "path": "a.txt"})
    await worker.close()                       # the process is gone when this returns

One worker per tenant, requests serialised by an asyncio lock: the worker is
single-threaded and a write is a prepare / audit / commit exchange that must
not interleave with anything. A session is the unit that holds the lock.

The worker is a fresh interpreter started with subprocess (vfork + exec,
no preexec_fn): the front-end has gRPC's threads and must never fork. If
the worker dies or stops answering within `op_timeout_s`, it is killed, the
request in flight fails with `FsWorkerUnavailable`, and the next session
starts a new one. Start it from the event loop's thread: the worker's
parent-death signal fires when the thread that spawned it exits.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import socket
import subprocess
import sys
from collections.abc import AsyncIterator
from typing import Any

from hostcapd.fs.errors import FsRefusal
from hostcapd.fs.protocol import ProtocolError, read_frame_async, write_frame_async
from hostcapd.fs.worker import Applied, WorkerSettings

START_TIMEOUT_S = 30.0
CLOSE_GRACE_S = 2.0
_STREAM_LIMIT = 1 << 20


class FsWorkerUnavailable(Exception):
    """The worker cannot serve: it refused to start, died, or hung."""


class FsWorker:
    """Owns one worker process, its link, and the lock that serialises it."""

    def __init__(
        self, settings: WorkerSettings, *, max_read_bytes: int, op_timeout_s: float
    ) -> None:
        self.settings = settings
        self.op_timeout_s = op_timeout_s
        #: Bound on content the worker may send back (a read's data).
        self._max_reply_data = max_read_bytes
        self._lock = asyncio.Lock()
        self._proc: subprocess.Popen[bytes] | None = None
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._closed = False
        self.protections: tuple[Applied, ...] = ()
        #: How many times a worker was started (1 after start()).
        self.starts = 0

    @property
    def pid(self) -> int | None:
        """The live worker's pid (None when none runs)."""
        return self._proc.pid if self._proc is not None else None

    async def start(self) -> None:
        async with self._lock:
            await self._spawn()

    async def _spawn(self) -> None:
        parent, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            # -I: no PYTHON* variables, no user site, no cwd on sys.path.
            proc = subprocess.Popen(
                [sys.executable, "-I", "-m", "hostcapd.fs.worker", str(child.fileno())],
                pass_fds=(child.fileno(),),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                cwd="/",
                env={"LC_ALL": "C.UTF-8"},
                start_new_session=True,
            )
        except OSError as error:
            parent.close()
            raise FsWorkerUnavailable(f"cannot start the fs worker: {error.strerror}") from None
        finally:
            child.close()
        self._proc = proc
        self.starts += 1
        self._reader, self._writer = await asyncio.open_unix_connection(
            sock=parent, limit=_STREAM_LIMIT
        )
        try:
            await write_frame_async(self._writer, self.settings.to_hello())
            ready, _ = await asyncio.wait_for(read_frame_async(self._reader, 0), START_TIMEOUT_S)
        except (OSError, EOFError, asyncio.IncompleteReadError, ProtocolError, TimeoutError):
            await self._discard()
            raise FsWorkerUnavailable("the fs worker exited during start-up") from None
        if not ready.get("ok"):
            await self._discard()
            raise FsWorkerUnavailable(str(ready.get("message", "the fs worker refused to start")))
        self.protections = tuple(Applied(**item) for item in ready["protections"])

    async def _discard(self) -> None:
        """Kill and reap the worker; whatever it was doing is lost."""
        proc, writer = self._proc, self._writer
        self._proc = self._reader = self._writer = None
        if writer is not None:
            writer.close()
        if proc is not None:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGKILL)
            await asyncio.to_thread(proc.wait)

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

    async def _exchange(self, header: dict[str, Any], data: bytes) -> tuple[dict[str, Any], bytes]:
        reader, writer = self._reader, self._writer
        if reader is None or writer is None:
            raise FsWorkerUnavailable("the fs worker is not running")
        try:
            await write_frame_async(writer, header, data)
            reply, content = await asyncio.wait_for(
                read_frame_async(reader, self._max_reply_data), self.op_timeout_s
            )
        except TimeoutError:
            await self._discard()
            raise FsWorkerUnavailable(
                f"the fs worker did not answer within {self.op_timeout_s:g} s and was restarted"
            ) from None
        except (OSError, asyncio.IncompleteReadError, ProtocolError):
            await self._discard()
            raise FsWorkerUnavailable(
                "the fs worker died during the request and was restarted"
            ) from None
        except asyncio.CancelledError:
            # the reply would arrive for nobody and desynchronise the link
            await asyncio.shield(self._discard())
            raise
        if not reply.get("ok"):
            raise FsRefusal(str(reply.get("reason")), str(reply.get("message", "")))
        return reply, content

    async def close(self) -> None:
        """Stop the worker: EOF first (it aborts a pending write and exits),
        SIGKILL after a grace period. Waits for any session in progress."""
        self._closed = True
        async with self._lock:
            proc, writer = self._proc, self._writer
            self._proc = self._reader = self._writer = None
            if writer is not None:
                writer.close()
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

    async def exchange(
        self, header: dict[str, Any], data: bytes = b""
    ) -> tuple[dict[str, Any], bytes]:
        """Send one request, wait for its reply. Raises FsRefusal for an
        `ok: false` reply, FsWorkerUnavailable if the worker died or hung."""
        return await self._worker._exchange(header, data)
