"""AdminService: the ops side of the daemon, on the admin socket only.

Who may call is decided by the kernel, not here: the admin socket file is
owned by root, group `admin.group`, mode 0660 (0600 without a group), so a
process of any other user cannot even connect (`Daemon.serve_admin`). The
service sees every tenant through `Administered`, the narrow view of the
daemon it is constructed with, and answers on the channel's typed messages:

    service = AdminService(daemon)         # daemon: Administered
    relayed_methods("admin", {"AdminService": service})
"""

from __future__ import annotations

import asyncio
import datetime as dt
import fnmatch
import itertools
import logging
from collections.abc import AsyncIterator, Iterable, Iterator, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Protocol

from hostcap_proto.audit import (
    OUTCOMES,
    AuditFileError,
    FilterError,
    RecordReader,
    chain_order,
    check_event,
    encode_line,
    resolve_spawn,
    tail_records,
    tenants_of,
    unknown_tenant,
)
from hostcap_proto.names import ReasonName

from hostcapd.audit import AuditLog, AuditSubscription, AuditSubscriptionLagged, AuditUnavailable
from hostcapd.audit.files import rotated_files
from hostcapd.audit.redact import redact_argv
from hostcapd.bridge import messages
from hostcapd.bridge.frontends import RelayedCall
from hostcapd.callers import caller_field
from hostcapd.errors import DEADLINE_EXCEEDED, RESOURCE_EXHAUSTED, UNAVAILABLE, Refusal
from hostcapd.logsetup import fields
from hostcapd.process.environments import Environment
from hostcapd.process.report import Outcome, Report
from hostcapd.process.spawn import Spawn
from hostcapd.service import convert
from hostcapd.tenant import TenantRuntime

log = logging.getLogger("hostcapd.admin")

#: The most records TailAudit sends before following (it reads them into memory).
MAX_TAIL_LINES = 100_000
#: Records a follower may fall behind before its stream is ended (never the writer slowed).
FOLLOW_QUEUE = 8192
#: Records read from the files per trip to the reading thread.
QUERY_BATCH = 512
#: How long Kill waits, beyond the tenant's kill grace, for the tree to be gone.
KILL_WAIT_MARGIN_S = 30.0
#: The process.exit message of a spawn killed over the admin socket.
KILLED_BY_ADMIN = "killed by an administrator over the admin socket (hostcapctl kill)"


