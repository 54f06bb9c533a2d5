"""The audit log writer: hash-chained hostcapd.audit/v1 JSON Lines.

Durability: `write_durable` returns only once its line is appended *and*
fdatasync'd (concurrent calls share one fsync: group commit, done on a
dedicated thread, never the event loop's); `write` appends at once and the
line is fdatasync'd within ``settings.fsync_interval_ms``. A line is written
with one ``write(2)`` of the whole line; if that fails part-way the partial
line is cut off again, so the file always ends on a whole record.

The log is rotated by size: the current file is renamed to
``<name>.<last seq, 12 digits>`` and a new one starts with an ``audit.rotate``
record continuing the chain. The writer holds an exclusive lock
(``.<name>.lock`` beside the log) so two daemons never interleave one chain.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import contextlib
import errno
import fcntl
import functools
import grp
import hashlib
import logging
import os
import re
import time
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hostcap_proto.audit import (
    GENESIS_HASH,
    SCHEMA,
    AuditRecordError,
    parse_line,
    sealed_line,
    validate_event_fields,
)

from hostcapd.audit.journal import JOURNAL_SOCKET, JournalMirror
from hostcapd.audit.redact import bound_argv, redact_argv
from hostcapd.config import AuditSettings

_log = logging.getLogger("hostcapd.audit")

_TAIL_BLOCK = 64 * 1024
#: Records kept while the log finds no room (beyond this the oldest go: the
#: job ledger closes their spawns at the next start), and how often they are
#: retried when nothing else is written.
MAX_DEFERRED = 10_000
DEFERRED_RETRY_S = 1.0
# Cheap pre-filter for the ledger scan: canonical JSON writes the top-level
# event as exactly this (a nested "event" key is checked after parsing).
_SPAWN_EVENT_MARK = b'"event":"process.ex'


class AuditUnavailable(Exception):
    """The audit log cannot be written; the action it would record must not happen."""


class AuditSubscriptionLagged(Exception):
    """A subscriber fell too far behind; records were not delivered to it."""


@dataclass
class _Recovered:
    torn_bytes: int
    torn_sha256: str


@functools.lru_cache(maxsize=2)
def _utc_second(seconds: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds))


def _now() -> str:
    """The current UTC time as RFC 3339 with microseconds, ``2026-12-02T12:49:35.006190Z``.

    Records come many a second: the date and time of day are formatted once
    a second, only the microseconds each time."""
    seconds, nanoseconds = divmod(time.time_ns(), 1_000_000_000)
    return f"{_utc_second(seconds)}.{nanoseconds // 1000:06d}Z"


def _event_id() -> str:
    """A random (version 4) UUID as 32 hex digits, like ``uuid.uuid4().hex``,
    without building a UUID object."""
    raw = bytearray(os.urandom(16))
    raw[6] = (raw[6] & 0x0F) | 0x40  # version 4
    raw[8] = (raw[8] & 0x3F) | 0x80  # the RFC 4122 variant
    return raw.hex()


def _rotated_pattern(name: str) -> re.Pattern[str]:
    return re.compile(re.escape(name) + r"\.(\d+)")


def rotated_files(path: Path) -> list[Path]:
    """The rotated files of the log at `path`, oldest first."""
    pattern = _rotated_pattern(path.name)
    try:
        names = os.listdir(path.parent)
    except OSError:
        return []
    found = [(int(m.group(1)), n) for n in names if (m := pattern.fullmatch(n))]
    return [path.parent / n for _, n in sorted(found)]


def _read_tail(fd: int, size: int) -> tuple[bytes | None, int, bytes]:
    """The last complete line of the file (None if none), the offset where the
    bytes after it start, and those bytes (a torn line, normally empty)."""
    buf = b""
    pos = size
    while buf.count(b"\n") < 2 and pos > 0:
        step = min(_TAIL_BLOCK, pos)
        pos -= step
        buf = os.pread(fd, step, pos) + buf
    last_nl = buf.rfind(b"\n")
    if last_nl < 0:
        return None, pos, buf
    prev_nl = buf.rfind(b"\n", 0, last_nl)
    return buf[prev_nl + 1 : last_nl], pos + last_nl + 1, buf[last_nl + 1 :]


def _head_of(line: bytes, path: Path) -> dict[str, Any]:
    """The chain head a log's last line gives: fails closed on garbage."""
    try:
        record = parse_line(line)
    except AuditRecordError as error:
        raise AuditUnavailable(
            f"the last line of {path} is not an audit record ({error}); "
            "move the file aside to start a new chain"
        ) from None
    seq, digest = record.get("seq"), record.get("hash")
    if not isinstance(seq, int) or not isinstance(digest, str) or record.get("schema") != SCHEMA:
        raise AuditUnavailable(
            f"the last record of {path} is not a chained {SCHEMA} record; "
            "move the file aside to start a new chain"
        )
    return record


