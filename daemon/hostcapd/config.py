"""hostcapd's configuration: TOML validated by pydantic.

A config holds the daemon's own settings (state, audit, admin socket) and one
`Tenant` per socket. Every model forbids unknown keys, so a typo is an error
naming the key, never a silently ignored setting. `dev_config()` builds the
embedded default that `hostcapd serve --dev` runs.

The daemon's own sections ([daemon], [audit], [admin], [metrics]) live in
`hostcapd.config_sections` and how a bad config is reported in
`hostcapd.config_report`; both are re-exported or used from here.
"""

from __future__ import annotations

import grp
import hashlib
import math
import os
import pwd
import re
import tomllib
from collections.abc import Mapping
from enum import StrEnum
from pathlib import Path
from typing import Any

from hostcap_proto.floor import (
    DEV_ENV_ALLOWLIST,
    MAX_READ_BYTES,
    MAX_WRITE_BYTES,
    PROTECTED_PATHS,
    SECRET_PATHS,
)
from hostcap_proto.floor import FORBIDDEN_ENV as FORBIDDEN_ENV  # callers import it from here
from hostcap_proto.limits import (
    DEV_CEILING,
    DEV_DEFAULT,
    ZERO_ALLOWED,
    LimitValues,
    set_values,
)
from hostcap_proto.limits import LIMIT_NAMES as LIMIT_NAMES  # callers import it from here
from hostcap_proto.messages import check_receivable
from hostcap_proto.names import SPAWN_PROTECTIONS, SpawnProtectionName
from pydantic import Field, ValidationError, field_validator, model_validator

from hostcapd.config_report import format_errors

# The daemon's own sections; callers import them from here.
from hostcapd.config_sections import AdminSettings as AdminSettings
from hostcapd.config_sections import AuditSettings as AuditSettings
from hostcapd.config_sections import DaemonSettings as DaemonSettings
from hostcapd.config_sections import GiB as GiB
from hostcapd.config_sections import KiB as KiB
from hostcapd.config_sections import MetricsSettings as MetricsSettings
from hostcapd.config_sections import MiB as MiB
from hostcapd.config_sections import Model as _Model
from hostcapd.egress.rules import Network, effective_mode, mode_problems


class ConfigError(Exception):
    """The config is unreadable or invalid; the message names the bad key."""


class Tier(StrEnum):
    READ_ONLY = "read-only"
    READ_WRITE = "read-write"


class Level(StrEnum):
    """How a protection is applied: `required` (the tenant is refused at
    start-up if the host cannot apply it), `best-effort` (applied where the
    host can, reported either way), `off` (never applied)."""

    REQUIRED = "required"
    BEST_EFFORT = "best-effort"
    OFF = "off"


class Root(_Model):
    """A directory the tenant may use, seen by children at the same path."""

    path: Path
    tier: Tier = Tier.READ_WRITE

    @field_validator("path")
    @classmethod
    def _absolute(cls, value: Path) -> Path:
        if not value.is_absolute():
            raise ValueError("root path must be absolute")
        return Path(os.path.normpath(value))


# mypy reads a model as a non-frozen dataclass: what is inherited is only the fields.
class Limits(_Model, LimitValues):  # type: ignore[misc]
    """A set of limits (the fields of `hostcap_proto.limits.LimitValues`);
    every field optional. Used for tenant defaults, ceilings and (after
    merging) a spawn's applied limits."""

    @model_validator(mode="after")
    def _positive(self) -> Limits:
        for name, value in self:
            if value is None:
                continue
            if isinstance(value, float) and not math.isfinite(value):
                raise ValueError(f"{name} must be finite")
            if value < 0 or (value == 0 and name not in ZERO_ALLOWED):
                raise ValueError(f"{name} must be positive")
        return self


