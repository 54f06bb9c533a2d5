"""The files each spawn changed, from the kernel's fanotify events on the
tenant's own file system (its disk budget's image), attributed to the spawn
by process ancestry (decision 0030).

    watcher = FsChangesWatcher.start(tenant, budget, max_paths)
    watcher.spawner = spawner_client             # its .pid: the roots' parent
    watcher.begin(spawn_pid, cgroup_name)        # once the spawn's pid is known
    changes = await watcher.finish(spawn_pid)    # once its tree is dead

One thread per watched tenant reads two kernel sources and nothing else (no
byte of them comes from a tenant's program):

- a fanotify group with a FAN_MARK_FILESYSTEM mark on the image's mount,
  reporting the parent directory's file handle and the entry's name
  (FAN_REPORT_DFID_NAME_TARGET) for creations, deletions, renames and
  writes, and the pid (tgid) that made each;
- the proc connector (netlink, NETLINK_CONNECTOR), whose fork events give
  each new process's parent before the process can run. A process whose
  parent is the spawner is a spawn's root (its init, or its command without
  a pid namespace); every process forked beneath it belongs to it, whatever
  it did later (setsid, double fork, reparenting). A pid is resolved when
  its event is read, even if the process has exited and been reaped by then
  (a `mv` or `rm` usually has): its entry stays until the fanotify queue
  has been read past its exit.

Where the proc connector is not available (a daemon in a pid namespace of its
own, netlink refused), or lost events (ENOBUFS), a pid is looked up in
/proc/<pid>/cgroup, which only works while the process lives; an event no
spawn can be named for is counted (`unattributed_events`), never guessed.

Memory is bounded: per spawn at most `max_paths` paths are kept, each once
with its kinds of change; events beyond are counted by kind. The directory
path cache and the pid table have fixed caps.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import errno
import hashlib
import logging
import os
import select
import socket
import stat
import struct
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from hostcapd import linux

log = logging.getLogger("hostcapd.fschanges")

# <linux/fanotify.h>
FAN_MODIFY = 0x2
FAN_MOVED_FROM = 0x40
FAN_MOVED_TO = 0x80
FAN_CREATE = 0x100
FAN_DELETE = 0x200
FAN_Q_OVERFLOW = 0x4000
FAN_ONDIR = 0x40000000
FAN_CLOEXEC = 0x1
FAN_NONBLOCK = 0x2
FAN_CLASS_NOTIF = 0x0
FAN_REPORT_FID = 0x200
FAN_REPORT_DIR_FID = 0x400
FAN_REPORT_NAME = 0x800
FAN_REPORT_TARGET_FID = 0x1000
FAN_MARK_ADD = 0x1
FAN_MARK_FILESYSTEM = 0x100
INFO_FID, INFO_DFID_NAME, INFO_DFID = 1, 2, 3
INIT_FLAGS = (
    FAN_CLASS_NOTIF
    | FAN_CLOEXEC
    | FAN_NONBLOCK
    | FAN_REPORT_FID
    | FAN_REPORT_DIR_FID
    | FAN_REPORT_NAME
    | FAN_REPORT_TARGET_FID
)
MASK = FAN_CREATE | FAN_DELETE | FAN_MOVED_FROM | FAN_MOVED_TO | FAN_MODIFY | FAN_ONDIR
_AT_FDCWD = -100

# <linux/connector.h>, <linux/cn_proc.h>
NETLINK_CONNECTOR = 11
CN_IDX_PROC = 1
CN_VAL_PROC = 1
PROC_CN_MCAST_LISTEN = 1
PROC_EVENT_FORK = 0x1
PROC_EVENT_EXIT = 0x80000000
_NLMSG_HDR = struct.Struct("=IHHII")
_CN_MSG = struct.Struct("=IIIIHH")
_PROC_EVENT = struct.Struct("=IIQ")
_FORK = struct.Struct("=iiii")
_EXIT = struct.Struct("=ii")

_META = struct.Struct("=IBBHQii")
_INFO_HDR = struct.Struct("=BBH")
_HANDLE_HDR = struct.Struct("=Ii")

#: The kinds of change, in the order a record lists them.
KINDS = ("created", "modified", "deleted", "renamed_from", "renamed_to")
_KIND_BITS = {
    FAN_CREATE: 1,
    FAN_MODIFY: 2,
    FAN_DELETE: 4,
    FAN_MOVED_FROM: 8,
    FAN_MOVED_TO: 16,
}
_DIR_BIT = 32
#: The kinds named by each combination of kind bits.
_KINDS_OF = tuple(
    tuple(kind for i, kind in enumerate(KINDS) if bits & (1 << i)) for bits in range(32)
)
#: Kind bits (and _DIR_BIT) of each event mask seen.
_BITS: dict[int, int] = {}


def _bits(mask: int) -> int:
    bits = _DIR_BIT if mask & FAN_ONDIR else 0
    for fan_bit, kind_bit in _KIND_BITS.items():
        if mask & fan_bit:
            bits |= kind_bit
    return bits


#: Caps: directory handles remembered, pids remembered, unclaimed roots.
DIR_CACHE_MAX = 65536
PID_TABLE_MAX = 262144
UNCLAIMED_MAX = 256
READ_SIZE = 256 * 1024
#: How long the reader lets events gather after a wake-up (none is lost: the
#: kernel queues 16,384; a spawn asking for its changes cuts it short).
BATCH_SECONDS = 0.005
#: How long a spawn waits for its changes before recording them as incomplete.
FINISH_TIMEOUT = 60.0

_libc = ctypes.CDLL(None, use_errno=True)
_libc.fanotify_init.argtypes = [ctypes.c_uint, ctypes.c_uint]
_libc.fanotify_mark.argtypes = [
    ctypes.c_int,
    ctypes.c_uint,
    ctypes.c_uint64,
    ctypes.c_int,
    ctypes.c_char_p,
]
_libc.open_by_handle_at.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int]
_libc.name_to_handle_at.argtypes = [
    ctypes.c_int,
    ctypes.c_char_p,
    ctypes.c_char_p,
    ctypes.POINTER(ctypes.c_int),
    ctypes.c_int,
]


class FsChangesUnavailable(Exception):
    """File changes cannot be recorded on this host or for this tenant."""


def probe() -> tuple[bool, str]:
    """Whether this kernel offers what the watcher needs (and we may use it)."""
    if os.geteuid() != 0:
        return False, "daemon is not root (fanotify needs CAP_SYS_ADMIN)"
    fd = _libc.fanotify_init(INIT_FLAGS, os.O_RDONLY)
    if fd < 0:
        err = ctypes.get_errno()
        return False, f"fanotify_init with fid reporting: {os.strerror(err)} (kernel 5.17+ needed)"
    os.close(fd)
    # Naming a directory from its handle needs CAP_DAC_READ_SEARCH (a unit's
    # bounding set may lack it): try it on the root directory.
    handle = ctypes.create_string_buffer(_HANDLE_HDR.pack(128, 0) + bytes(128))
    mount_id = ctypes.c_int()
    if _libc.name_to_handle_at(_AT_FDCWD, b"/", handle, ctypes.byref(mount_id), 0) < 0:
        return False, f"name_to_handle_at: {os.strerror(ctypes.get_errno())}"
    root = os.open("/", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        opened = _libc.open_by_handle_at(root, handle.raw, os.O_PATH | os.O_CLOEXEC)
        if opened < 0:
            err = ctypes.get_errno()
            return False, f"open_by_handle_at: {os.strerror(err)} (needs CAP_DAC_READ_SEARCH)"
        os.close(opened)
    finally:
        os.close(root)
    return True, "fanotify (filesystem mark, fid and name) and the proc connector"


class _Spawner(Protocol):
    pid: int


@dataclass
class Changes:
    """What one spawn changed: at most `cap` paths, the rest counted."""

    cap: int
    #: path -> kind bits (and _DIR_BIT).
    paths: dict[str, int] = field(default_factory=dict)
    #: Events on paths beyond the cap, by kind.
    beyond: dict[str, int] = field(default_factory=dict)
    #: Events whose path could not be named (its directory was gone).
    unresolved: int = 0
    #: Overflows and unattributed events while it ran (set by finish).
    queue_overflows: int = 0
    unattributed: int = 0
    tracking: bool = True

    def add(self, path: str, bits: int) -> None:
        paths = self.paths
        old = paths.get(path)
        if old is not None:
            paths[path] = old | bits
        elif len(paths) < self.cap:
            paths[path] = bits
        else:
            beyond = self.beyond
            for kind in _KINDS_OF[bits & 31]:
                beyond[kind] = beyond.get(kind, 0) + 1

    def listed(self) -> list[tuple[str, list[str], bool]]:
        """(path, kinds, is a directory), sorted by path."""
        return [
            (
                path,
                [kind for bit, kind in zip((1, 2, 4, 8, 16), KINDS, strict=True) if bits & bit],
                bool(bits & _DIR_BIT),
            )
            for path, bits in sorted(self.paths.items())
        ]


@dataclass
class _Claim:
    cgroup_name: str
    unattributed_mark: int
    overflow_mark: int
    lost_mark: int


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
        self._claims: dict[int, _Claim] = {}
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
        fd = _libc.fanotify_init(INIT_FLAGS, os.O_RDONLY | os.O_CLOEXEC)
        if fd < 0:
            raise FsChangesUnavailable(f"fanotify_init: {os.strerror(ctypes.get_errno())}")
        self._fan = fd
        if (
            _libc.fanotify_mark(
                fd, FAN_MARK_ADD | FAN_MARK_FILESYSTEM, MASK, _AT_FDCWD, bytes(self.mount)
            )
            < 0
        ):
            raise FsChangesUnavailable(
                f"fanotify_mark on {self.mount}: {os.strerror(ctypes.get_errno())}"
            )
        self._mount_fd = os.open(self.mount, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            nl = socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC,
                               NETLINK_CONNECTOR)  # fmt: skip
            nl.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
            nl.bind((0, CN_IDX_PROC))
            payload = struct.pack("=I", PROC_CN_MCAST_LISTEN)
            cn = _CN_MSG.pack(CN_IDX_PROC, CN_VAL_PROC, 0, 0, len(payload), 0) + payload
            nl.send(_NLMSG_HDR.pack(_NLMSG_HDR.size + len(cn), 3, 0, 0, 0) + cn)
            nl.setblocking(False)
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
            self._claims[pid] = _Claim(
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
                data = nl.recv(65536)
            except BlockingIOError:
                return
            except OSError as error:
                if error.errno == errno.ENOBUFS:
                    self.tracking_lost += 1
                    log.warning("tenant %s: fork events lost (ENOBUFS)", self.tenant)
                    continue
                raise
            offset = 0
            while offset + _NLMSG_HDR.size <= len(data):
                length = _NLMSG_HDR.unpack_from(data, offset)[0]
                if length < _NLMSG_HDR.size:
                    break
                body = offset + _NLMSG_HDR.size + _CN_MSG.size
                if body + _PROC_EVENT.size <= offset + length:
                    what = _PROC_EVENT.unpack_from(data, body)[0]
                    at = body + _PROC_EVENT.size
                    if what == PROC_EVENT_FORK:
                        _ppid, ptgid, cpid, ctgid = _FORK.unpack_from(data, at)
                        if cpid == ctgid:  # a process, not a thread
                            if ptgid == spawner and spawner:
                                table[ctgid] = ctgid
                            elif ptgid in table:
                                table[ctgid] = table[ptgid]
                            else:
                                table.pop(ctgid, None)  # a reused pid is not its old self
                    elif what == PROC_EVENT_EXIT:
                        pid, tgid = _EXIT.unpack_from(data, at)
                        if pid == tgid and tgid in table:
                            self._exited.append(tgid)
                offset += (length + 3) & ~3
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
            while offset + _META.size <= len(data):
                event_len, _vers, _res, meta_len, mask, fd, pid = _META.unpack_from(data, offset)
                if event_len < _META.size:
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
        dir_handle = target = b""
        name = ""
        while at < end:
            info_type, _pad, length = _INFO_HDR.unpack_from(data, at)
            if length < _INFO_HDR.size:
                break
            handle_at = at + 12  # past the header and the fsid
            handle_end = handle_at + 8 + _HANDLE_HDR.unpack_from(data, handle_at)[0]
            if info_type == INFO_FID:
                target = data[handle_at:handle_end]
            else:
                dir_handle = data[handle_at:handle_end]
                if info_type == INFO_DFID_NAME:
                    zero = data.find(b"\0", handle_end, at + length)
                    raw = data[handle_end : zero if zero >= 0 else at + length]
                    name = raw.decode("utf-8", "surrogateescape")
            at += length
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
        bits = _BITS.get(mask)
        if bits is None:
            bits = _BITS[mask] = _bits(mask)
        changes.add(f"{shown}/{name}" if name else shown, bits)

    def _resolve(self, pid: int) -> int | None:
        """The root pid of the spawn `pid` belongs to; None: not a spawn's."""
        root = self._root.get(pid)
        if root is not None:
            return root
        self._read_forks()  # a fork queued since the last look
        root = self._root.get(pid)
        if root is not None:
            return root
        try:
            with open(f"/proc/{pid}/cgroup", encoding="utf-8", errors="replace") as f:
                groups = f.read()
        except OSError:
            self.unattributed += 1
            return None
        with self._lock:
            claims = list(self._claims.items())
        for root_pid, claim in claims:
            if claim.cgroup_name and (
                f"/{claim.cgroup_name}\n" in groups or f"/{claim.cgroup_name}/" in groups
            ):
                return root_pid
        return None  # a living process of no spawn: the fs worker, an administrator

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
        fd = _libc.open_by_handle_at(self._mount_fd, handle, os.O_PATH | os.O_CLOEXEC)
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