def _summary(record: Mapping[str, Any]) -> dict[str, Any]:
    """What an audit.rotate header carries of an open spawn."""
    summary = {
        "spawn_id": record["spawn_id"],
        "tenant": record["tenant"],
        "labels": dict(record.get("labels", {})),
        "exec_seq": record.get("exec_seq", record.get("seq")),
    }
    if record.get("request_id") is not None:
        summary["request_id"] = record["request_id"]
    return summary


def _file_ledger(path: Path) -> dict[str, dict[str, Any]]:
    """Spawns exec'd and not exited as of the end of `path`: full process.exec
    records, or the summaries its audit.rotate header carries from before."""
    ledger: dict[str, dict[str, Any]] = {}
    try:
        with path.open("rb") as f:
            for number, raw in enumerate(f, 1):
                if not raw.endswith(b"\n"):
                    break
                if number == 1 and b'"event":"audit.rotate"' in raw:
                    with contextlib.suppress(AuditRecordError):
                        header = parse_line(raw[:-1])
                        for spawn in header.get("open_spawns", []):
                            ledger[spawn["spawn_id"]] = dict(spawn)
                    continue
                if _SPAWN_EVENT_MARK not in raw:
                    continue
                try:
                    record = parse_line(raw[:-1])
                except AuditRecordError:
                    continue
                spawn_id = record.get("spawn_id")
                if record.get("event") == "process.exec" and spawn_id:
                    ledger[spawn_id] = record
                elif record.get("event") == "process.exit" and spawn_id:
                    ledger.pop(spawn_id, None)
    except OSError as error:
        raise AuditUnavailable(f"cannot read {path}: {error.strerror}") from None
    return ledger


def _resolve_summaries(ledger: dict[str, dict[str, Any]], log_path: Path) -> None:
    """Replace header summaries by the full process.exec records, reading only
    the rotated files that hold them (a file's name is its last seq)."""
    wanted = {sid: r["exec_seq"] for sid, r in ledger.items() if "exec_seq" in r}
    if not wanted:
        return
    files = [(int(p.name.rsplit(".", 1)[1]), p) for p in rotated_files(log_path)]
    by_file: dict[Path, set[str]] = {}
    for spawn_id, exec_seq in wanted.items():
        holder = next((p for last, p in files if last >= exec_seq), None)
        if holder is not None:
            by_file.setdefault(holder, set()).add(spawn_id)
    for path, spawn_ids in by_file.items():
        with contextlib.suppress(OSError), path.open("rb") as f:
            for raw in f:
                if _SPAWN_EVENT_MARK not in raw or not raw.endswith(b"\n"):
                    continue
                try:
                    record = parse_line(raw[:-1])
                except AuditRecordError:
                    continue
                if record.get("event") == "process.exec" and record.get("spawn_id") in spawn_ids:
                    ledger[record["spawn_id"]] = record


