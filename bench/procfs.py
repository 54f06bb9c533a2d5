"""What the bench reads of other processes: RSS, CPU time, command lines."""

from __future__ import annotations

import contextlib
import os
import threading
from pathlib import Path

_TICK = os.sysconf("SC_CLK_TCK")


def rss_bytes(pid: int) -> int:
    """VmRSS of `pid` (its resident set), in bytes."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise ValueError(f"no VmRSS for pid {pid}")


def pss_bytes(pid: int) -> int:
    """Pss of `pid` (its resident set, each shared page divided among the
    processes that map it), in bytes: what a set of processes costs together
    is the sum of theirs."""
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
        if line.startswith("Pss:"):
            return int(line.split()[1]) * 1024
    raise ValueError(f"no Pss for pid {pid}")


def cpu_seconds(pid: int, thread: int = 0) -> float:
    """User + system CPU seconds `pid` has used itself (not its children); of
    its thread `thread` alone if given (the main thread's id is `pid`)."""
    path = f"/proc/{pid}/task/{thread}/stat" if thread else f"/proc/{pid}/stat"
    fields = Path(path).read_text().rsplit(")", 1)[1].split()
    # fields[0] is stat field 3 (state): utime and stime are fields 14 and 15.
    return (int(fields[11]) + int(fields[12])) / _TICK


def cpu_seconds_with_reaped(pid: int) -> float:
    """User + system CPU seconds of `pid` and of the children it has reaped
    (stat fields 14-17): the pool maker's, whose short-lived children (a
    mount namespace's builder where no template copy serves) are its work."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return sum(int(f) for f in fields[11:15]) / _TICK


def cpu_seconds_of(pids: list[int]) -> float:
    """The CPU seconds of `pids` together (each its own, not its children's)."""
    return sum(cpu_seconds(pid) for pid in pids)


def machine_busy_seconds() -> float:
    """CPU seconds all CPUs have spent not idle (nor waiting for I/O) since boot."""
    with open("/proc/stat") as f:
        ticks = [int(x) for x in f.readline().split()[1:]]
    return (sum(ticks) - ticks[3] - ticks[4]) / _TICK


def cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def pids_with(marker: bytes) -> list[int]:
    """Pids whose command line contains `marker`."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and marker in cmdline(int(entry)):
            found.append(int(entry))
    return found


def reap_orphans() -> None:
    """Reap every exited child without waiting. The bench runs as a
    subreaper, so whatever a stopped daemon left behind comes back to it."""
    with contextlib.suppress(ChildProcessError):
        while os.waitpid(-1, os.WNOHANG)[0]:
            pass


def children_of(pid: int) -> list[int]:
    out: list[int] = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(OSError):
            out += [int(c) for c in (task / "children").read_text().split()]
    return out


class RssSampler:
    """Samples the RSS of some pids on a thread until stopped; keeps the peak."""

    def __init__(self, pids: list[int], interval: float = 0.02) -> None:
        self.pids = pids
        self.interval = interval
        self.peak = {pid: rss_bytes(pid) for pid in pids}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="bench-rss", daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            for pid in self.pids:
                with contextlib.suppress(OSError, ValueError):
                    self.peak[pid] = max(self.peak[pid], rss_bytes(pid))

    def __enter__(self) -> RssSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
