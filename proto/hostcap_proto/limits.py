"""The limits of a spawn: the one definition of their names, types and units.

`LimitValues` is what the others are built from: the daemon's config
(``hostcapd.config.Limits``, a tenant's defaults and ceilings, and a spawn's
applied limits), the audit record (``hostcap_proto.audit.AppliedLimits``) and
the client's request (``hostcap.ProcessLimits``) each inherit its fields, so
none declares a limit again. The wire message ``hostcap.v1.Limits`` carries the
same fields by the same names (tests/unit/proto/test_limits_model.py keeps the
two in step, types included).

`DEV_DEFAULT` and `DEV_CEILING` are the defaults and ceilings of the embedded
``hostcapd serve --dev`` tenant, also the in-memory test host's
(``hostcap.testing``), so the double refuses what the daemon refuses.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any

KiB = 1024
MiB = 1024 * KiB
GiB = 1024 * MiB

SECONDS = "seconds"
BYTES = "bytes"
COUNT = "count"


def _limit(unit: str, *, zero_allowed: bool = False) -> Any:
    return field(default=None, metadata={"unit": unit, "zero_allowed": zero_allowed})


@dataclass(frozen=True, kw_only=True)
class LimitValues:
    """One value per limit; None where unset (the tenant's default applies, or
    no limit of that kind). Every set value is positive and finite, except
    ``output_bytes``, which may be 0 (keep no output). Units are in each
    field's metadata (`UNITS`)."""

    #: CPU time (user + system); RLIMIT_CPU, ends CPU_LIMIT.
    cpu_seconds: float | None = _limit(SECONDS)
    #: The cgroup memory limit where cgroups apply, else the address-space rlimit.
    memory_bytes: int | None = _limit(BYTES)
    #: Wall-clock time from exec to kill; ends TIMEOUT.
    wall_seconds: float | None = _limit(SECONDS)
    #: Processes and threads in the spawn's tree.
    pids: int | None = _limit(COUNT)
    #: Output kept per stream (head and tail); not fatal.
    output_bytes: int | None = _limit(BYTES, zero_allowed=True)
    #: Largest file the spawn may write (RLIMIT_FSIZE).
    file_size_bytes: int | None = _limit(BYTES)
    #: Open file descriptors per process (RLIMIT_NOFILE).
    open_files: int | None = _limit(COUNT)
    #: Total output (stdout + stderr) after which the tree is killed, OUTPUT_LIMIT.
    total_output_bytes: int | None = _limit(BYTES)


#: The limit names, in the order of the wire message's field numbers.
LIMIT_NAMES: tuple[str, ...] = tuple(f.name for f in fields(LimitValues))
#: The unit of each limit: seconds, bytes or a count.
UNITS: dict[str, str] = {f.name: f.metadata["unit"] for f in fields(LimitValues)}
#: The limits that may be 0 (every other must be positive).
ZERO_ALLOWED: frozenset[str] = frozenset(
    f.name for f in fields(LimitValues) if f.metadata["zero_allowed"]
)


def set_values(limits: LimitValues) -> dict[str, float | int]:
    """The limits that are set, by name."""
    return {name: value for name, value in asdict(limits).items() if value is not None}


#: The ``--dev`` tenant's defaults: what a spawn gets when it asks for nothing.
DEV_DEFAULT = LimitValues(output_bytes=1 * MiB, wall_seconds=600)
#: The ``--dev`` tenant's ceilings: the most a spawn may ask for.
DEV_CEILING = LimitValues(
    cpu_seconds=3600,
    wall_seconds=3600,
    memory_bytes=4 * GiB,
    pids=1024,
    output_bytes=256 * MiB,
    total_output_bytes=256 * MiB,
    file_size_bytes=4 * GiB,
    open_files=4096,
)