class TenantLimits(_Model):
    default: Limits = Limits()
    ceiling: Limits

    @model_validator(mode="after")
    def _defaults_within_ceiling(self) -> TenantLimits:
        for name in LIMIT_NAMES:
            ceiling = getattr(self.ceiling, name)
            if ceiling is None:
                raise ValueError(f"ceiling.{name} must be set (every limit needs a ceiling)")
            default = getattr(self.default, name)
            if default is not None and default > ceiling:
                raise ValueError(f"default.{name} ({default}) is above ceiling.{name} ({ceiling})")
        return self

    def effective_default(self, name: str) -> float | int:
        """The value a spawn gets when it does not ask: the default, else the ceiling."""
        value = getattr(self.default, name)
        return value if value is not None else getattr(self.ceiling, name)  # type: ignore[no-any-return]


class Sandbox(_Model):
    """The sandbox profile: each protection required, best-effort or off."""

    pid_namespace: Level = Level.REQUIRED
    net_namespace: Level = Level.REQUIRED
    ipc_namespace: Level = Level.REQUIRED
    uts_namespace: Level = Level.REQUIRED
    mount_namespace: Level = Level.REQUIRED
    cgroup: Level = Level.REQUIRED
    landlock: Level = Level.REQUIRED
    seccomp: Level = Level.REQUIRED
    rlimits: Level = Level.REQUIRED
    no_new_privs: Level = Level.REQUIRED
    uid_drop: Level = Level.REQUIRED
    exec_by_fd: Level = Level.REQUIRED
    #: An fs.changes record per spawn (hostcapd.sandbox.fschanges): needs the
    #: tenant's own file system (a disk budget) and fanotify with fid
    #: reporting. Best-effort by default: a tenant without a budget has none.
    fs_changes: Level = Level.BEST_EFFORT
    #: Give children the host network (no net namespace isolation).
    allow_host_network: bool = False
    #: AF_INET/AF_INET6 (and AF_NETLINK/NETLINK_ROUTE) sockets: the network the
    #: tenant has (its namespace's loopback, or the host's with
    #: allow_host_network). False: AF_UNIX only (hostcapd.sandbox.sockets).
    network_sockets: bool = True
    #: Directories children may read and execute (landlock).
    system_dirs: tuple[Path, ...] = (
        Path("/usr"),
        Path("/bin"),
        Path("/sbin"),
        Path("/lib"),
        Path("/lib64"),
        Path("/lib32"),
        Path("/etc"),
    )
    #: Size of the private per-spawn /tmp (tmpfs), bytes.
    tmp_size_bytes: int = 256 * MiB
    hostname: str = "hostcap"
    #: oom_score_adj given to children, so the OOM killer picks them first.
    oom_score_adj: int = Field(default=500, ge=-1000, le=1000)
    #: Test hook: protections to treat as unavailable on this host, so tests
    #: can check fail-closed behaviour on a host that has them.
    simulate_unavailable: tuple[str, ...] = ()

    def level(self, name: str) -> Level:
        return getattr(self, name)  # type: ignore[no-any-return]

    @field_validator("simulate_unavailable")
    @classmethod
    def _known(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        unknown = set(value) - set(PROTECTION_NAMES)
        if unknown:
            raise ValueError(f"unknown protection(s): {', '.join(sorted(unknown))}")
        return value


#: The protections of a spawn (defined once, in `hostcap_proto.names`).
PROTECTION_NAMES: tuple[SpawnProtectionName, ...] = SPAWN_PROTECTIONS


class CpuSettings(_Model):
    """The CPU share of all a tenant's spawns together (hostcapd.sandbox.cpu)."""

    #: Relative share against other tenants (cgroup v2 cpu.weight scale; 100 is
    #: the kernel's default, 1024 v1 cpu.shares). Applied where the host has a
    #: cpu controller, reported in Capabilities either way.
    weight: int = Field(default=100, ge=1, le=10000)
    #: Hard quota in cores (1.5: one and a half CPUs); None for none. A tenant
    #: with a quota the host cannot enforce is refused (PROTECTION_UNAVAILABLE).
    max_cores: float | None = Field(default=None, gt=0, le=4096)


class DiskSettings(_Model):
    """A byte (and inode) budget for all the tenant's read-write roots together,
    enforced by the kernel (hostcapd.sandbox.diskquota). A tenant whose budget
    the host cannot apply is refused (PROTECTION_UNAVAILABLE)."""

    #: Bytes; None: no budget (the roots share their volume with the host).
    budget_bytes: int | None = Field(default=None, ge=16 * MiB)
    #: Files and directories; None: mkfs.ext4's default for the size.
    inodes: int | None = Field(default=None, gt=0)


class FsChangesSettings(_Model):
    """What a spawn's fs.changes record holds (decision 0030)."""

    #: Paths listed per spawn; changes to further paths are counted by kind.
    max_paths: int = Field(default=1000, gt=0, le=100_000)
    #: Each listed regular file that still exists: its size.
    sizes: bool = True
    #: And its sha256 (read by the daemon when the spawn ends), up to this
    #: size; 0: no hashes.
    sha256_max_bytes: int = Field(default=0, ge=0)


DEFAULT_PROTECTED_PATHS = (
    *PROTECTED_PATHS,
    # Files git reads and runs programs from (filters, diff drivers, submodule
    # commands): a write there is code a later git run executes (issue 29).
    "**/.gitconfig",
    "**/.gitattributes",
    "**/.gitmodules",
    "**/.config/git/**",
    "**/.git/info/attributes",
    "**/.git/config.worktree",
    "**/.git/modules/**",
)
DEFAULT_SECRET_PATHS = SECRET_PATHS


class FsSettings(_Model):
    follow_symlinks: bool = True
    protected_paths: tuple[str, ...] = DEFAULT_PROTECTED_PATHS
    secret_paths: tuple[str, ...] = DEFAULT_SECRET_PATHS
    max_read_bytes: int = Field(default=MAX_READ_BYTES, gt=0)
    max_write_bytes: int = Field(default=MAX_WRITE_BYTES, gt=0)
    max_list_entries: int = Field(default=10_000, gt=0)
    max_list_depth: int = Field(default=8, gt=0)
    file_mode: int = Field(default=0o644, ge=0, le=0o7777)
    dir_mode: int = Field(default=0o755, ge=0, le=0o7777)
    umask: int = Field(default=0o022, ge=0, le=0o777)


_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def socket_mode_problem(mode: int, group: int | str | None) -> str:
    """Why a tenant socket's mode is refused, or "" when it is acceptable: any
    bit for other users, or group bits without a configured group."""
    if mode & 0o007:
        return (
            f"socket_mode {mode:#o} grants access to every local user, who could then run "
            "commands as this tenant (use 0o660 with socket_group, or 0o600)"
        )
    if mode & 0o070 and group is None:
        return (
            f"socket_mode {mode:#o} grants group access but socket_group is not set "
            "(set socket_group to the group of the tenant's engines, or use 0o600)"
        )
    return ""


def _identity(value: int | str, lookup: str) -> int:
    """A user's or group's id: a number as it is (also written as a string,
    "0"), a name looked up."""
    if isinstance(value, int):
        return value
    if value.isdigit():
        return int(value)
    try:
        if lookup == "user":
            return pwd.getpwnam(value).pw_uid
        return grp.getgrnam(value).gr_gid
    except KeyError:
        raise ValueError(f"unknown {lookup} {value!r}") from None


class Tenant(_Model):
    """One tenant: one socket, one run-as identity, roots, limits, profile."""

    name: str
    socket: Path
    socket_owner: int | str = 0
    #: The socket's group. Unset, the socket is the owner's alone: group
    #: bits in `socket_mode` then need a group to grant anything to.
    socket_group: int | str | None = None
    #: Owner and group bits only: a socket other users may connect to would
    #: let any local user run commands as this tenant.
    socket_mode: int = Field(default=0o600, ge=0, le=0o777)
    run_as_user: int | str
    run_as_group: int | str
    #: Another tenant may have the same run-as uid only when both say so:
    #: they are then one security domain (their spawns can reach each
    #: other's processes and files). check-config refuses it otherwise.
    shared_run_as: bool = False
    roots: tuple[Root, ...] = Field(min_length=1)
    path: tuple[Path, ...] = (Path("/usr/local/bin"), Path("/usr/bin"), Path("/bin"))
    allowed_executable_dirs: tuple[Path, ...] = ()
    #: Base variables every child gets.
    env: dict[str, str] = Field(default_factory=dict)
    #: Names a request may declare.
    env_allowlist: tuple[str, ...] = ()
    limits: TenantLimits
    max_concurrent_spawns: int = Field(default=64, gt=0)
    #: Detached spawns (issue 30): how many may run at once (they count
    #: among max_concurrent_spawns too), and the longest one may run, in
    #: seconds (its wall clock, whatever its request asks).
    max_detached_spawns: int = Field(default=8, ge=0)
    max_background_seconds: float = Field(default=3600.0, gt=0)
    #: Session environments (issue 30): how many may be open at once, and
    #: the longest one may stay open, in seconds.
    max_environments: int = Field(default=4, ge=0)
    max_environment_seconds: float = Field(default=86400.0, gt=0)
    #: The tenant as a whole (hostcapd.sandbox.tenant_ceilings): tasks and
    #: memory of all its spawns together, its tenant cgroup's pids.max and
    #: memory limit. Unset: an equal part of half the host's pid_max and
    #: memory, less its front-end's. check-config refuses tenants that
    #: together could take more than that half.
    tenant_pids: int | None = Field(default=None, gt=0)
    tenant_memory_bytes: int | None = Field(default=None, gt=0)
    #: Children kept set up ahead of need (the warm path, decision 0026):
    #: a spawn that finds one ready skips its clone and sandbox set-up.
    #: Unset: 2 where the profile has a pid namespace (measured to pay
    #: there), else 0; 0 turns it off.
    warm_spawns: int | None = Field(default=None, ge=0, le=16)
    sandbox: Sandbox = Sandbox()
    fs: FsSettings = FsSettings()
    cpu: CpuSettings = CpuSettings()
    disk: DiskSettings = DiskSettings()
    fs_changes: FsChangesSettings = FsChangesSettings()
    #: Egress: "none", "proxy" (by rule, through the egress proxy) or "host".
    network: Network = Network()

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        if not re.fullmatch(r"[a-z][a-z0-9_-]{0,62}", value):
            raise ValueError("tenant name must match [a-z][a-z0-9_-]{0,62}")
        return value

    @field_validator("socket", "path", "allowed_executable_dirs", mode="after")
    @classmethod
    def _absolute_paths(cls, value: Any) -> Any:
        for p in value if isinstance(value, tuple) else (value,):
            if not Path(p).is_absolute():
                raise ValueError(f"{p} must be an absolute path")
        return value

    @field_validator("env", mode="after")
    @classmethod
    def _env(cls, value: dict[str, str]) -> dict[str, str]:
        for name, val in value.items():
            if not _ENV_NAME.match(name) or FORBIDDEN_ENV.match(name):
                raise ValueError(f"environment variable {name!r} may not be set")
            if "\0" in val:
                raise ValueError(f"environment variable {name!r} contains NUL")
        return value

    @field_validator("env_allowlist", mode="after")
    @classmethod
    def _allowlist(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for name in value:
            if not _ENV_NAME.match(name) or FORBIDDEN_ENV.match(name):
                raise ValueError(f"environment variable {name!r} may not be allowed")
        return value

    @model_validator(mode="after")
    def _receivable(self) -> Tenant:
        # Every reply the daemon can send must fit the client's maximum message.
        check_receivable(self.limits.ceiling.output_bytes or 0, self.fs.max_read_bytes)
        return self

    @model_validator(mode="after")
    def _identities(self) -> Tenant:
        _identity(self.run_as_user, "user")
        _identity(self.run_as_group, "group")
        _identity(self.socket_owner, "user")
        if self.socket_group is not None:
            _identity(self.socket_group, "group")
        return self

    @model_validator(mode="after")
    def _socket_access(self) -> Tenant:
        problem = socket_mode_problem(self.socket_mode, self.socket_group)
        if problem:
            raise ValueError(problem)
        return self

    @property
    def uid(self) -> int:
        return _identity(self.run_as_user, "user")

    @property
    def gid(self) -> int:
        return _identity(self.run_as_group, "group")

    @property
    def socket_uid(self) -> int:
        return _identity(self.socket_owner, "user")

    @property
    def socket_gid(self) -> int:
        """The socket's group: root's (0) when none is configured, which
        `socket_mode` then grants nothing (the group bits are refused)."""
        return 0 if self.socket_group is None else _identity(self.socket_group, "group")

    @property
    def network_mode(self) -> str:
        """ "none", "proxy" or "host" (allow_host_network is "host")."""
        return effective_mode(self.network, self.sandbox.allow_host_network)

    @property
    def primary_root(self) -> Root:
        return self.roots[0]


class Config(_Model):
    daemon: DaemonSettings
    audit: AuditSettings
    admin: AdminSettings | None = None
    metrics: MetricsSettings | None = None
    tenants: tuple[Tenant, ...] = Field(min_length=1)

    @model_validator(mode="after")
    def _metrics_socket(self) -> Config:
        socket = self.metrics.socket if self.metrics is not None else None
        if socket is None:
            return self
        if not socket.is_relative_to(self.daemon.runtime_dir):
            raise ValueError(
                f"metrics.socket {socket} must be under daemon.runtime_dir {self.daemon.runtime_dir}"
            )
        taken = {t.socket for t in self.tenants} | (
            {self.admin.socket} if self.admin is not None else set()
        )
        if socket in taken:
            raise ValueError(f"metrics.socket {socket} is also another socket")
        return self

    @model_validator(mode="after")
    def _network(self) -> Config:
        for t in self.tenants:
            for problem in mode_problems(
                t.network, t.sandbox.allow_host_network, self.daemon.allow_resolve_overrides
            ):
                raise ValueError(f"tenant {t.name!r}: {problem}")
        return self

    @model_validator(mode="after")
    def _unique(self) -> Config:
        names = [t.name for t in self.tenants]
        sockets = [t.socket for t in self.tenants]
        if len(set(names)) != len(names):
            raise ValueError("tenant names must be unique")
        if len(set(sockets)) != len(sockets):
            raise ValueError("tenant sockets must be unique")
        return self

    def tenant(self, name: str) -> Tenant:
        for t in self.tenants:
            if t.name == name:
                return t
        raise KeyError(name)


def _tenants_from_table(data: dict[str, Any]) -> dict[str, Any]:
    # TOML writes tenants as [tenants.NAME] tables; the model wants a list.
    tenants = data.get("tenants")
    if isinstance(tenants, Mapping):
        data = dict(data)
        data["tenants"] = [
            {"name": name, **body} if isinstance(body, Mapping) else body
            for name, body in tenants.items()
        ]
    return data


def parse_config(
    data: Mapping[str, Any], source: str = "config", text: str | None = None
) -> Config:
    """The config of parsed TOML `data`; `text`, the file's, lets an error
    say the line of an unknown key."""
    table = _tenants_from_table(dict(data))
    try:
        return Config.model_validate(table)
    except ValidationError as error:
        raise ConfigError(format_errors(error, source, table, Config, text)) from None


def load_config(path: Path) -> Config:
    try:
        raw = path.read_bytes()
    except OSError as error:
        raise ConfigError(f"{path}: cannot read config: {error.strerror}") from None
    try:
        text = raw.decode()
        data = tomllib.loads(text)
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as error:
        raise ConfigError(f"{path}: not valid TOML: {error}") from None
    return parse_config(data, str(path), text)


def dev_identity() -> tuple[int, int]:
    """Children run as the invoking user, or as nobody when that is root."""
    uid = os.getuid()
    if uid != 0:
        return uid, os.getgid()
    nobody = pwd.getpwnam("nobody")
    return nobody.pw_uid, nobody.pw_gid


#: The --dev tenant's disk budget for its workspace.
DEV_DISK_BUDGET = 1 * GiB


def dev_config(state_dir: Path, network: Mapping[str, Any] | None = None) -> Config:
    """The embedded default of `hostcapd serve --dev`; `network` is the dev
    tenant's `[network]` table (`--network proxy --allow ...`). The dev
    config allows resolve overrides."""
    state = state_dir.resolve()
    uid, gid = dev_identity()
    invoking_uid, invoking_gid = os.getuid(), os.getgid()
    workspace = state / "workspace"
    return parse_config(
        {
            "daemon": {
                "state_dir": str(state),
                "runtime_dir": str(state / "run"),
                # Per state dir: a dev daemon sweeps only its own stale cgroups.
                "cgroup_parent": "hostcapd-dev-"
                + hashlib.sha256(str(state).encode()).hexdigest()[:12],
                "allow_resolve_overrides": True,
                # Recording who asked needs a network namespace per front-end,
                # which only root makes: a dev daemon of an ordinary user
                # records no callers rather than refusing to start.
                "record_callers": os.geteuid() == 0,
            },
            "audit": {"path": str(state / "log" / "audit.jsonl"), "group": None},
            "admin": {"socket": str(state / "run" / "admin.sock"), "mode": 0o600},
            "metrics": {"socket": str(state / "run" / "metrics.sock")},
            "tenants": {
                "dev": {
                    "socket": str(state / "run" / "dev.sock"),
                    "socket_owner": invoking_uid,
                    # Not as root the children are the invoking user: a group
                    # of theirs on the socket would be refused (and is moot).
                    "socket_group": invoking_gid if invoking_uid == 0 else None,
                    "socket_mode": 0o660 if invoking_uid == 0 else 0o600,
                    "run_as_user": uid,
                    "run_as_group": gid,
                    "roots": [
                        {"path": str(workspace), "tier": "read-write"},
                        {"path": str(state / "reference"), "tier": "read-only"},
                    ],
                    "env": {
                        "HOME": str(workspace),
                        "LANG": "C.UTF-8",
                        "PATH": "/usr/local/bin:/usr/bin:/bin",
                        "TMPDIR": "/tmp",
                    },
                    "env_allowlist": list(DEV_ENV_ALLOWLIST),
                    "limits": {
                        "default": set_values(DEV_DEFAULT),
                        "ceiling": set_values(DEV_CEILING),
                    },
                    "max_concurrent_spawns": 64,
                    "sandbox": dev_sandbox(),
                    "disk": {"budget_bytes": DEV_DISK_BUDGET},
                    "network": dict(network or {}),
                }
            },
        },
        source="embedded --dev config",
    )


def dev_sandbox() -> dict[str, str]:
    """--dev applies every protection this host supports: best-effort, so a
    host lacking one still serves (and says so), instead of refusing."""
    return {name: Level.BEST_EFFORT.value for name in PROTECTION_NAMES}


def prepare_dev_state(config: Config) -> None:
    """Create the --dev directories: the workspace owned by the run-as identity."""
    tenant = config.tenants[0]
    config.daemon.runtime_dir.mkdir(parents=True, exist_ok=True)
    config.audit.path.parent.mkdir(parents=True, exist_ok=True)
    for root in tenant.roots:
        root.path.mkdir(parents=True, exist_ok=True)
        if os.getuid() == 0 and root.tier is Tier.READ_WRITE:
            os.chown(root.path, tenant.uid, tenant.gid)
    # The state dir must be traversable by the run-as identity to reach the roots.
    state = config.daemon.state_dir
    state.chmod(state.stat().st_mode | 0o711)
