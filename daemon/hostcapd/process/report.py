"""How a spawn ended: one `Outcome`, one `Report`, and the classification of
an exit status (with the cgroup's counters and the daemon's own kill reason)
into them."""

from __future__ import annotations

import asyncio
import os
import signal
from dataclasses import dataclass
from typing import Any

from hostcap_proto.names import NO_USAGE, Rusage
from hostcap_proto.names import Outcome as Outcome  # callers import it from here

from hostcapd.audit import AuditUnavailable
from hostcapd.config import Limits
from hostcapd.errors import Refusal
from hostcapd.process import killing
from hostcapd.sandbox.cgroups import CgroupStats
from hostcapd.spawner.client import ExitStatus


@dataclass
class Report:
    """The final report (mirrors hostcap.v1.Exited)."""

    outcome: Outcome
    #: None when a signal ended the command (then `signal` says which) or it never ran.
    exit_code: int | None = None
    signal: int = 0
    message: str = ""
    failed_step: str = ""
    errno: int = 0
    rusage: Rusage = NO_USAGE
    peak_memory_bytes: int | None = None
    oom_kills: int = 0
    duration: float = 0.0


def signal_name(sig: int) -> str:
    try:
        return signal.Signals(sig).name
    except ValueError:
        return f"SIG{sig}"


def classify(
    status: ExitStatus | None,
    stats: CgroupStats,
    limits: Limits,
    killed: tuple[Outcome, str] | None,
    duration: float,
) -> Report:
    """The report of a spawn that ran: `status` is None when the spawner died
    before reporting it; `killed` is the daemon's own reason for killing the
    tree (cancel, timeout, output limit, shutdown), which wins over what the
    status alone would say."""
    if status is None:
        return Report(
            Outcome.SPAWN_FAILED,
            message="the spawner died while the spawn ran",
            failed_step="spawner",
            duration=duration,
        )
    code = os.waitstatus_to_exitcode(status.status)
    sig = -code if code < 0 else 0
    exit_code = code if code >= 0 else None
    cpu = status.rusage.user_seconds + status.rusage.system_seconds
    if killed is not None:
        outcome, message = killed
    elif stats.oom_kills > 0:
        outcome = Outcome.MEMORY_LIMIT
        message = f"memory limit of {limits.memory_bytes} bytes exceeded (OOM kill)"
    elif sig == signal.SIGXCPU or (
        sig == signal.SIGKILL
        and limits.cpu_seconds is not None
        and cpu >= limits.cpu_seconds - 0.05
    ):
        outcome, message = Outcome.CPU_LIMIT, f"CPU limit of {limits.cpu_seconds:g} s exceeded"
    elif stats.pids_refused > 0 and (sig or exit_code):
        outcome, message = Outcome.PIDS_LIMIT, f"pids limit of {limits.pids} refused a fork"
    elif sig:
        outcome, message = Outcome.SIGNALED, f"killed by {signal_name(sig)}"
    else:
        outcome, message = Outcome.EXITED, f"exited with status {exit_code}"
    return Report(
        outcome,
        exit_code=exit_code,
        signal=sig,
        message=message,
        rusage=killing.tree_rusage(status.rusage, stats.peak_memory_bytes),
        peak_memory_bytes=stats.peak_memory_bytes,
        oom_kills=stats.oom_kills,
        duration=duration,
    )


# A spawn's own ends before it ran (`hostcapd.process.spawn`).


class Cancelled(Exception):
    """Cancelled before its order left."""


class Refused(Exception):
    def __init__(self, refusal: Refusal, audit: AuditUnavailable | None = None) -> None:
        super().__init__(refusal.message)
        self.refusal = refusal
        #: The audit log's failure, when that is why.
        self.audit = audit


def audit_refusal(error: AuditUnavailable) -> Refusal:
    return Refusal(
        "AUDIT_UNAVAILABLE", f"the audit log cannot be written, nothing was run: {error}"
    )


def retrieve(future: asyncio.Future[Any]) -> None:
    """Mark a future's exception as seen (its owner reports it otherwise)."""
    if not future.cancelled():
        future.exception()