class ReloadRejected(Exception):
    """A reload was refused; the old config keeps serving. `reason` is a
    wire ErrorReason name, `message` says why."""

    def __init__(self, reason: ReasonName, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message


@dataclass(frozen=True)
class ReloadOutcome:
    """What a reload applied, by tenant name."""

    added: tuple[str, ...] = ()
    removed: tuple[str, ...] = ()
    changed: tuple[str, ...] = ()


class Administered(Protocol):
    """What the admin side may see and do of the daemon."""

    @property
    def audit(self) -> AuditLog | None:
        """The open audit log (None before start-up and after shutdown)."""
        ...

    def live_runtimes(self) -> Iterable[TenantRuntime]:
        """Every tenant runtime that may still own spawns: those serving, and
        those a reload replaced or removed whose spawns are still running."""
        ...

    async def reload(self) -> ReloadOutcome:
        """Re-read the config and apply it; raises ReloadRejected."""
        ...


def _datetime(stamp: messages.Timestamp) -> dt.datetime:
    """A google.protobuf.Timestamp's time (ValueError out of its range,
    0001-01-01 to 9999-12-31, as protobuf's ToDatetime)."""
    try:
        return _EPOCH + dt.timedelta(seconds=stamp.seconds, microseconds=stamp.nanos // 1000)
    except OverflowError:
        raise ValueError(f"timestamp {stamp.seconds} s is out of range") from None


_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


def _record_time(value: dt.datetime) -> str:
    # Records hold fixed-width UTC times, so bounds compare as strings.
    return value.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@dataclass(frozen=True)
class AuditFilter:
    """QueryAudit's filters as plain values; every one set must match."""

    tenant: str = ""
    since: str = ""
    until: str = ""
    event: str = ""
    outcome: str = ""
    spawn_id: str = ""

    @classmethod
    def of_call(cls, request: messages.QueryAuditCall) -> AuditFilter:
        """Raises ValueError for a timestamp out of range or an unknown outcome."""
        if request.outcome and request.outcome.upper() not in OUTCOMES:
            raise ValueError(
                f"unknown outcome {request.outcome!r}: valid outcomes are {', '.join(OUTCOMES)}"
            )
        since = _record_time(_datetime(request.since)) if request.since is not None else ""
        until = _record_time(_datetime(request.until)) if request.until is not None else ""
        if request.event:
            check_event(request.event)
        return cls(
            tenant=request.tenant,
            since=since,
            until=until,
            event=request.event,
            outcome=request.outcome.upper(),
            spawn_id=request.spawn_id,
        )

    def matches(self, record: Mapping[str, Any]) -> bool:
        time = str(record.get("time", ""))
        return not (
            (self.since and time < self.since)
            or (self.until and time > self.until)
            or (self.tenant and record.get("tenant") != self.tenant)
            or (self.event and not fnmatch.fnmatchcase(str(record.get("event", "")), self.event))
            or (self.outcome and record.get("outcome") != self.outcome)
            or (self.spawn_id and record.get("spawn_id") != self.spawn_id)
        )


def recent_records(path: Path, count: int) -> list[dict[str, Any]]:
    """The last `count` records of the log at `path`, oldest first, reaching
    into the rotated files when the current one holds fewer."""
    if count <= 0:
        return []
    records = tail_records(path, count)
    for older in reversed(rotated_files(path)):
        if len(records) >= count:
            break
        try:
            records = tail_records(older, count - len(records)) + records
        except AuditFileError:
            break  # pruned while we read: what is older is gone anyway
    # A rotation between the reads can show a record twice: keep each seq once.
    by_seq = {r["seq"]: r for r in records if isinstance(r.get("seq"), int)}
    return [by_seq[seq] for seq in sorted(by_seq)][-count:]


def _take(records: Iterator[dict[str, Any]], count: int) -> list[dict[str, Any]]:
    return list(itertools.islice(records, count))


async def stored_records(path: Path) -> AsyncIterator[dict[str, Any]]:
    """Every stored record of the log at `path` (rotated files, then the
    current one), read on a worker thread in batches, never the event loop."""
    files = await asyncio.to_thread(lambda: chain_order([*rotated_files(path), path]))
    records = iter(RecordReader(files))
    while batch := await asyncio.to_thread(_take, records, QUERY_BATCH):
        for record in batch:
            yield record


async def spawn_ids(path: Path) -> set[str]:
    """Every spawn id the stored records of the log at `path` name."""
    return {
        record["spawn_id"]
        async for record in stored_records(path)
        if isinstance(record.get("spawn_id"), str)
    }


def _line(record: Mapping[str, Any]) -> messages.AuditLine:
    return messages.AuditLine(json=encode_line(record)[:-1].decode("utf-8"))


class AdminService:
    """hostcap.v1.AdminService over every tenant of one daemon."""

    def __init__(self, daemon: Administered) -> None:
        self.daemon = daemon
        self._follows: set[AuditSubscription] = set()

    def end_follows(self) -> None:
        """End every TailAudit follow cleanly (the daemon is stopping)."""
        for subscription in list(self._follows):
            subscription.close()

    def _live_spawns(self) -> list[Spawn]:
        spawns = [s for rt in self.daemon.live_runtimes() for s in rt.spawns.values()]
        return sorted(spawns, key=lambda s: s.started_at)

    async def ListSpawns(
        self, request: messages.ListSpawnsCall, call: RelayedCall
    ) -> messages.ListSpawnsResponse:
        return messages.ListSpawnsResponse(
            spawns=[
                # As the audit log shows it: an ops screen is no place for a token.
                convert.spawn_info(spawn, argv=redact_argv(list(spawn.prepared.argv)))
                for spawn in self._live_spawns()
                if spawn.pid and (not request.tenant or spawn.deps.tenant.name == request.tenant)
            ],
            environments=[
                messages.EnvironmentEntry(**convert.environment_fields(env))
                for env in self._open_environments()
                if not request.tenant or env.tenant == request.tenant
            ],
        )

    def _open_environments(self) -> list[Environment]:
        # A reload's old and new runtime of a tenant share one table.
        tables = {id(rt.environments): rt.environments for rt in self.daemon.live_runtimes()}
        envs = [e for t in tables.values() for e in t.envs.values() if not e.closing]
        return sorted(envs, key=lambda e: e.opened_at)

    def _record(self, method: str, **details: Any) -> None:
        """The admin call's own record (`admin.call`), naming its caller; one
        that cannot be written is logged, and the call goes on (an operator's
        kill is not held back by a full disk)."""
        audit = self.daemon.audit
        if audit is None:
            return
        chosen = {name: value for name, value in details.items() if value not in (None, "", {})}
        try:
            audit.write("admin.call", method=method, **chosen, **caller_field())
        except AuditUnavailable as error:
            log.error("could not audit the admin call %s: %s", method, error)

    async def Kill(self, request: messages.KillCall, call: RelayedCall) -> messages.KillResponse:
        spawn = next((s for s in self._live_spawns() if s.id == request.spawn_id), None)
        if spawn is not None:
            self._record("Kill", spawn_id=spawn.id, tenant=spawn.deps.tenant.name)
        else:
            self._record("Kill", asked={"spawn_id": request.spawn_id})
        if not request.spawn_id or spawn is None:
            raise Refusal("NOT_FOUND", f"no live spawn has the id {request.spawn_id!r}")
        log.warning(
            "admin kill of spawn %s (tenant %s)",
            spawn.id,
            spawn.deps.tenant.name,
            extra=fields(tenant=spawn.deps.tenant.name, spawn_id=spawn.id),
        )
        spawn.cancel(Outcome.CANCELLED, KILLED_BY_ADMIN)
        tenant = spawn.deps.tenant.name
        wait = spawn.deps.kill_grace + KILL_WAIT_MARGIN_S
        try:
            report: Report = await asyncio.wait_for(asyncio.shield(spawn.done), wait)
        except TimeoutError:
            raise Refusal(
                DEADLINE_EXCEEDED, f"spawn {spawn.id} was killed but had not ended after {wait:g} s"
            ) from None
        except Refusal:
            # refused before it ran: nothing ran, nothing to end
            return messages.KillResponse(spawn_id=spawn.id, tenant=tenant)
        return messages.KillResponse(
            spawn_id=spawn.id, tenant=tenant, exited=convert.exited_message(spawn, report)
        )

    async def TailAudit(
        self, request: messages.TailAuditCall, call: RelayedCall
    ) -> AsyncIterator[messages.AuditLine]:
        audit = self.daemon.audit
        if audit is None:
            raise Refusal(UNAVAILABLE, "the audit log is closed")
        if request.lines > MAX_TAIL_LINES:
            raise Refusal("INVALID_ARGUMENT", f"lines must be at most {MAX_TAIL_LINES}")
        # Subscribe before reading the file, so nothing written in between is
        # missed; what both show is sent once (by seq).
        subscription = audit.subscribe(max_queue=FOLLOW_QUEUE) if request.follow else None
        if subscription is not None:
            self._follows.add(subscription)
        try:
            try:
                recent = await asyncio.to_thread(recent_records, audit.path, request.lines)
            except AuditFileError as error:
                raise Refusal(UNAVAILABLE, str(error)) from None
            finally:
                # After what it read (a follower gets it as the first new record).
                self._record("TailAudit", lines=request.lines, follow=request.follow or None)
            last_seq = 0
            for record in recent:
                yield _line(record)
                last_seq = record["seq"]
            if subscription is None:
                return
            try:
                async for record in subscription:
                    if record["seq"] <= last_seq:
                        continue
                    yield _line(record)
                    last_seq = record["seq"]
            except AuditSubscriptionLagged:
                raise Refusal(
                    RESOURCE_EXHAUSTED,
                    f"this follower fell more than {FOLLOW_QUEUE} records behind and "
                    f"missed some after seq {last_seq}; follow again (or query the files)",
                ) from None
        finally:
            if subscription is not None:
                self._follows.discard(subscription)
                subscription.close()

    async def QueryAudit(
        self, request: messages.QueryAuditCall, call: RelayedCall
    ) -> AsyncIterator[messages.AuditLine]:
        audit = self.daemon.audit
        if audit is None:
            raise Refusal(UNAVAILABLE, "the audit log is closed")
        try:
            async for line in self._query(request):
                yield line
        finally:
            # When it ends, however it ends: after the records it read.
            asked = {
                "tenant": request.tenant,
                "spawn_id": request.spawn_id,
                "event": request.event,
                "outcome": request.outcome,
            }
            self._record("QueryAudit", asked={k: v for k, v in asked.items() if v})

    async def _query(self, request: messages.QueryAuditCall) -> AsyncIterator[messages.AuditLine]:
        audit = self.daemon.audit
        assert audit is not None
        try:
            selected = AuditFilter.of_call(request)
        except ValueError as error:
            raise Refusal("INVALID_ARGUMENT", f"bad query: {error}") from None
        try:
            if selected.spawn_id:
                # An id or a unique prefix of one (as kill takes it).
                try:
                    spawn_id = resolve_spawn(selected.spawn_id, await spawn_ids(audit.path))
                except FilterError as error:
                    raise Refusal("INVALID_ARGUMENT", f"bad query: {error}") from None
                selected = replace(selected, spawn_id=spawn_id)
            # A tenant no record names, nor the config: an error listing those that are.
            known = {rt.name for rt in self.daemon.live_runtimes()}
            tenant_known = not selected.tenant or selected.tenant in known
            async for record in stored_records(audit.path):
                if not tenant_known:
                    named = tenants_of(record)
                    known.update(named)
                    tenant_known = selected.tenant in named
                if selected.matches(record):
                    yield _line(record)
            if not tenant_known:
                raise Refusal(
                    "INVALID_ARGUMENT", f"bad query: {unknown_tenant(selected.tenant, known)}"
                )
        except AuditFileError as error:
            # A rotated file pruned under us, typically: the caller may retry.
            raise Refusal(UNAVAILABLE, str(error)) from None

    async def Reload(
        self, request: messages.ReloadCall, call: RelayedCall
    ) -> messages.ReloadResponse:
        try:
            outcome = await self.daemon.reload()
        except ReloadRejected as rejected:
            raise Refusal(rejected.reason, rejected.message) from None
        return messages.ReloadResponse(
            added=list(outcome.added), removed=list(outcome.removed), changed=list(outcome.changed)
        )
