"""`classify` on its own, without a spawn: each way a run can end becomes its
one Outcome, and the daemon's own kill reason wins over what the exit status
alone would say."""

from __future__ import annotations

import signal

import pytest
from hostcap_proto.names import Rusage
from hostcapd.config import Limits
from hostcapd.process.report import Outcome, classify, signal_name
from hostcapd.sandbox.cgroups import CgroupStats
from hostcapd.spawner.client import ExitStatus

LIMITS = Limits(cpu_seconds=2.0, memory_bytes=64 << 20, pids=16)
NO_CGROUP = CgroupStats(None, 0, 0)
RUSAGE = Rusage(0.25, 0.125, 4096 << 10, 3, 4, 5, 6)


def exited(code: int, rusage: Rusage = RUSAGE) -> ExitStatus:
    return ExitStatus(pid=42, status=code << 8, rusage=rusage)


def signaled(sig: int, rusage: Rusage = RUSAGE) -> ExitStatus:
    return ExitStatus(pid=42, status=int(sig), rusage=rusage)


def test_an_exit_code_is_exited_with_that_code() -> None:
    for code in (0, 1, 127, 255):
        report = classify(exited(code), NO_CGROUP, LIMITS, None, 1.5)
        assert (report.outcome, report.exit_code, report.signal) == (Outcome.EXITED, code, 0)
        assert report.message == f"exited with status {code}"
        assert report.duration == 1.5
        assert report.rusage == RUSAGE  # no cgroup: wait4's figures as they are


def test_a_signal_is_signaled_with_no_exit_code() -> None:
    report = classify(signaled(signal.SIGSEGV), NO_CGROUP, LIMITS, None, 0.1)
    assert (report.outcome, report.exit_code, report.signal) == (
        Outcome.SIGNALED,
        None,
        signal.SIGSEGV,
    )
    assert report.message == "killed by SIGSEGV"


def test_an_oom_kill_is_memory_limit_whatever_the_status() -> None:
    stats = CgroupStats(peak_memory_bytes=64 << 20, oom_kills=1, pids_refused=0)
    for status in (signaled(signal.SIGKILL), exited(137), exited(0)):
        report = classify(status, stats, LIMITS, None, 0.1)
        assert report.outcome is Outcome.MEMORY_LIMIT, status
        assert report.oom_kills == 1
        assert str(64 << 20) in report.message


def test_sigxcpu_is_cpu_limit() -> None:
    report = classify(signaled(signal.SIGXCPU), NO_CGROUP, LIMITS, None, 0.1)
    assert report.outcome is Outcome.CPU_LIMIT
    assert report.message == "CPU limit of 2 s exceeded"


def test_sigkill_at_the_cpu_limit_is_cpu_limit_and_below_it_signaled() -> None:
    # RLIMIT_CPU's hard limit is a SIGKILL: it counts when the CPU used reached it.
    at_limit = Rusage(1.5, 0.46, 0, 0, 0, 0, 0)
    below = Rusage(0.5, 0.5, 0, 0, 0, 0, 0)
    assert (
        classify(signaled(signal.SIGKILL, at_limit), NO_CGROUP, LIMITS, None, 3).outcome
        is Outcome.CPU_LIMIT
    )
    assert (
        classify(signaled(signal.SIGKILL, below), NO_CGROUP, LIMITS, None, 3).outcome
        is Outcome.SIGNALED
    )
    unlimited = Limits(memory_bytes=1 << 20)
    assert (
        classify(signaled(signal.SIGKILL, at_limit), NO_CGROUP, unlimited, None, 3).outcome
        is Outcome.SIGNALED
    )


def test_a_refused_fork_is_pids_limit_only_if_the_command_failed() -> None:
    stats = CgroupStats(peak_memory_bytes=1 << 20, oom_kills=0, pids_refused=3)
    failed = classify(exited(1), stats, LIMITS, None, 0.1)
    assert failed.outcome is Outcome.PIDS_LIMIT
    assert failed.message == "pids limit of 16 refused a fork"
    assert classify(signaled(signal.SIGABRT), stats, LIMITS, None, 0.1).outcome is (
        Outcome.PIDS_LIMIT
    )
    # A command that coped with the refusal and exited 0 just exited.
    assert classify(exited(0), stats, LIMITS, None, 0.1).outcome is Outcome.EXITED


@pytest.mark.parametrize(
    "reason",
    [
        Outcome.CANCELLED,
        Outcome.TIMEOUT,
        Outcome.OUTPUT_LIMIT,
        Outcome.DAEMON_SHUTDOWN,
    ],
)
def test_the_daemons_kill_reason_wins_over_the_status(reason: Outcome) -> None:
    stats = CgroupStats(peak_memory_bytes=1 << 20, oom_kills=1, pids_refused=1)
    for status in (signaled(signal.SIGKILL), signaled(signal.SIGTERM), exited(0)):
        report = classify(status, stats, LIMITS, (reason, "why"), 0.1)
        assert (report.outcome, report.message) == (reason, "why")
    # The status is still reported as it was.
    report = classify(signaled(signal.SIGTERM), NO_CGROUP, LIMITS, (reason, "why"), 0.1)
    assert (report.exit_code, report.signal) == (None, signal.SIGTERM)


def test_no_status_means_the_spawner_died() -> None:
    report = classify(None, NO_CGROUP, LIMITS, (Outcome.TIMEOUT, "ignored"), 4.0)
    assert report.outcome is Outcome.SPAWN_FAILED
    assert report.failed_step == "spawner"
    assert report.exit_code is None and report.duration == 4.0


def test_the_cgroups_peak_replaces_wait4s_max_rss() -> None:
    stats = CgroupStats(peak_memory_bytes=10 << 20, oom_kills=0, pids_refused=0)
    report = classify(exited(0), stats, LIMITS, None, 0.1)
    assert report.peak_memory_bytes == 10 << 20
    assert report.rusage == (0.25, 0.125, 10 << 20, 3, 4, 5, 6)  # in bytes, as wait4's is


def test_an_unknown_signal_still_has_a_name() -> None:
    assert signal_name(signal.SIGTERM) == "SIGTERM"
    assert signal_name(99) == "SIG99"