def _sync_files(retired: list[int], directory: Path | None, fd: int) -> None:
    """Runs on the fsync thread: make retired files, the directory entry and the
    current file durable. Retired fds are closed here, after their last fsync."""
    error: OSError | None = None
    for old in retired:
        try:
            os.fdatasync(old)
        except OSError as e:
            error = error or e
        finally:
            os.close(old)
    if directory is not None:
        dir_fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
    os.fdatasync(fd)
    if error is not None:
        raise error


class AuditSubscription:
    """An async iterator of the records written after `AuditLog.subscribe`.

    Ends when the log closes; raises `AuditSubscriptionLagged` once the
    records queued for it passed its bound (it never slows the writer)."""

    _END: Any = object()

    def __init__(self, log: AuditLog, max_queue: int) -> None:
        self._log = log
        self._queue: asyncio.Queue[Any] = asyncio.Queue(max_queue)
        self._lagged = False
        self._ended = False

    def _push(self, record: dict[str, Any]) -> None:
        if self._lagged or self._ended:
            return
        try:
            self._queue.put_nowait(record)
        except asyncio.QueueFull:
            self._lagged = True

    def _end(self) -> None:
        self._ended = True
        with contextlib.suppress(asyncio.QueueFull):
            self._queue.put_nowait(self._END)

    def __aiter__(self) -> AsyncIterator[dict[str, Any]]:
        return self

    async def __anext__(self) -> dict[str, Any]:
        if self._queue.empty():
            if self._lagged:
                raise AuditSubscriptionLagged("audit subscriber fell behind; records were dropped")
            if self._ended:
                raise StopAsyncIteration
        item = await self._queue.get()
        if item is self._END:
            raise StopAsyncIteration
        return item  # type: ignore[no-any-return]

    def close(self) -> None:
        """Stop receiving records."""
        self._log._subscribers.discard(self)
        self._end()


