"""A spawn's file changes (decision 0030): watched from its start and, once
its tree is dead, an fs.changes record before its exit record.

    changes.watch(deps, pid, cgroup)                 # once the command runs
    await changes.record(deps, spawn_id, request, pid)   # after it ended
"""

from __future__ import annotations

import asyncio
import logging

from hostcapd.audit import AuditUnavailable
from hostcapd.process import records
from hostcapd.process.deps import SpawnDeps
from hostcapd.process.request import SpawnRequest
from hostcapd.sandbox import fschanges
from hostcapd.sandbox.cgroups import SpawnCgroup

log = logging.getLogger("hostcapd.spawn")


def watch(deps: SpawnDeps, pid: int, cgroup: SpawnCgroup | None) -> None:
    watcher = deps.profile.fs_changes
    if watcher is not None:
        watcher.begin(pid, cgroup.directories[0].name if cgroup is not None else "")


async def record(deps: SpawnDeps, spawn_id: str, request: SpawnRequest, pid: int) -> None:
    watcher = deps.profile.fs_changes
    if watcher is None or not pid:
        return
    changes = await watcher.finish(pid)
    settings = deps.tenant.fs_changes
    listed = await asyncio.to_thread(
        fschanges.describe,
        changes,
        watcher.roots,
        settings.sizes,
        settings.sha256_max_bytes,
    )
    record = records.changes_record(deps.tenant.name, spawn_id, request, listed, changes)
    try:
        deps.audit.write("fs.changes", **record)
    except AuditUnavailable as error:
        log.error("could not audit the file changes of spawn %s: %s", spawn_id, error)
