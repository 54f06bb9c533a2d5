"""A tenant's FsService: its worker process and the service bound to it.

    runtime = await start_fs_service(tenant, audit)
    runtime.service.ReadFile(request, call)      # FsService, on the channel's messages
    ...
    await runtime.close()        # no worker process is left when it returns

`start_fs_service` raises `FsWorkerUnavailable` when the worker refuses to
serve (a required protection it cannot apply, a root it cannot open as the
run-as identity); the message says which, for the start-up error.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Callable

from hostcapd.applied import Applied
from hostcapd.audit import AuditLog
from hostcapd.config import Tenant, Tier
from hostcapd.fs.client import FsWorker
from hostcapd.fs.direct import Links
from hostcapd.fs.scope import RootSpec
from hostcapd.fs.worker import WorkerSettings
from hostcapd.service.fs_reports import ReadReports
from hostcapd.service.fs_service import FsService

#: A file operation taking longer than this is presumed hung: the worker is
#: killed and restarted, the request fails UNAVAILABLE. Generous: a 64 MiB
#: write with its fsyncs on a slow disk must fit.
OP_TIMEOUT_S = 120.0


class FsRuntime:
    """Owns the tenant's fs worker; `service` serves FsService over it."""

    def __init__(
        self, service: FsService, worker: FsWorker, reports: ReadReports | None = None
    ) -> None:
        self.service = service
        self.worker = worker
        #: The worker's reports of the reads its front-end asks directly
        #: (decision 0034); None when the front-end does not.
        self.reports = reports

    def read_link(self) -> socket.socket | None:
        """The read link's end for a front-end about to start (the caller
        closes its copy once the process holds it); None without direct
        reads. A later front-end gets a new link, and the worker is started
        again with its end."""
        if self.reports is None:
            return None
        given, renewed = self.reports.links.for_frontend()
        if renewed:
            self.worker.relink()
        return given

    @property
    def protections(self) -> tuple[Applied, ...]:
        """What the fs worker applied (uid_drop, no_new_privs, landlock)."""
        return self.worker.protections

    async def close(self) -> None:
        await self.worker.close()
        if self.reports is not None:
            self.reports.close()
            self.reports.links.close()


def worker_settings(tenant: Tenant) -> WorkerSettings:
    """The worker's settings for `tenant`, as plain values."""
    fs = tenant.fs
    return WorkerSettings(
        tenant=tenant.name,
        roots=tuple(RootSpec(str(root.path), root.tier is Tier.READ_ONLY) for root in tenant.roots),
        uid=tenant.uid,
        gid=tenant.gid,
        follow_symlinks=fs.follow_symlinks,
        protected_paths=fs.protected_paths,
        secret_paths=fs.secret_paths,
        file_mode=fs.file_mode,
        dir_mode=fs.dir_mode,
        umask=fs.umask,
        max_write_bytes=fs.max_write_bytes,
        max_read_bytes=fs.max_read_bytes,
        uid_drop=tenant.sandbox.uid_drop.value,
        landlock=tenant.sandbox.landlock.value,
        parent_pid=os.getpid(),
        simulate_unavailable=tenant.sandbox.simulate_unavailable,
    )


async def start_fs_service(
    tenant: Tenant,
    audit: AuditLog,
    *,
    op_timeout_s: float = OP_TIMEOUT_S,
    place: Callable[[int], None] | None = None,
    direct_reads: bool = False,
) -> FsRuntime:
    """Start `tenant`'s fs worker and the service bound to it; `place`
    makes each worker started the tenant's cost. With `direct_reads`, the
    worker also serves the reads its front-end asks directly (decision
    0034: `FsRuntime.read_link`)."""
    worker = FsWorker(worker_settings(tenant), op_timeout_s=op_timeout_s)
    worker.place = place
    reports: ReadReports | None = None
    if direct_reads:
        links = Links()
        worker.links = links
        reports = ReadReports(tenant.name, audit, links)
    try:
        await worker.start()
    except BaseException:
        if reports is not None:
            reports.close()
            reports.links.close()
        raise
    return FsRuntime(FsService(tenant, audit, worker), worker, reports)