class AuditLog:
    """The daemon's audit log. Use from the event loop's thread only."""

    def __init__(
        self,
        settings: AuditSettings,
        boot_id: str,
        *,
        fd: int,
        lock_fd: int,
        size: int,
        head: tuple[int, str],
        file_has_records: bool,
        header_pending: dict[str, Any] | None,
        ledger: dict[str, dict[str, Any]],
        journal: JournalMirror | None,
        gid: int | None,
    ) -> None:
        self._settings = settings
        self._boot_id = boot_id
        self._fd = fd
        self._lock_fd = lock_fd
        self._size = size
        self._seq, self._hash = head
        self._file_has_records = file_has_records
        self._header_pending = header_pending
        self._ledger = ledger
        self._journal = journal
        self._gid = gid
        self._appended = 0
        self._synced = 0
        self._retired: list[int] = []
        self._dir_dirty = False
        #: The fsync in flight (resolved on the loop when it ends), if any.
        self._sync_future: asyncio.Future[None] | None = None
        #: (generation, future) of each durable write waiting for its fsync.
        self._waiters: list[tuple[int, asyncio.Future[None]]] = []
        self._flush_handle: asyncio.TimerHandle | None = None
        self._failure: str | None = None
        self._closed = False
        self._subscribers: set[AuditSubscription] = set()
        self._executor = concurrent.futures.ThreadPoolExecutor(
            max_workers=1, thread_name_prefix="hostcapd-audit-fsync"
        )
        #: fsyncs done so far (group commit makes this far fewer than durable writes).
        self.sync_count = 0
        #: Records that found no room (ENOSPC, EIO on write), written as soon
        #: as the log takes a record again: see `write_or_defer`.
        self._deferred: collections.deque[tuple[str, dict[str, Any]]] = collections.deque()
        self._retry_handle: asyncio.TimerHandle | None = None

    # --- opening ----------------------------------------------------------------

    @classmethod
    def open(
        cls, settings: AuditSettings, boot_id: str, *, journal_socket: Path = JOURNAL_SOCKET
    ) -> AuditLog:
        """Open (or create) the log at ``settings.path`` and continue its chain:
        seq and hash from the last record of the current file, or of the newest
        rotated file when the current one is empty or missing. A torn final line
        (a crash mid-write) is cut off and recorded as ``audit.recover``.

        Raises `AuditUnavailable` when the log cannot be opened or written."""
        path = settings.path
        gid = _resolve_group(settings.group)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as error:
            raise AuditUnavailable(f"cannot create {path.parent}: {error.strerror}") from None
        lock_fd = _open_lock(path, settings.file_mode, gid)
        fd = -1
        try:
            created = not path.exists()
            try:
                fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
                _apply_ownership(fd, path, settings.file_mode, gid)
                size = os.fstat(fd).st_size
                line, end, torn = _read_tail(fd, size)
                recovered = None
                if torn:
                    recovered = _Recovered(len(torn), hashlib.sha256(torn).hexdigest())
                    os.ftruncate(fd, end)
                    os.fdatasync(fd)
                    size = end
            except OSError as error:
                raise AuditUnavailable(f"cannot open audit log {path}: {error.strerror}") from None
            header_pending = None
            if line is not None:
                last = _head_of(line, path)
                head = (last["seq"], last["hash"])
                file_has_records = last.get("event") != "audit.rotate"
                ledger = _file_ledger(path)
            else:
                head, header_pending, ledger = _continue_from_rotated(path)
                file_has_records = False
            _resolve_summaries(ledger, path)
            log = cls(
                settings,
                boot_id,
                fd=fd,
                lock_fd=lock_fd,
                size=size,
                head=head,
                file_has_records=file_has_records,
                header_pending=header_pending,
                ledger=ledger,
                journal=JournalMirror.for_setting(settings.journal, journal_socket),
                gid=gid,
            )
        except BaseException:
            if fd >= 0:
                os.close(fd)
            os.close(lock_fd)
            raise
        log._dir_dirty = created
        if recovered is not None:
            log.write(
                "audit.recover",
                file=path.name,
                torn_bytes=recovered.torn_bytes,
                torn_sha256=recovered.torn_sha256,
            )
        if created or recovered is not None:
            log._sync_inline()
        return log

    @property
    def path(self) -> Path:
        """The current log file."""
        return self._settings.path

    @property
    def journal(self) -> JournalMirror | None:
        """The journal mirror in use, if any (its sent/dropped counts are for monitoring)."""
        return self._journal

    # --- writing ----------------------------------------------------------------

    def write(self, event: str, **fields: Any) -> dict[str, Any]:
        """Append a record now; it is fsynced within ``fsync_interval_ms``.

        argv is redacted here. Returns the record as written. Raises
        `AuditUnavailable` when it cannot be appended (nothing is then written)
        and `AuditRecordError` when the fields do not fit the event's model."""
        record = self._write_record(event, fields)
        self._schedule_batch_sync()
        return record

    def write_or_defer(self, event: str, **fields: Any) -> bool:
        """`write`, or, when the record finds no room, keep it and write it
        (with its fields as given, the time of its writing) before the next
        record the log takes, or on a retry every `DEFERRED_RETRY_S`. For a
        spawn's exit: its true outcome survives a full volume that is freed
        while the daemon runs (else the ledger closes it at the next start).
        False when deferred; raises `AuditUnavailable` once the log failed
        closed (an fsync failed: nothing more is written)."""
        try:
            self.write(event, **fields)
            return True
        except AuditUnavailable:
            if self._failure is not None or self._closed:
                raise
        if len(self._deferred) >= MAX_DEFERRED:
            self._deferred.popleft()  # the ledger closes that spawn at the next start
        self._deferred.append((event, dict(fields)))
        self._arm_retry()
        return False

    @property
    def deferred(self) -> int:
        """Records waiting for room (monitoring)."""
        return len(self._deferred)

    def _flush_deferred(self) -> None:
        """Write the deferred records, oldest first; raises `AuditUnavailable`
        (keeping the rest) if one still finds no room."""
        while self._deferred:
            event, fields = self._deferred[0]
            self._write_record(event, fields, flushing=True)
            self._deferred.popleft()

    def _arm_retry(self) -> None:
        if self._retry_handle is not None or not self._deferred:
            return
        with contextlib.suppress(RuntimeError):  # no loop: the next write retries
            self._retry_handle = asyncio.get_running_loop().call_later(
                DEFERRED_RETRY_S, self._retry_deferred
            )

    def _retry_deferred(self) -> None:
        self._retry_handle = None
        if self._closed or self._failure is not None:
            return
        try:
            self._flush_deferred()
        except AuditUnavailable:
            pass
        else:
            self._schedule_batch_sync()
        self._arm_retry()

    async def write_durable(self, event: str, **fields: Any) -> dict[str, Any]:
        """Append a record and return only once it is fsynced (the write-ahead
        record of process.exec). Concurrent calls share one fsync. Raises
        `AuditUnavailable` when it cannot be appended or made durable."""
        record, durable = self.write_pending(event, **fields)
        await durable
        return record

    def write_pending(
        self, event: str, **fields: Any
    ) -> tuple[dict[str, Any], asyncio.Future[None]]:
        """Append a record now; the future returned completes once it is
        fsynced (or raises `AuditUnavailable`). Lets a caller overlap other
        work with the fsync, as long as nothing it records happens before.
        Cancelling the future cancels no fsync: others may wait on it."""
        record = self._write_record(event, fields)
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append((self._appended, waiter))
        self._start_sync()
        return record, waiter

    def _check_writable(self) -> None:
        if self._closed:
            raise AuditUnavailable("the audit log is closed")
        if self._failure is not None:
            raise AuditUnavailable(self._failure)

    def _write_record(
        self, event: str, fields: Mapping[str, Any], *, flushing: bool = False
    ) -> dict[str, Any]:
        self._check_writable()
        if self._deferred and not flushing:
            # Older records first, if there is room for them now.
            with contextlib.suppress(AuditUnavailable):
                self._flush_deferred()
        body = validate_event_fields(event, fields)
        if "argv" in body:
            # Redaction first, on whole values; only then may anything be cut.
            body.pop("argv_truncated", None)
            body.pop("argc", None)
            argv, cut = bound_argv(redact_argv(body["argv"]))
            if cut:
                body["argv_truncated"] = True
                body["argc"] = len(body["argv"])
            body["argv"] = argv
        self._write_header_if_pending()
        record, line = self._line(event, body)
        if self._file_has_records and self._size + len(line) > self._settings.max_bytes:
            self._rotate()
            self._write_header_if_pending()
            record, line = self._line(event, body)
        self._append(record, line)
        return dict(record)

    def _line(self, event: str, body: Mapping[str, Any]) -> tuple[dict[str, Any], bytes]:
        """The next record of the chain and its stored line."""
        record = {
            "schema": SCHEMA,
            "event": event,
            "seq": self._seq + 1,
            "time": _now(),
            "event_id": _event_id(),
            "boot_id": self._boot_id,
            "prev_hash": self._hash,
            **body,
        }
        return sealed_line(record)

    def _write_header_if_pending(self) -> None:
        if self._header_pending is None:
            return
        body = validate_event_fields("audit.rotate", self._header_pending)
        self._append(*self._line("audit.rotate", body))
        self._header_pending = None

    def _append(self, record: dict[str, Any], line: bytes) -> None:
        """Write one whole line at the end of the file, or nothing at all; then
        advance the chain head."""
        start = self._size
        written = 0
        try:
            while written < len(line):
                n = os.write(self._fd, line[written:])
                if n == 0:
                    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
                written += n
        except OSError as error:
            if written:
                # A partial line followed by later records would read as a torn
                # middle line: cut it off so the file ends on a whole record.
                try:
                    os.ftruncate(self._fd, start)
                except OSError as cut_error:
                    self._failure = (
                        f"cannot remove a partial audit line from {self.path}: {cut_error.strerror}"
                    )
            raise AuditUnavailable(
                f"cannot write audit log {self.path}: {error.strerror}"
            ) from None
        self._size += len(line)
        self._seq, self._hash = record["seq"], record["hash"]
        self._appended += 1
        if record["event"] != "audit.rotate":
            self._file_has_records = True
        self._after_append(record, line)

    def _after_append(self, record: dict[str, Any], line: bytes) -> None:
        event, spawn_id = record["event"], record.get("spawn_id")
        if event == "process.exec" and spawn_id:
            self._ledger[spawn_id] = dict(record)
        elif event == "process.exit" and spawn_id:
            self._ledger.pop(spawn_id, None)
        if self._journal is not None:
            self._journal.send(record, line)
        for subscriber in list(self._subscribers):
            subscriber._push(dict(record))

    # --- rotation ---------------------------------------------------------------

    def _rotate(self) -> None:
        rotated = self.path.with_name(f"{self.path.name}.{self._seq:012d}")
        if os.path.lexists(rotated):
            raise AuditUnavailable(f"cannot rotate {self.path}: {rotated.name} already exists")
        try:
            os.rename(self.path, rotated)
        except OSError as error:
            raise AuditUnavailable(f"cannot rotate {self.path}: {error.strerror}") from None
        try:
            fd = os.open(
                self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600
            )
            _apply_ownership(fd, self.path, self._settings.file_mode, self._gid)
        except (OSError, AuditUnavailable) as error:
            with contextlib.suppress(OSError):
                os.rename(rotated, self.path)
            reason = error.strerror if isinstance(error, OSError) else str(error)
            raise AuditUnavailable(f"cannot rotate {self.path}: {reason}") from None
        self._retired.append(self._fd)
        self._fd = fd
        self._size = 0
        self._file_has_records = False
        self._dir_dirty = True
        self._header_pending = {
            "previous_file": rotated.name,
            "previous_seq": self._seq,
            "previous_hash": self._hash,
            "open_spawns": [_summary(r) for r in self._ledger.values()],
        }
        self._prune()

    def _prune(self) -> None:
        old = rotated_files(self.path)
        for path in old[: max(0, len(old) - self._settings.keep_files)]:
            try:
                path.unlink()
            except OSError as error:
                _log.warning("cannot remove old audit file %s: %s", path, error.strerror)

    # --- syncing ----------------------------------------------------------------

    def _start_sync(self) -> None:
        """Start an fsync covering everything appended so far, unless one is in
        flight (`_sync_future`, which `close` waits for). It runs on the fsync
        thread, which hands the result back to the loop with one
        call_soon_threadsafe: no task, no wrapped future, one loop turn (a
        durable record cost 7 turns and ~0.35 ms of loop CPU)."""
        if self._sync_future is not None:
            return
        loop = asyncio.get_running_loop()
        target, retired, directory = self._sync_batch()
        done: asyncio.Future[None] = loop.create_future()
        self._sync_future = done

        def finished(job: concurrent.futures.Future[None]) -> None:  # on the fsync thread
            with contextlib.suppress(RuntimeError):  # the loop is gone: nobody waits
                loop.call_soon_threadsafe(self._sync_finished, job, target, done)

        self._executor.submit(_sync_files, retired, directory, self._fd).add_done_callback(finished)

    def _sync_finished(
        self, job: concurrent.futures.Future[None], target: int, done: asyncio.Future[None]
    ) -> None:
        self._sync_future = None
        error = job.exception()
        if error is not None:
            # After a failed fsync the kernel may have dropped the dirty pages:
            # nothing since the last good fsync can be trusted, so fail closed.
            reason = error.strerror if isinstance(error, OSError) else str(error)
            self._failure = f"audit log fsync failed: {reason}; the audit log must be reopened (restart hostcapd)"
            done.set_exception(AuditUnavailable(self._failure))
            done.exception()  # retrieved: the waiters below carry it
            self._release_waiters()
            return
        self._synced = max(self._synced, target)
        self.sync_count += 1
        done.set_result(None)
        self._release_waiters()
        if self._closed:
            return
        if self._waiters:
            self._start_sync()  # durable records appended meanwhile: at once
        elif self._synced < self._appended and self._flush_handle is None:
            # Records appended while that fsync ran have waited long enough.
            self._start_sync()

    def _release_waiters(self) -> None:
        """Complete each waiter whose record is now durable (all of them, with
        the error, once the log has failed)."""
        still: list[tuple[int, asyncio.Future[None]]] = []
        for generation, waiter in self._waiters:
            if waiter.done():
                continue  # its caller went away
            if self._failure is not None:
                waiter.set_exception(AuditUnavailable(self._failure))
            elif generation <= self._synced:
                waiter.set_result(None)
            else:
                still.append((generation, waiter))
        self._waiters = still

    def _schedule_batch_sync(self) -> None:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            self._sync_inline()  # no event loop (start-up, tools): sync now
            return
        if self._flush_handle is not None or self._sync_future is not None:
            return  # a timer or an fsync in flight will cover it (see _sync_finished)
        delay = self._settings.fsync_interval_ms / 1000
        self._flush_handle = loop.call_later(delay, self._on_flush_timer)

    def _on_flush_timer(self) -> None:
        self._flush_handle = None
        if not self._closed and self._failure is None and self._synced < self._appended:
            self._start_sync()

    def _sync_batch(self) -> tuple[int, list[int], Path | None]:
        """What the next fsync covers, taken now: appends made while it runs
        wait for the one after. (generation, retired fds, directory to sync)."""
        retired, self._retired = self._retired, []
        directory = self.path.parent if self._dir_dirty else None
        self._dir_dirty = False
        return self._appended, retired, directory

    def _sync_inline(self) -> None:
        target, retired, directory = self._sync_batch()
        try:
            _sync_files(retired, directory, self._fd)
        except OSError as error:
            self._failure = f"audit log fsync failed: {error.strerror}"
            raise AuditUnavailable(self._failure) from None
        self._synced = max(self._synced, target)
        self.sync_count += 1

    # --- the job ledger ---------------------------------------------------------

    def open_spawns(self) -> list[dict[str, Any]]:
        """The process.exec records with no process.exit, oldest first, across
        the current and rotated files. When the rotated file holding an exec
        was pruned, the entry is the summary its successor's audit.rotate
        carried (spawn_id, tenant, request_id, labels, exec_seq)."""
        return sorted(
            (dict(r) for r in self._ledger.values()),
            key=lambda r: int(r.get("seq", r.get("exec_seq", 0))),
        )

    def close_orphans(self, reason_message: str) -> int:
        """Record a process.exit with outcome DAEMON_SHUTDOWN for every open
        spawn (the daemon calls this on start-up, for spawns a crash left
        without an exit). Returns how many were closed."""
        orphans = self.open_spawns()
        for spawn in orphans:
            fields: dict[str, Any] = {
                "tenant": spawn["tenant"],
                "spawn_id": spawn["spawn_id"],
                "labels": spawn.get("labels", {}),
                "outcome": "DAEMON_SHUTDOWN",
                "message": reason_message,
            }
            for key in ("request_id", "pid"):
                if spawn.get(key) is not None:
                    fields[key] = spawn[key]
            self.write("process.exit", **fields)
        return len(orphans)

    # --- subscribers and closing -------------------------------------------------

    def subscribe(self, max_queue: int = 1024) -> AuditSubscription:
        """Records written from now on, as an async iterator (for ``audit tail -f``).
        Each record's stored line is ``hostcap_proto.audit.encode_line(record)``."""
        subscription = AuditSubscription(self, max_queue)
        if self._closed:
            subscription._end()
        else:
            self._subscribers.add(subscription)
        return subscription

    async def close(self) -> None:
        """Make everything written durable, then release the file and the lock.
        Raises `AuditUnavailable` if the final fsync fails."""
        if self._closed:
            return
        if self._failure is None and self._deferred:
            with contextlib.suppress(AuditUnavailable):
                self._flush_deferred()  # last chance; else the ledger closes them
        self._closed = True
        if self._retry_handle is not None:
            self._retry_handle.cancel()
            self._retry_handle = None
        if self._flush_handle is not None:
            self._flush_handle.cancel()
            self._flush_handle = None
        failure: str | None = None
        try:
            if self._sync_future is not None:
                with contextlib.suppress(AuditUnavailable):
                    await asyncio.shield(self._sync_future)
            if self._failure is None:
                _, retired, directory = self._sync_batch()
                try:
                    await asyncio.get_running_loop().run_in_executor(
                        self._executor, _sync_files, retired, directory, self._fd
                    )
                except OSError as error:
                    failure = f"audit log fsync failed at close: {error.strerror}"
                else:
                    self._synced = self._appended
            else:
                failure = self._failure
        finally:
            if failure is not None and self._failure is None:
                self._failure = failure
            self._release_waiters()
            for fd in [*self._retired, self._fd, self._lock_fd]:
                with contextlib.suppress(OSError):
                    os.close(fd)
            self._retired = []
            self._executor.shutdown(wait=False)
            if self._journal is not None:
                self._journal.close()
            for subscriber in list(self._subscribers):
                subscriber._end()
            self._subscribers.clear()
        if failure is not None:
            raise AuditUnavailable(failure)


