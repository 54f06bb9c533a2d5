"""A tenant at run time: its config, applied profile and live spawns.

A servicer is constructed holding one TenantRuntime and can address nothing
else: no request can name another tenant.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections import OrderedDict
from typing import Any

from hostcapd.audit import AuditLog, AuditUnavailable
from hostcapd.config import Tenant
from hostcapd.errors import Refusal
from hostcapd.executable import HashCache
from hostcapd.fs.runtime import FsRuntime
from hostcapd.sandbox.cgroups import CgroupHost
from hostcapd.sandbox.profile import TenantProfile
from hostcapd.spawn import Outcome, Report, Spawn, SpawnRequest, prepare, signal_name
from hostcapd.spawner.client import SpawnerClient

log = logging.getLogger("hostcapd.tenant")

#: Finished spawns remembered for request_id retries.
FINISHED_KEPT = 1024
_PROFILE_KEYS = itertools.count(1)


class TenantRuntime:
    def __init__(
        self,
        tenant: Tenant,
        profile: TenantProfile,
        spawner: SpawnerClient,
        audit: AuditLog,
        cgroups: CgroupHost,
        kill_grace: float,
    ) -> None:
        self.tenant = tenant
        self.profile = profile
        self.spawner = spawner
        self.audit = audit
        self.cgroups = cgroups
        self.kill_grace = kill_grace
        self.hash_cache = HashCache()
        self.spawns: dict[str, Spawn] = {}
        self._by_request: dict[str, Spawn] = {}
        self._finished: OrderedDict[str, Spawn] = OrderedDict()
        self._tasks: set[asyncio.Task[Report | None]] = set()
        self.accepting = True
        #: This runtime's own profile in the spawner: a reload's replacement
        #: registers a new one, so no order of the old runtime meets the new.
        self.profile_key = f"{tenant.name}#{next(_PROFILE_KEYS)}"
        #: Spawn/Run calls still sending to their clients (shutdown waits for them).
        self.active_calls = 0
        #: The tenant's FsService runtime, once the server has started it.
        self.fs: FsRuntime | None = None

    @property
    def name(self) -> str:
        return self.tenant.name

    def register_with_spawner(self) -> None:
        self.spawner.register_profile(
            self.profile_key, self.profile.spawner_message(self.profile_key), []
        )

    def adopt_requests(self, previous: TenantRuntime) -> None:
        """Take over the request_id table of the runtime this one replaces (a
        reload), so a retry attaches instead of running again."""
        self._by_request = {**previous._by_request, **self._by_request}
        merged = OrderedDict(previous._finished)
        merged.update(self._finished)
        while len(merged) > FINISHED_KEPT:
            merged.popitem(last=False)
        self._finished = merged

    def existing(self, request_id: str) -> Spawn | None:
        """The spawn an earlier request with this id started, live or finished."""
        if not request_id:
            return None
        return self._by_request.get(request_id) or self._finished.get(request_id)

    def start(self, request: SpawnRequest, streaming: bool) -> Spawn:
        """Validate, admit and start a spawn; its task is owned here."""
        if not self.accepting:
            raise Refusal("QUOTA_EXCEEDED", "the daemon is shutting down")
        if len(self.spawns) >= self.tenant.max_concurrent_spawns:
            raise Refusal(
                "QUOTA_EXCEEDED",
                f"tenant {self.name} already runs {len(self.spawns)} spawns (quota {self.tenant.max_concurrent_spawns})",
            )
        prepared = prepare(request, self)
        spawn = Spawn(self, request, prepared, streaming)
        self.spawns[spawn.id] = spawn
        if request.request_id:
            self._by_request[request.request_id] = spawn
        task = asyncio.ensure_future(self._run(spawn))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return spawn

    async def _run(self, spawn: Spawn) -> Report | None:
        try:
            return await spawn.run()
        finally:
            self.spawns.pop(spawn.id, None)
            rid = spawn.request.request_id
            if rid and self._by_request.get(rid) is spawn:
                del self._by_request[rid]
                self._finished[rid] = spawn
                while len(self._finished) > FINISHED_KEPT:
                    self._finished.popitem(last=False)

    def find(self, spawn_id: str = "", pid: int = 0) -> Spawn | None:
        if spawn_id:
            return self.spawns.get(spawn_id)
        for spawn in self.spawns.values():
            if pid and spawn.pid == pid:
                return spawn
        return None

    def audit_exit(self, spawn: Spawn, report: Report) -> None:
        record: dict[str, Any] = {
            "tenant": self.name,
            "spawn_id": spawn.id,
            "request_id": spawn.request.request_id,
            "labels": dict(spawn.request.labels),
            "pid": spawn.pid,
            "outcome": report.outcome.value,
            "signal": report.signal,
            "message": report.message,
            "signal_name": signal_name(report.signal) if report.signal else None,
            "rusage": {
                "user_seconds": report.rusage[0],
                "system_seconds": report.rusage[1],
                "max_rss_bytes": report.rusage[2] * 1024,
                "voluntary_context_switches": report.rusage[3],
                "involuntary_context_switches": report.rusage[4],
                "block_input_ops": report.rusage[5],
                "block_output_ops": report.rusage[6],
            },
            "peak_memory_bytes": report.peak_memory_bytes,
            "oom_kills": report.oom_kills,
            "duration_s": round(report.duration, 6),
            "stdout": {
                "total": spawn.stdout.total,
                "kept": spawn.stdout.kept,
                "dropped": spawn.stdout.dropped,
            },
            "stderr": {
                "total": spawn.stderr.total,
                "kept": spawn.stderr.kept,
                "dropped": spawn.stderr.dropped,
            },
        }
        if report.exit_code is not None:  # absent when a signal ended it
            record["exit_code"] = report.exit_code
        if report.failed_step:
            record["failed_step"] = report.failed_step
            record["errno"] = report.errno
        try:
            if not self.audit.write_or_defer("process.exit", **record):
                log.error(
                    "no room for the exit record of spawn %s: kept, written once the "
                    "audit log takes records again",
                    spawn.id,
                )
        except AuditUnavailable as error:
            log.error("could not audit the exit of spawn %s: %s", spawn.id, error)

    async def shutdown(self) -> None:
        """Refuse new spawns; end running ones as DAEMON_SHUTDOWN and wait for them."""
        self.accepting = False
        for spawn in list(self.spawns.values()):
            spawn.cancel(Outcome.DAEMON_SHUTDOWN, "the daemon is shutting down")
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
