"""The file-change watcher of one tenant (decision 0030): a thread of the
daemon reading the tenant's fanotify group and the proc connector, naming each
event's path and the spawn it belongs to, and keeping each spawn's Changes
until the spawn asks for them.

    watcher = FsChangesWatcher.start(tenant, mount, roots, max_paths)
    watcher.spawner = spawner_client             # its .pid: the roots' parent
    watcher.begin(spawn_pid, cgroup_name)        # once the spawn's pid is known
    changes = await watcher.finish(spawn_pid)    # once its tree is dead

A pid is resolved when its event is read, even if the process has exited and
been reaped by then: its entry stays until the fanotify queue has been read
past its exit. Without the proc connector, or after lost fork events, the
cgroup fallback (attribution) names only living processes.

Memory is bounded: the directory path cache, the pid table and the unclaimed
spawns have fixed caps.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import os
import select
import socket
import threading
import time
from collections import deque
from pathlib import Path
from typing import Any, Protocol

from hostcapd.sandbox.fschanges import fanotify, procconn
from hostcapd.sandbox.fschanges.attribution import Claim, cgroup_of, claimant
from hostcapd.sandbox.fschanges.changes import Changes, bits_of
from hostcapd.sandbox.fschanges.fanotify import (
    FAN_CREATE,
    FAN_DELETE,
    FAN_MOVED_FROM,
    FAN_MOVED_TO,
    FAN_ONDIR,
    FAN_Q_OVERFLOW,
    META,
    READ_SIZE,
)

log = logging.getLogger("hostcapd.fschanges")

#: Caps: directory handles remembered, pids remembered, unclaimed roots.
DIR_CACHE_MAX = 65536
PID_TABLE_MAX = 262144
UNCLAIMED_MAX = 256
#: How long the reader lets events gather after a wake-up (none is lost: the
#: kernel queues 16,384, and a spawn churning 25,000 files a second queues
#: about 1,000 in this time; a spawn asking for its changes cuts it short).
#: 20 ms, not 5: the reader's CPU per 10,000-file unpack 41 -> 30 ms here.
BATCH_SECONDS = 0.02
#: How long a spawn waits for its changes before recording them as incomplete.
FINISH_TIMEOUT = 60.0


class _Spawner(Protocol):
    pid: int


class FsChangesWatcher:
    """The fanotify reader of one tenant's file system (a thread of the daemon)."""

    def __init__(self, tenant: str, mount: Path, roots: tuple[Path, ...], max_paths: int) -> None:
        self.tenant = tenant
        self.mount = mount
        self.roots = roots
        self.max_paths = max_paths
        self.spawner: _Spawner | None = None
        self._prefix = str(mount) + "/root-"
        self._lock = threading.Lock()
        self._fan = -1
        self._mount_fd = -1
        self._nl: socket.socket | None = None
        self._wake = os.eventfd(0, os.EFD_CLOEXEC | os.EFD_NONBLOCK)
        self._wake_event = threading.Event()
        self._stopping = False
        self._thread: threading.Thread | None = None
        #: pid -> its spawn's root pid (the spawner's child it descends from).
        self._root: dict[int, int] = {}
        self._exited: list[int] = []
        #: root pid -> what its processes changed.
        self._changes: dict[int, Changes] = {}
        self._claims: dict[int, Claim] = {}
        #: directory handle -> (its path in the image, as the tenant sees it).
        self._dirs: dict[bytes, tuple[str, str | None]] = {}
        self._requests: deque[tuple[int, asyncio.AbstractEventLoop, asyncio.Future[Changes]]] = (
            deque()
        )
        self.unattributed = 0
        self.overflows = 0
        #: Fork events lost (ENOBUFS): the table may be incomplete since.
        self.tracking_lost = 0
        self.tracking = False

    # --- set-up ---------------------------------------------------------------

    @classmethod
    def start(
        cls, tenant: str, mount: Path, roots: tuple[Path, ...], max_paths: int
    ) -> FsChangesWatcher:
        """Mark the file system and start reading; FsChangesUnavailable if not."""
        watcher = cls(tenant, mount, roots, max_paths)
        try:
            watcher._open()
        except BaseException:
            watcher.close()
            raise
        watcher._thread = threading.Thread(
            target=watcher._loop, name=f"fschanges-{tenant}", daemon=True
        )
        watcher._thread.start()
        return watcher

    def _open(self) -> None:
        self._fan = fanotify.open_group(self.mount)
        self._mount_fd = os.open(self.mount, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            nl = procconn.listen()
        except OSError as error:
            log.warning(
                "tenant %s: no proc connector (%s): file changes of processes that "
                "exit before their event is read are not attributed",
                self.tenant,
                error,
            )
        else:
            self._nl = nl
            self.tracking = True

    def close(self) -> None:
        self._stopping = True
        self._wake_event.set()
        with contextlib.suppress(OSError):
            os.eventfd_write(self._wake, 1)
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(5)
        for fd in (self._fan, self._mount_fd):
            if fd >= 0:
                with contextlib.suppress(OSError):
                    os.close(fd)
        self._fan = self._mount_fd = -1
        if self._nl is not None:
            self._nl.close()
            self._nl = None
        with contextlib.suppress(OSError):
            os.close(self._wake)

    # --- the spawn's side (event loop) ----------------------------------------

    def begin(self, pid: int, cgroup_name: str = "") -> None:
        """Spawn `pid` (the spawner's child) has started: its changes are wanted."""
        with self._lock:
            self._claims[pid] = Claim(
                cgroup_name, self.unattributed, self.overflows, self.tracking_lost
            )

    async def finish(self, pid: int) -> Changes:
        """What spawn `pid` changed; call once its tree is dead, so that every
        event it made is queued: the answer comes after the queue is read empty."""
        if self._stopping or self._thread is None or not self._thread.is_alive():
            # Closed (a reload replaced it): nothing more can be said.
            return Changes(self.max_paths, unresolved=1, tracking=False)
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Changes] = loop.create_future()
        with self._lock:
            self._requests.append((pid, loop, future))
        os.eventfd_write(self._wake, 1)
        self._wake_event.set()
        try:
            return await asyncio.wait_for(future, FINISH_TIMEOUT)
        except TimeoutError:
            log.error("tenant %s: the file-change reader did not answer", self.tenant)
            return Changes(self.max_paths, unresolved=1, tracking=False)

    # --- the reader thread -------------------------------------------------------

    def _loop(self) -> None:
        poller = select.poll()
        poller.register(self._fan, select.POLLIN)
        poller.register(self._wake, select.POLLIN)
        if self._nl is not None:
            poller.register(self._nl.fileno(), select.POLLIN)
        while not self._stopping:
            try:
                poller.poll()
                if not self._requests:
                    # Let events gather: one wake-up reads many (a wake-up
                    # per event cost more than the events); a spawn's
                    # request for its changes is answered without the wait.
                    self._wake_event.wait(BATCH_SECONDS)
                with contextlib.suppress(BlockingIOError):
                    os.eventfd_read(self._wake)
                self._wake_event.clear()
                with self._lock:
                    requests = list(self._requests)
                    self._requests.clear()
                self._read_forks()
                exited, self._exited = self._exited, []
                self._read_events()
                for pid in exited:  # read past their exit: no event of theirs is left
                    self._root.pop(pid, None)
                for pid, loop, future in requests:
                    loop.call_soon_threadsafe(_set, future, self._take(pid))
            except Exception:
                if self._stopping:
                    return
                log.exception("tenant %s: the file-change reader failed", self.tenant)
                time.sleep(0.1)

    def _take(self, pid: int) -> Changes:
        with self._lock:
            claim = self._claims.pop(pid, None)
        changes = self._changes.pop(pid, None) or Changes(self.max_paths)
        for child in [p for p, root in self._root.items() if root == pid]:
            del self._root[child]
        if claim is not None:
            changes.unattributed = self.unattributed - claim.unattributed_mark
            changes.queue_overflows = self.overflows - claim.overflow_mark
            changes.tracking = self.tracking and self.tracking_lost == claim.lost_mark
        return changes

    def _read_forks(self) -> None:
        nl = self._nl
        if nl is None:
            return
        spawner = self.spawner.pid if self.spawner is not None else 0
        table = self._root
        while True:
            try:
                data = nl.recv(procconn.RECV_SIZE)
            except BlockingIOError:
                return
            except OSError as error:
                if error.errno == errno.ENOBUFS:
                    self.tracking_lost += 1
                    log.warning("tenant %s: fork events lost (ENOBUFS)", self.tenant)
                    continue
                raise
            procconn.apply(data, spawner, table, self._exited)
            if len(table) > PID_TABLE_MAX:  # never reached by a live tree within pids.max
                self.tracking_lost += 1
                table.clear()

    def _read_events(self) -> None:
        while True:
            try:
                data = os.read(self._fan, READ_SIZE)
            except BlockingIOError:
                return
            offset = 0
            while offset + META.size <= len(data):
                event_len, _vers, _res, meta_len, mask, fd, pid = META.unpack_from(data, offset)
                if event_len < META.size:
                    return
                if fd >= 0:
                    os.close(fd)
                if mask & FAN_Q_OVERFLOW:
                    self.overflows += 1
                    log.warning("tenant %s: fanotify queue overflowed", self.tenant)
                else:
                    self._event(data, offset + meta_len, offset + event_len, mask, pid)
                offset += event_len

    def _event(self, data: bytes, at: int, end: int, mask: int, pid: int) -> None:
        # The hot path (one call per event): plain dict look-ups, no loops
        # but over the event's few info records.
        root = self._root.get(pid)
        if root is None:
            root = self._resolve(pid)
            if root is None:
                return
        # The target's handle matters only for a directory (the path cache).
        dir_handle, target, name = fanotify.event_info(data, at, end, bool(mask & FAN_ONDIR))
        changes = self._changes.get(root)
        if changes is None:
            changes = self._changes[root] = Changes(self.max_paths)
            if len(self._changes) > UNCLAIMED_MAX:
                self._drop_unclaimed()
        place = self._dirs.get(dir_handle) if dir_handle else None
        if place is None:
            place = self._dir_place(dir_handle) if dir_handle else None
            if place is None:
                changes.unresolved += 1
                return
        inside, shown = place
        if mask & FAN_ONDIR and target:
            if mask & FAN_MOVED_FROM:
                self._dirs.clear()  # every path beneath it moved
            elif mask & (FAN_CREATE | FAN_MOVED_TO):
                self._remember(target, f"{inside}/{name}")
            elif mask & FAN_DELETE:
                self._dirs.pop(target, None)
        if shown is None:
            return  # not beneath a root (lost+found, the image's top)
        changes.add(f"{shown}/{name}" if name else shown, bits_of(mask))

    def _resolve(self, pid: int) -> int | None:
        """The root pid of the spawn `pid` belongs to; None: not a spawn's."""
        root = self._root.get(pid)
        if root is not None:
            return root
        self._read_forks()  # a fork queued since the last look
        root = self._root.get(pid)
        if root is not None:
            return root
        groups = cgroup_of(pid)
        if groups is None:  # gone: no spawn can be named for it
            self.unattributed += 1
            return None
        with self._lock:
            claims = list(self._claims.items())
        return claimant(groups, claims)

    def _drop_unclaimed(self) -> None:
        with self._lock:
            claimed = set(self._claims)
        for root in [r for r in self._changes if r not in claimed][: UNCLAIMED_MAX // 2]:
            del self._changes[root]

    def _remember(self, handle: bytes, inside: str) -> None:
        if len(self._dirs) >= DIR_CACHE_MAX:
            self._dirs.clear()
        self._dirs[handle] = (inside, self._tenant_path(inside))

    def _dir_place(self, handle: bytes) -> tuple[str, str | None] | None:
        """A directory's path in the daemon's view of the image, and as the
        tenant sees it (None when beneath no root); None when it is gone."""
        fd = fanotify.open_by_handle(self._mount_fd, handle)
        if fd < 0:
            return None
        try:
            inside = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            return None
        finally:
            os.close(fd)
        if inside.endswith(" (deleted)"):
            return None
        self._remember(handle, inside)
        return self._dirs[handle]

    def _tenant_path(self, inside: str) -> str | None:
        """`<mount>/root-<i>/rest` as the tenant sees it: `<root i>/rest`."""
        if not inside.startswith(self._prefix):
            return None
        number, _, rest = inside[len(self._prefix) :].partition("/")
        if not number.isdigit() or int(number) >= len(self.roots):
            return None
        root = str(self.roots[int(number)])
        return f"{root}/{rest}" if rest else root


def _set(future: asyncio.Future[Any], value: Any) -> None:
    if not future.done():
        future.set_result(value)
