"""Where a front-end process runs: its threads kept on one core
(`Hello.cpu`, from `daemon.frontend_cpu`).

A call crosses a front-end's threads a dozen times (its event loop, gRPC's
completion-queue poller and its event engine's workers each wake the next):
about 14 context switches per call, each a wake-up of a thread that last
ran on either CPU. Kept on one core, each wake-up finds the caches the last
thread warmed, and needs no wake-up of another CPU (an inter-processor
interrupt: on a virtual machine, an exit to the hypervisor). Measured
(bench/README.md, "The tenant front-end's CPU per call"): the front-end's
CPU per call 0.77-0.91x between two daemons (0.94-0.98x with one daemon's
front-ends switched back and forth); a stream's within the noise.

"core" pins the process, before it makes any thread (they inherit it), to
the CPUs that share the level-2 cache of the CPU it started on (that CPU
and its SMT siblings; the kernel placed it on the idlest CPU at its exec,
which spreads the front-ends of several tenants). The price: the scheduler
cannot move a front-end off a busy core; its processes take the CPU it
has there by their weight, as before. "any" leaves it to the scheduler.
"""

from __future__ import annotations

import ctypes
import os
from pathlib import Path

MODES = ("core", "any")
_CPU = Path("/sys/devices/system/cpu")


def _cpu_list(text: str) -> set[int]:
    """A kernel CPU list ("0-3,8,10-11") as a set."""
    cpus: set[int] = set()
    for part in text.strip().split(","):
        if not part:
            continue
        first, _, last = part.partition("-")
        cpus.update(range(int(first), int(last or first) + 1))
    return cpus


def core_of(cpu: int, root: Path = _CPU) -> set[int]:
    """The CPUs that share `cpu`'s level-2 cache (itself, and its SMT
    siblings); `{cpu}` where sysfs does not say."""
    for index in sorted((root / f"cpu{cpu}" / "cache").glob("index*")):
        try:
            if (index / "level").read_text().strip() == "2":
                return _cpu_list((index / "shared_cpu_list").read_text()) | {cpu}
        except (OSError, ValueError):
            continue
    return {cpu}


def current_cpu() -> int | None:
    """The CPU this thread runs on (glibc's sched_getcpu), None if unknown."""
    try:
        cpu = int(ctypes.CDLL(None).sched_getcpu())
    except (OSError, AttributeError):
        return None
    return cpu if cpu >= 0 else None


def place(mode: str) -> set[int] | None:
    """Apply `mode` to this process's calling thread (and so to every thread
    it makes after); the CPUs it is kept on, or None when it is left to the
    scheduler (mode "any", one CPU allowed anyway, or no CPU known).
    Raises ValueError for an unknown mode."""
    if mode not in MODES:
        raise ValueError(f"unknown front-end CPU placement {mode!r}")
    allowed = os.sched_getaffinity(0)
    cpu = current_cpu()
    if mode == "any" or len(allowed) < 2 or cpu is None or cpu not in allowed:
        return None
    cpus = core_of(cpu) & allowed or {cpu}
    if cpus == allowed:
        return None
    os.sched_setaffinity(0, cpus)
    return cpus