def describe(
    changes: Changes, roots: tuple[Path, ...], sizes: bool, sha256_max_bytes: int
) -> list[dict[str, Any]]:
    """The record's `changes`: each listed path with its kinds, and for a
    regular file that exists now (created or modified, not since removed),
    its size and, up to `sha256_max_bytes`, its sha256. Files are opened
    beneath their root without following any symlink. Runs off the loop."""
    root_fds: dict[str, int] = {}
    out: list[dict[str, Any]] = []
    try:
        for path, kinds, is_dir in changes.listed():
            entry: dict[str, Any] = {"path": path, "kinds": kinds}
            if is_dir:
                entry["dir"] = True
            elif sizes and ("created" in kinds or "modified" in kinds or "renamed_to" in kinds):
                _measure(entry, path, roots, root_fds, sha256_max_bytes)
            out.append(entry)
    finally:
        for fd in root_fds.values():
            os.close(fd)
    return out


def _measure(
    entry: dict[str, Any],
    path: str,
    roots: tuple[Path, ...],
    root_fds: dict[str, int],
    sha256_max_bytes: int,
) -> None:
    for root in map(str, roots):
        if path.startswith(root + "/"):
            break
    else:
        return
    if root not in root_fds:
        root_fds[root] = os.open(root, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        fd = linux.openat2(
            root_fds[root],
            path[len(root) + 1 :],
            os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY,
            linux.BENEATH | linux.RESOLVE_NO_SYMLINKS,
        )
    except OSError:
        return  # gone since (removed, or a symlink: not followed)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return
        entry["size"] = st.st_size
        if sha256_max_bytes > 0 and st.st_size <= sha256_max_bytes:
            digest = hashlib.sha256()
            offset = 0
            while chunk := os.pread(fd, 1 << 20, offset):
                digest.update(chunk)
                offset += len(chunk)
            entry["sha256"] = digest.hexdigest()
    finally:
        os.close(fd)
