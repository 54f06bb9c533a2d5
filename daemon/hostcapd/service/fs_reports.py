"""The root side's end of a tenant's fs worker reports (decision 0034).

The front-end asks the worker for reads directly; the worker tells the
root side what the root must still do for them:

- `Denied`: a read refused for an audited reason. The root writes its
  `policy.deny` (the tenant, the path asked, the reason, and the caller the
  front-end named, as a relayed call's), counts it, and answers `Acked`:
  the worker answers the front-end only then, so the record is in the log
  before the caller hears of the refusal, as for a relayed read;
- `Counted`: the reads' results in a batch, for the metrics;
- `Malformed`: a datagram from the front-end that is none of ours; it is
  the front-end's violation, as one on its channel: audited, and the
  front-end killed and restarted (`on_violation`).

What the worker reports is believed no further than a relayed answer of
the worker is: a reason is one the wire has, or INTERNAL.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections.abc import Callable

import msgspec

from hostcapd import callers, metrics
from hostcapd.audit import AuditLog
from hostcapd.errors import Refusal
from hostcapd.fs import direct
from hostcapd.service.refusals import refuse

log = logging.getLogger("hostcapd.fs")

#: The longest report (a Denied with a path of MAX_PATH characters).
MAX_REPORT = 64 << 10


class ReadReports:
    """Reads a tenant's report link on the loop; `close` stops it."""

    def __init__(self, tenant: str, audit: AuditLog, links: direct.Links) -> None:
        self.tenant = tenant
        self.audit = audit
        self.links = links
        #: Called with what was malformed: the front-end's violation.
        self.on_violation: Callable[[str], None] | None = None
        self._sock = links.root
        self._sock.setblocking(False)
        self._loop = asyncio.get_running_loop()
        self._loop.add_reader(self._sock.fileno(), self._readable)

    def close(self) -> None:
        if self._sock.fileno() >= 0:
            self._loop.remove_reader(self._sock.fileno())

    def _readable(self) -> None:
        while True:
            try:
                raw = self._sock.recv(MAX_REPORT)
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                self.close()
                return
            if not raw:
                self.close()
                return
            try:
                header, _ = direct.split(raw)
                report = direct.REPORTS.decode(header)
            except (ValueError, msgspec.ValidationError, msgspec.DecodeError) as error:
                log.error("tenant %s: its fs worker sent a bad report: %s", self.tenant, error)
                continue
            if isinstance(report, direct.Denied):
                self._denied(report)
            elif isinstance(report, direct.Counted):
                for result, calls in report.results.items():
                    reason = "OK" if result == "OK" else Refusal.reason_of(result)
                    metrics.rpc_finished(self.tenant, "FsService", "ReadFile", reason, calls)
            elif report.generation == self.links.generation and self.on_violation is not None:
                self.on_violation(f"on its fs read link: {report.what}")
            else:
                log.warning(
                    "tenant %s: an earlier front-end sent its fs worker a malformed read: %s",
                    self.tenant,
                    report.what,
                )

    def _denied(self, report: direct.Denied) -> None:
        refusal = Refusal(Refusal.reason_of(report.reason), report.message)
        token = callers.CURRENT.set(report.caller)
        try:
            refuse(
                self.audit,
                self.tenant,
                "ReadFile",
                refusal,
                {},
                "",
                path=report.path,
                audited=refusal.reason in direct.AUDITED_READ_REASONS,
            )
        except Refusal:
            pass
        finally:
            callers.CURRENT.reset(token)
        metrics.rpc_finished(self.tenant, "FsService", "ReadFile", refusal.reason)
        # if it cannot be sent, the worker answers after its wait anyway
        with contextlib.suppress(OSError):
            self._sock.send(direct.encode(direct.Acked(seq=report.seq)), socket.MSG_DONTWAIT)