def _resolve_group(group: int | str | None) -> int | None:
    if group is None or isinstance(group, int):
        return group
    try:
        return grp.getgrnam(group).gr_gid
    except KeyError:
        return None  # "when it exists": a host without the group keeps root's


def _apply_ownership(fd: int, path: Path, mode: int, gid: int | None) -> None:
    """Give an audit file its configured mode and group (also an existing one)."""
    os.fchmod(fd, mode)
    if gid is not None and os.fstat(fd).st_gid != gid:
        try:
            os.fchown(fd, -1, gid)
        except PermissionError:
            _log.warning("cannot give %s group %d (not permitted)", path, gid)


def _open_lock(path: Path, mode: int, gid: int | None) -> int:
    lock_path = path.with_name(f".{path.name}.lock")
    try:
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    except OSError as error:
        raise AuditUnavailable(f"cannot open audit log {path}: {error.strerror}") from None
    try:
        _apply_ownership(fd, lock_path, mode, gid)
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise AuditUnavailable(
            f"audit log {path} is held by another writer (another hostcapd?)"
        ) from None
    except OSError as error:
        os.close(fd)
        raise AuditUnavailable(f"cannot lock audit log {path}: {error.strerror}") from None
    return fd


def _continue_from_rotated(
    path: Path,
) -> tuple[tuple[int, str], dict[str, Any] | None, dict[str, dict[str, Any]]]:
    """Chain head, pending audit.rotate header and ledger for an empty current
    file: continue the newest rotated file, or start at genesis."""
    rotated = rotated_files(path)
    if not rotated:
        return (0, GENESIS_HASH), None, {}
    newest = rotated[-1]
    try:
        fd = os.open(newest, os.O_RDONLY | os.O_CLOEXEC)
        try:
            line, _, _ = _read_tail(fd, os.fstat(fd).st_size)
        finally:
            os.close(fd)
    except OSError as error:
        raise AuditUnavailable(f"cannot read {newest}: {error.strerror}") from None
    if line is None:
        raise AuditUnavailable(f"rotated audit file {newest} holds no record")
    last = _head_of(line, newest)
    ledger = _file_ledger(newest)
    header = {
        "previous_file": newest.name,
        "previous_seq": last["seq"],
        "previous_hash": last["hash"],
        "open_spawns": [_summary(r) for r in ledger.values()],
    }
    return (last["seq"], last["hash"]), header, ledger
