"""The audit log writer: hash-chained hostcapd.audit/v1 JSON Lines.

Durability: `write_durable` returns only once its line is appended *and*
fdatasync'd (concurrent calls share one fsync: group commit, done on a
dedicated thread, never the event loop's); `write` appends at once and the
line is fdatasync'd within ``settings.fsync_interval_ms``. A line is written
with one ``write(2)`` of the whole line; if that fails part-way the partial
line is cut off again, so the file always ends on a whole record.

The jobs beside the chain are in their own modules: `fsync` (group commit),
`deferred` (records that found no room), `ledger` (open spawns),
`subscriptions`, `files` (rotated names, tail, ownership, the lock), `redact`
(an argv or input redacted and sealed).

The log is rotated by size: the current file is renamed to
``<name>.<last seq, 12 digits>`` and a new one starts with an ``audit.rotate``
record continuing the chain. The writer holds an exclusive lock
(``.<name>.lock`` beside the log) so two daemons never interleave one chain.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import errno
import hashlib
import logging
import os
import uuid
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from hostcap_proto.audit import (
    GENESIS_HASH,
    HEADER_FIELDS,
    SCHEMA,
    AuditRecordError,
    checked_event_fields,
    fast_encodable,
    sealed_line,
)

from hostcapd import metrics
from hostcapd.audit.built import Built
from hostcapd.audit.deferred import DeferredQueue
from hostcapd.audit.errors import AuditUnavailable
from hostcapd.audit.files import (
    Recovered,
    apply_ownership,
    chain_head,
    open_lock,
    read_tail,
    resolve_group,
    rotated_files,
)
from hostcapd.audit.fsync import MAX_SYNCS_IN_FLIGHT, GroupCommit, SyncThreads, Waiter, sync_files
from hostcapd.audit.journal import JOURNAL_SOCKET, JournalMirror
from hostcapd.audit.ledger import file_ledger, orphan_exit, resolve_summaries, summary
from hostcapd.audit.redact import seal_argv, seal_input
from hostcapd.audit.retention import Retention
from hostcapd.audit.stamps import event_id as _event_id
from hostcapd.audit.stamps import now as _now
from hostcapd.audit.subscriptions import AuditSubscription
from hostcapd.config import AuditSettings
from hostcapd.kept_loop import KeptLoop

_log = logging.getLogger("hostcapd.audit")


#: Below this many free bytes on its volume the log counts as unwritable
#: (a tenant's health says NOT_SERVING): a record or two may still fit,
#: a spawn's exec record and its exit may not.
MIN_FREE_BYTES = 64 * 1024


class AuditLog(DeferredQueue, GroupCommit):
    """The daemon's audit log. Use from the event loop's thread only."""

    def __init__(
        self,
        settings: AuditSettings,
        boot_id: str,
        *,
        fd: int,
        reader: int,
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
        self._boot_id = str(boot_id)  # exactly a str: the header is sealed unwalked
        #: This daemon run's own id (the log is opened once per run); boot_id
        #: is the kernel's, the same for every run since the machine booted.
        self._run_id = uuid.uuid4().hex
        self._fd = fd
        self._descriptions = (fd, reader)
        self._lock_fd = lock_fd
        self._size = size
        self._seq, self._hash = head
        self._file_has_records = file_has_records
        self._header_pending = header_pending
        self._ledger = ledger
        self._journal = journal
        self._gid = gid
        self._failure: str | None = None
        self._closed = False
        self._subscribers: set[AuditSubscription] = set()
        #: A durable record's `_after_append`, done once its fsync is handed over.
        self._held: tuple[dict[str, Any], bytes] | None = None
        # The group commit's state (see `GroupCommit` for what each is).
        self._appended = 0
        self._synced = 0
        self._retired = []
        self._dir_dirty = False
        self._syncs = {}
        self._waiters = []
        self._flush_handle = None
        self._running_loop = KeptLoop()
        self._threads = SyncThreads(MAX_SYNCS_IN_FLIGHT, "hostcapd-audit-fsync")
        self.sync_count = 0
        #: Compression, archiving and pruning of rotated files (`retention`).
        self.retention = Retention(settings, gid, self.write_durable)
        # The deferred queue's (see `DeferredQueue`).
        self._deferred = collections.deque()
        self._retry_handle = None

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
        gid = resolve_group(settings.group)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as error:
            raise AuditUnavailable(f"cannot create {path.parent}: {error.strerror}") from None
        lock_fd = open_lock(path, settings.file_mode, gid)
        fd = reader = -1
        try:
            created = not path.exists()
            try:
                fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
                apply_ownership(fd, path, settings.file_mode, gid)
                size = os.fstat(fd).st_size
                line, end, torn = read_tail(fd, size)
                recovered = None
                if torn:
                    recovered = Recovered(len(torn), hashlib.sha256(torn).hexdigest())
                    os.ftruncate(fd, end)
                    os.fdatasync(fd)
                    size = end
            except OSError as error:
                raise AuditUnavailable(f"cannot open audit log {path}: {error.strerror}") from None
            header_pending = None
            if line is not None:
                last = chain_head(line, path)
                head = (last["seq"], last["hash"])
                file_has_records = last.get("event") != "audit.rotate"
                ledger = file_ledger(path)
            else:
                head, header_pending, ledger = _continue_from_rotated(path)
                file_has_records = False
            resolve_summaries(ledger, path)
            try:
                reader = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
            except OSError as error:
                raise AuditUnavailable(f"cannot open audit log {path}: {error.strerror}") from None
            log = cls(
                settings,
                boot_id,
                fd=fd,
                reader=reader,
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
            for opened in (fd, reader):
                if opened >= 0:
                    os.close(opened)
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
        log._prune()  # what a previous daemon left to compress, archive or prune
        return log

    def unwritable(self) -> str:
        """Why a spawn's write-ahead record would be refused now ("" when it
        would not): the log is closed or failed closed (an fsync failed), or
        its volume is read-only or has less than MIN_FREE_BYTES for the
        daemon. For the tenants' health, checked every second."""
        if self._closed:
            return "the audit log is closed"
        if self._failure is not None:
            return self._failure
        try:
            st = os.statvfs(self.path.parent)
        except OSError as error:
            return f"cannot read the audit volume of {self.path}: {error.strerror}"
        if st.f_flag & os.ST_RDONLY:
            return f"the audit volume of {self.path} is read-only"
        free = (st.f_bfree if os.geteuid() == 0 else st.f_bavail) * st.f_frsize
        if free < MIN_FREE_BYTES:
            return f"the audit volume of {self.path} is full ({free} bytes free)"
        return ""

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

    def write_built(self, event: str, body: Mapping[str, Any]) -> dict[str, Any]:
        """`write` for fields the daemon built itself from values already
        checked, in the form the event's model dumps them to (a spawn's
        `process.exec` and `process.exit`, `hostcapd.process.records`): they
        are not validated against the model again, which only re-checked
        that construction (tests/unit/audit/test_built_records.py holds the
        builders to the model instead). argv is redacted and sealed as for
        any record."""
        record = self._write_record(event, body, built=True)
        self._schedule_batch_sync()
        return record

    async def write_durable(self, event: str, **fields: Any) -> dict[str, Any]:
        """Append a record and return only once it is fsynced (the write-ahead
        record of process.exec). Concurrent calls share one fsync. Raises
        `AuditUnavailable` when it cannot be appended or made durable."""
        record, durable = self.write_pending(event, **fields)
        await durable
        return record

    def write_pending(
        self,
        event: str,
        *,
        release_fd: int = -1,
        built: Mapping[str, Any] | None = None,
        settled: Callable[[BaseException | None], None] | None = None,
        **fields: Any,
    ) -> tuple[dict[str, Any], asyncio.Future[None]]:
        """Append a record now; the future returned completes once it is
        fsynced (or raises `AuditUnavailable`). Lets a caller overlap other
        work with the fsync, as long as nothing it records happens before.
        Cancelling the future cancels no fsync: others may wait on it.

        `release_fd`: an eventfd the fsync thread writes 1 into the moment
        the record is durable, before the loop hears of it (never when the
        fsync fails); or the loop, if another way made it durable first (a
        later fsync, the log's close). The writer keeps a dup of it, the
        caller its own, which it need not write.
        `built`: the fields, as for `write_built` (then no other fields).
        `settled`: called with None or the `AuditUnavailable` in the very
        turn the future is settled (before its done callbacks and awaiters,
        a turn later), for a caller that need not await it (a spawn: its
        go or its cancel)."""
        if built is not None:
            if fields:
                raise TypeError("write_pending takes built fields or keyword fields, not both")
            record = self._write_record(event, built, built=True, hold=True)
        else:
            record = self._write_record(event, fields, hold=True)
        try:
            waiter = Waiter(self._appended, self._running_loop().create_future())
            waiter.settled = settled
            if release_fd >= 0:
                waiter.release_fd = os.dup(release_fd)
            self._waiters.append(waiter)
            self._start_sync(durable=True)
        finally:
            # Its bookkeeping once its fsync is handed over (off the go's
            # path): nothing is appended between, so the ledger, the journal
            # and subscribers still have every record in the chain's order,
            # each once it is appended.
            held, self._held = self._held, None
            if held is not None:
                self._after_append(*held)
        return record, waiter.future

    def _check_writable(self) -> None:
        if self._closed:
            raise AuditUnavailable("the audit log is closed")
        if self._failure is not None:
            raise AuditUnavailable(self._failure)

    def _write_record(
        self,
        event: str,
        fields: Mapping[str, Any],
        *,
        flushing: bool = False,
        built: bool = False,
        hold: bool = False,
    ) -> dict[str, Any]:
        """Append one record (`hold`: its `_after_append` is the caller's, `_held`)."""
        self._check_writable()
        if self._deferred and not flushing:
            # Older records first, if there is room for them now.
            with contextlib.suppress(AuditUnavailable):
                self._flush_deferred()
        # plain: the fast check passed it (exact builtin types, floats the
        # fast encoder writes as repr() does), its builder said so (`Built`),
        # or a walk found it so; what is added below is text, ints and
        # bools, as is the header.
        if built:
            if not HEADER_FIELDS.isdisjoint(fields):
                reserved = ", ".join(sorted(HEADER_FIELDS & fields.keys()))
                raise AuditRecordError(f"{event}: {reserved} set by the writer, not the caller")
            plain = fields.plain if type(fields) is Built else fast_encodable(fields)
            body = dict(fields)
        else:
            body, plain = checked_event_fields(event, fields)
        if "argv" in body:
            seal_argv(body)
        if event == "process.input":
            seal_input(body, self._settings.input_text_bytes)
        self._write_header_if_pending()
        record, line = self._line(event, body, plain)
        if self._file_has_records and self._size + len(line) > self._settings.max_bytes:
            self._rotate()
            self._write_header_if_pending()
            record, line = self._line(event, body, plain)
        self._append(record, line, hold)
        return record  # the sealed copy: the ledger and subscribers have their own

    def _line(
        self, event: str, body: Mapping[str, Any], plain: bool = False
    ) -> tuple[dict[str, Any], bytes]:
        """The next record of the chain and its stored line (`plain`: the body
        holds only what `sealed_line` may encode unwalked)."""
        record = {
            "schema": SCHEMA,
            "event": event,
            "seq": self._seq + 1,
            "time": _now(),
            "event_id": _event_id(),
            "boot_id": self._boot_id,
            "run_id": self._run_id,
            "prev_hash": self._hash,
            **body,
        }
        return sealed_line(record, plain=plain)

    def _write_header_if_pending(self) -> None:
        if self._header_pending is None:
            return
        body, plain = checked_event_fields("audit.rotate", self._header_pending)
        self._append(*self._line("audit.rotate", body, plain))
        self._header_pending = None

    def _append(self, record: dict[str, Any], line: bytes, hold: bool = False) -> None:
        """Write one whole line at the end of the file, or nothing at all; then
        advance the chain head (`hold`: its bookkeeping left in `_held`)."""
        start = self._size
        written = 0
        try:
            while written < len(line):
                n = os.write(self._fd, line[written:])
                if n == 0:
                    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
                written += n
        except OSError as error:
            metrics.audit_error("write")
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
        if hold:
            self._held = (record, line)
        else:
            self._after_append(record, line)

    def _after_append(self, record: dict[str, Any], line: bytes) -> None:
        event, spawn_id = record["event"], record.get("spawn_id")
        metrics.audit_record(event)
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
            apply_ownership(fd, self.path, self._settings.file_mode, self._gid)
        except (OSError, AuditUnavailable) as error:
            with contextlib.suppress(OSError):
                os.rename(rotated, self.path)
            reason = error.strerror if isinstance(error, OSError) else str(error)
            raise AuditUnavailable(f"cannot rotate {self.path}: {reason}") from None
        try:
            reader = os.open(self.path, os.O_RDONLY | os.O_CLOEXEC)
        except OSError as error:
            os.close(fd)
            with contextlib.suppress(OSError):
                os.rename(rotated, self.path)
            raise AuditUnavailable(f"cannot rotate {self.path}: {error.strerror}") from None
        self._retired.append(self._fd)
        os.close(self._descriptions[1])  # an fsync in flight has its own dup
        self._fd = fd
        self._descriptions = (fd, reader)
        self._size = 0
        self._file_has_records = False
        self._dir_dirty = True
        self._header_pending = {
            "previous_file": rotated.name,
            "previous_seq": self._seq,
            "previous_hash": self._hash,
            "open_spawns": [summary(r) for r in self._ledger.values()],
        }
        self._prune()

    def _prune(self) -> None:
        """Rotated files past keep_files: compressed, archived, recorded in an
        audit.prune, then removed, by a pass off the loop (`retention`)."""
        try:
            self.retention.kick()
        except RuntimeError:  # no running loop (a synchronous caller): next time
            _log.debug("audit retention deferred: no event loop")

    # --- syncing ----------------------------------------------------------------

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
            self.write("process.exit", **orphan_exit(spawn, reason_message))
        return len(orphans)

    # --- subscribers and closing -------------------------------------------------

    def subscribe(self, max_queue: int = 1024) -> AuditSubscription:
        """Records written from now on, as an async iterator (for ``audit tail -f``).
        Each record's stored line is ``hostcap_proto.audit.encode_line(record)``."""
        subscription = AuditSubscription(self._subscribers, max_queue)
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
        await self.retention.close()
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
            for in_flight in list(self._syncs):
                with contextlib.suppress(AuditUnavailable):
                    await asyncio.shield(in_flight)
            if self._failure is None:
                _, retired, directory = self._sync_batch()
                try:
                    fd = self._fd
                    await self._threads.call(lambda: sync_files(retired, directory, fd))
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
            for fd in [*self._retired, *self._descriptions, self._lock_fd]:
                with contextlib.suppress(OSError):
                    os.close(fd)
            self._retired = []
            self._threads.stop()
            if self._journal is not None:
                self._journal.close()
            for subscriber in list(self._subscribers):
                subscriber._end()
            self._subscribers.clear()
        if failure is not None:
            raise AuditUnavailable(failure)


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
            line, _, _ = read_tail(fd, os.fstat(fd).st_size)
        finally:
            os.close(fd)
    except OSError as error:
        raise AuditUnavailable(f"cannot read {newest}: {error.strerror}") from None
    if line is None:
        raise AuditUnavailable(f"rotated audit file {newest} holds no record")
    last = chain_head(line, newest)
    ledger = file_ledger(newest)
    header = {
        "previous_file": newest.name,
        "previous_seq": last["seq"],
        "previous_hash": last["hash"],
        "open_spawns": [summary(r) for r in ledger.values()],
    }
    return (last["seq"], last["hash"]), header, ledger
