"""The daemon's own sections of hostcapd's config: [daemon], [audit],
[admin] and [metrics] (a reload may not change them), and the base every
config model shares: unknown keys are refused, values are frozen.

`hostcapd.config` re-exports them; the tenants' sections live there.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

KiB = 1024
MiB = 1024 * KiB
GiB = 1024 * MiB


class Model(BaseModel):
    """Every config model: an unknown key is an error naming it, never a
    silently ignored setting."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class AuditSettings(Model):
    path: Path
    #: Rotate when the file passes this size.
    max_bytes: int = Field(default=64 * MiB, gt=0)
    #: Rotated files kept.
    keep_files: int = Field(default=10, ge=1)
    #: Non-exec records are fsynced in batches at most this far apart.
    fsync_interval_ms: int = Field(default=50, ge=0)
    file_mode: int = Field(default=0o640, ge=0, le=0o777)
    #: Group of the audit files (root:adm on a system install).
    group: int | str | None = "adm"
    #: Mirror to the journal: "auto" (when journald is present), "on", "off".
    journal: Literal["auto", "on", "off"] = "auto"
    #: Run on each rotated file (its path appended as the last argument; an
    #: argv, no shell) before it may be removed; exit 0 means archived. A
    #: file it fails on is kept past keep_files and tried again.
    archive_command: tuple[str, ...] = ()
    archive_timeout_seconds: float = Field(default=600.0, gt=0, le=86400)
    #: Compress rotated files (all but the newest) to NAME.gz.
    compress: Literal["none", "gzip"] = "none"
    #: The most of each WriteStdin's input a process.input record keeps as
    #: text (redacted first; its size and sha256 are always recorded). 0: none.
    input_text_bytes: int = Field(default=4096, ge=0, le=64 * 1024)

    @field_validator("archive_command")
    @classmethod
    def _argv(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        if value and not Path(value[0]).is_absolute():
            raise ValueError(
                "archive_command[0] must be an absolute path (it runs without a shell)"
            )
        if any(not arg or "\0" in arg for arg in value):
            raise ValueError("archive_command arguments must be non-empty, without NUL")
        return value


class AdminSettings(Model):
    socket: Path
    group: int | str | None = None
    mode: int = Field(default=0o660, ge=0, le=0o777)

    @field_validator("mode")
    @classmethod
    def _admin_only(cls, value: int) -> int:
        if value & ~0o660:
            raise ValueError(
                f"admin socket mode {value:#o} grants more than owner and group read/write"
            )
        return value


class MetricsSettings(Model):
    """The Prometheus endpoint (HTTP `GET /metrics`); absent: no metrics.
    Exactly one of `socket` (a Unix socket under the runtime dir, root and
    the admin group) or `listen` (`"127.0.0.1:PORT"`: loopback only)."""

    socket: Path | None = None
    listen: str | None = None

    @field_validator("socket")
    @classmethod
    def _absolute(cls, value: Path | None) -> Path | None:
        if value is not None and not value.is_absolute():
            raise ValueError("metrics.socket must be an absolute path")
        return value

    @field_validator("listen")
    @classmethod
    def _loopback(cls, value: str | None) -> str | None:
        if value is None:
            return value
        host, _, port = value.rpartition(":")
        if host != "127.0.0.1" or not port.isdigit() or not 0 <= int(port) <= 65535:
            raise ValueError(
                f"metrics.listen {value!r} must be 127.0.0.1:PORT (the endpoint is "
                "unauthenticated: loopback only; use metrics.socket otherwise)"
            )
        return value

    @model_validator(mode="after")
    def _one(self) -> MetricsSettings:
        if (self.socket is None) == (self.listen is None):
            raise ValueError("set exactly one of metrics.socket and metrics.listen")
        return self

    @property
    def host(self) -> str:
        return "127.0.0.1"

    @property
    def port(self) -> int | None:
        return None if self.listen is None else int(self.listen.rpartition(":")[2])


class DaemonSettings(Model):
    state_dir: Path
    runtime_dir: Path
    #: Parent of the per-spawn cgroups; empty means the daemon's own cgroup.
    cgroup_parent: str = ""
    #: Seconds between SIGTERM and SIGKILL when a tree is killed.
    kill_grace_seconds: float = Field(default=0.5, ge=0, le=60)
    #: Remount the cgroup2 hierarchy with favordynmods at start-up, so joining
    #: a spawn's cgroup never waits for an RCU grace period (~10 ms).
    cgroup_favor_dynmods: bool = True
    #: The root process's event loop: "asyncio" (the standard library's) or
    #: "uvloop" (start-up fails if it cannot be imported): about 6 % less of
    #: the root's CPU a spawn, 1.9 MiB more of its idle RSS (bench/README.md,
    #: "the root's loop, seventh pass").
    event_loop: Literal["asyncio", "uvloop"] = "asyncio"
    #: Each front-end process's event loop, as `event_loop`: uvloop by
    #: default, which cuts a front-end's CPU per call (bench/README.md, "The
    #: front-end's CPU"); a front-end that cannot load it refuses to start,
    #: and so does the daemon.
    frontend_event_loop: Literal["asyncio", "uvloop"] = "uvloop"
    #: Where each front-end process's threads run: "core" keeps them on the
    #: core the process started on (its level-2 cache's CPUs), which cuts a
    #: front-end's CPU per call (its threads wake each other a dozen times
    #: a call: bench/README.md, "The tenant front-end's CPU per call");
    #: "any" leaves them to the scheduler.
    frontend_cpu: Literal["core", "any"] = "core"
    #: Serve each tenant's socket from its own unprivileged front-end process
    #: (the privilege split, docs/decisions/0027-the-privilege-split.md). A
    #: host that cannot confine a front-end refuses to start; false runs the
    #: same front-end code in the root process instead, unconfined (the
    #: benchmark's comparison: what the separate processes cost).
    frontend_processes: bool = True
    #: Record who made each call (the caller's uid, gid and pid, SO_PEERCRED)
    #: in its audit records: each front-end accepts its socket itself and relays
    #: the connection to its gRPC server, in a network namespace of its own
    #: (docs/decisions/0033-who-asked.md). false: grpc serves the socket
    #: directly and no record names a caller (the benchmark's comparison). A
    #: front-end in the root process (frontend_processes = false) records none.
    record_callers: bool = True
    #: Each tenant's front-end process asks its fs worker for reads
    #: directly, not through the root process (a read of up to 1 MiB; a
    #: larger one, a write, a listing or a stat is relayed as before): the
    #: worker still checks every read as the tenant, and the root still
    #: audits each refused one from the worker's report
    #: (docs/decisions/0034-direct-reads.md). false: every read is relayed
    #: (the benchmark's comparison).
    fs_direct_reads: bool = True
    #: Let tenants' `network.resolve` map names to addresses (tests, offline
    #: mirrors): an address so named is connected to as given.
    allow_resolve_overrides: bool = False
    #: A fresh spawn's order to the spawner leaves before its exec record is
    #: built and appended; the child still waits for the go, written once the
    #: record is durable (docs/decisions/0020). false: the record first (the
    #: benchmark's comparison, bench/README.md).
    order_before_exec_record: bool = True
    #: A spawn's cgroup, once the spawn ended and no process is left in it,
    #: serves its runtime's next spawn (its limits set again, its memory
    #: peak reset, its counters' base taken) instead of being removed and
    #: another made (process/cgroup_pool.py). false: one cgroup a spawn
    #: (the benchmark's comparison, bench/README.md).
    recycle_spawn_cgroups: bool = True
    #: Once started, the root process moves every object it made so far out
    #: of the cyclic collector's reach (`gc.freeze()`; again after a reload):
    #: a full collection then walks only what spawns made since, not the
    #: start-up's objects (bench/README.md, "The root's CPU per spawn").
    #: false: collected as Python's default (the benchmark's comparison).
    gc_freeze: bool = True
    #: The root's youngest-generation collection threshold (tracked objects
    #: allocated, net, between two collections; Python's default is 700: ten
    #: times fewer collections, each of the same cost per object).
    gc_threshold: int = Field(default=7000, ge=100, le=1_000_000)
