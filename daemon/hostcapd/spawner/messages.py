"""The messages of the front-end <-> spawner channel, one class each.

    order = SpawnOrder(id=..., profile=key, by_fd=True, exe_path=b"/bin/true", ...)
    channel.send(sock, order.to_wire(), fds)       # the front-end
    message = to_spawner(received)                 # the spawner: typed, checked
    channel.send(sock, Started(id, pid).to_wire()) # and back: from_spawner(...)

The front-end sends `ToSpawner` messages (a profile registration, a spawn
order, a kill, ...), the spawner answers with `FromSpawner` reports. On the
wire each is the dict `channel` marshals, with its kind under "op"; the
field names and values are the ones the two ends exchanged as dict literals
before these classes existed.

`from_wire` checks every field's type (and no field too many) and raises
MalformedMessage, so a receiver never acts on half a message: the spawner
fails that spawn (or answers "error"), the front-end treats its channel as
broken. The checks are type checks of plain values, a few microseconds on a
spawn order (the spawn path is measured in bench/). The values themselves
(argv without NUL bytes, fds that are open) are the C set-up's to refuse.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any, ClassVar

from hostcapd.childsetup import LandlockRule, Mount, RLimit

Wire = dict[str, Any]

#: ru_utime, ru_stime, ru_maxrss, ru_nvcsw, ru_nivcsw, ru_inblock, ru_oublock
Rusage = tuple[float, float, int, int, int, int, int]


class MalformedMessage(ValueError):
    """A message on the spawner channel that is not one of ours: an unknown
    op, a missing or extra field, or a field of the wrong type."""

    def __init__(self, message: str, spawn_id: str | None = None) -> None:
        super().__init__(message)
        #: The spawn a malformed order named, when its id could be read.
        self.spawn_id = spawn_id


# --- field checks (type(...) is, so a bool is not an int) ---


def _wire_keys(cls: type) -> frozenset[str]:
    return frozenset(("op", *(f.name for f in fields(cls))))


def _keys(m: Mapping[str, Any], op: str, allowed: frozenset[str], sid: str | None = None) -> None:
    if m.get("op") != op:
        raise MalformedMessage(f"not a {op!r} message: op {m.get('op')!r}", sid)
    if not m.keys() <= allowed:
        extra = ", ".join(sorted(map(str, m.keys() - allowed)))
        raise MalformedMessage(f"{op}: unknown field(s) {extra}", sid)


def _missing(op: str, key: str, sid: str | None) -> MalformedMessage:
    return MalformedMessage(f"{op}: missing or malformed field {key!r}", sid)


def _int(m: Mapping[str, Any], op: str, key: str, sid: str | None = None) -> int:
    value = m.get(key)
    if type(value) is not int:
        raise _missing(op, key, sid)
    return value


def _bool(m: Mapping[str, Any], op: str, key: str, sid: str | None = None) -> bool:
    value = m.get(key)
    if type(value) is not bool:
        raise _missing(op, key, sid)
    return value


def _str(m: Mapping[str, Any], op: str, key: str, sid: str | None = None) -> str:
    value = m.get(key)
    if type(value) is not str:
        raise _missing(op, key, sid)
    return value


def _bytes(m: Mapping[str, Any], op: str, key: str, sid: str | None = None) -> bytes:
    value = m.get(key)
    if type(value) is not bytes:
        raise _missing(op, key, sid)
    return value


def _opt_bytes(m: Mapping[str, Any], op: str, key: str, sid: str | None = None) -> bytes | None:
    if key not in m:
        raise _missing(op, key, sid)
    value = m[key]
    if value is not None and type(value) is not bytes:
        raise _missing(op, key, sid)
    return value


def _seq(m: Mapping[str, Any], op: str, key: str, sid: str | None) -> list[Any] | tuple[Any, ...]:
    value = m.get(key)
    if type(value) is not list and type(value) is not tuple:
        raise _missing(op, key, sid)
    return value


def _bytes_seq(m: Mapping[str, Any], op: str, key: str, sid: str | None) -> Sequence[bytes]:
    value = _seq(m, op, key, sid)
    for item in value:
        if type(item) is not bytes:
            raise _missing(op, key, sid)
    return value


def _ints(value: Any, n: int) -> bool:
    return (type(value) is tuple or type(value) is list) and (
        len(value) == n and all(type(x) is int for x in value)
    )


def _is_rlimit(r: Any) -> bool:
    return (
        (type(r) is tuple or type(r) is list)
        and len(r) == 3
        and type(r[0]) is int
        and type(r[1]) is int
        and type(r[2]) is int
    )


def _is_ids(ids: Any) -> bool:
    return (
        (type(ids) is tuple or type(ids) is list)
        and len(ids) == 2
        and type(ids[0]) is int
        and type(ids[1]) is int
    )


def _opt_b(value: Any) -> bool:
    return value is None or type(value) is bytes


def _mounts(m: Mapping[str, Any], op: str, key: str) -> tuple[Mount, ...]:
    out: list[Mount] = []
    for item in _seq(m, op, key, None):
        # The C set-up takes the last field (`clear`) as optional: 0.
        if (type(item) is not tuple and type(item) is not list) or len(item) not in (6, 7):
            raise _missing(op, key, None)
        kind, source, target, fstype, flags, data, *rest = item
        clear = rest[0] if rest else 0
        if not (
            type(kind) is int
            and _opt_b(source)
            and _opt_b(target)
            and _opt_b(fstype)
            and type(flags) is int
            and _opt_b(data)
            and type(clear) is int
        ):
            raise _missing(op, key, None)
        out.append((kind, source, target, fstype, flags, data, clear))
    return tuple(out)


# --- the front-end's messages to the spawner ---


@dataclass(frozen=True, slots=True)
class RegisterProfile:
    """A tenant's prepared sandbox values, registered once (and again after a
    restart of the spawner), used by every spawn order naming `key`."""

    OP: ClassVar[str] = "profile"
    key: str
    clone_flags: int
    mounts: tuple[Mount, ...]
    #: The trailing steps of `mounts` a spawn makes itself in a pooled namespace.
    join_mounts: tuple[Mount, ...]
    hostname: bytes | None
    loopback_up: bool
    umask: int
    landlock_rules: tuple[LandlockRule, ...]
    seccomp: bytes
    drop_caps: bool
    no_new_privs: bool
    oom_score_adj: bytes | None
    pdeathsig: int

    @property
    def pooled_mounts(self) -> tuple[Mount, ...]:
        """The steps a pooled namespace is made with (as NamespacePlan's)."""
        return self.mounts[: len(self.mounts) - len(self.join_mounts)]

    def to_wire(self) -> Wire:
        return {
            "op": "profile",
            "key": self.key,
            "clone_flags": self.clone_flags,
            "mounts": self.mounts,
            "join_mounts": self.join_mounts,
            "hostname": self.hostname,
            "loopback_up": self.loopback_up,
            "umask": self.umask,
            "landlock_rules": self.landlock_rules,
            "seccomp": self.seccomp,
            "drop_caps": self.drop_caps,
            "no_new_privs": self.no_new_privs,
            "oom_score_adj": self.oom_score_adj,
            "pdeathsig": self.pdeathsig,
        }

    @classmethod
    def from_wire(cls, m: Mapping[str, Any]) -> RegisterProfile:
        op = cls.OP
        _keys(m, op, _PROFILE_KEYS)
        rules: list[LandlockRule] = []
        for rule in _seq(m, op, "landlock_rules", None):
            if (type(rule) is not tuple and type(rule) is not list) or len(rule) != 2:
                raise _missing(op, "landlock_rules", None)
            path, access = rule
            if type(path) is not bytes or type(access) is not int:
                raise _missing(op, "landlock_rules", None)
            rules.append((path, access))
        return cls(
            key=_str(m, op, "key"),
            clone_flags=_int(m, op, "clone_flags"),
            mounts=_mounts(m, op, "mounts"),
            join_mounts=_mounts(m, op, "join_mounts"),
            hostname=_opt_bytes(m, op, "hostname"),
            loopback_up=_bool(m, op, "loopback_up"),
            umask=_int(m, op, "umask"),
            landlock_rules=tuple(rules),
            seccomp=_bytes(m, op, "seccomp"),
            drop_caps=_bool(m, op, "drop_caps"),
            no_new_privs=_bool(m, op, "no_new_privs"),
            oom_score_adj=_opt_bytes(m, op, "oom_score_adj"),
            pdeathsig=_int(m, op, "pdeathsig"),
        )


_PROFILE_KEYS = _wire_keys(RegisterProfile)


@dataclass(frozen=True, slots=True)
class DropProfile:
    OP: ClassVar[str] = "drop_profile"
    key: str

    def to_wire(self) -> Wire:
        return {"op": "drop_profile", "key": self.key}

    @classmethod
    def from_wire(cls, m: Mapping[str, Any]) -> DropProfile:
        _keys(m, cls.OP, _DROP_KEYS)
        return cls(_str(m, cls.OP, "key"))


_DROP_KEYS = _wire_keys(DropProfile)


@dataclass(frozen=True, slots=True)
class SpawnOrder:
    """Clone one child of profile `profile`. Its fds travel beside the message,
    in this order: the executable, stdin, stdout, stderr, the cancel eventfd,
    then the go eventfd (when `go`), the landlock ruleset (when `landlock`)
    and the cgroup.procs fds (the rest). With `warm`, the warm child made by
    the WarmOrder of the same id runs it: its fds are the executable, stdin,
    stdout, stderr, cancel and go only (it has its ruleset and cgroups), and
    `ids`, `loginuid` and `landlock` are the WarmOrder's."""

    OP: ClassVar[str] = "spawn"
    id: str
    profile: str
    #: Exec the executable fd (execveat); else `exe_path`.
    by_fd: bool
    exe_path: bytes
    argv: Sequence[bytes]
    envp: Sequence[bytes]
    cwd_root: bytes | None
    cwd: bytes | None
    rlimits: Sequence[RLimit]
    #: (uid, gid) to switch to, or None.
    ids: tuple[int, int] | None
    loginuid: bytes | None
    #: A landlock ruleset fd is among the fds.
    landlock: bool
    #: A go eventfd is among the fds: the child waits for it before exec.
    go: bool = False
    #: Run by the warm child of the same id (see WarmOrder).
    warm: bool = False
    #: In the environment of this id (OpenEnvironment): its network, IPC and
    #: mount namespaces, not a fresh one's. Empty: fresh ones.
    env: str = ""

    def to_wire(self) -> Wire:
        return {
            "op": "spawn",
            "warm": self.warm,
            "env": self.env,
            "id": self.id,
            "profile": self.profile,
            "by_fd": self.by_fd,
            "exe_path": self.exe_path,
            "argv": self.argv,
            "envp": self.envp,
            "cwd_root": self.cwd_root,
            "cwd": self.cwd,
            "rlimits": self.rlimits,
            "ids": self.ids,
            "loginuid": self.loginuid,
            "landlock": self.landlock,
            "go": self.go,
        }

    @classmethod
    def from_wire(cls, m: Mapping[str, Any]) -> SpawnOrder:
        # One pass of plain type checks for an order as the front-end sends
        # it (the spawn path); anything else is taken apart field by field
        # to say what is wrong.
        keys = m.keys()
        if _SPAWN_REQUIRED <= keys <= _SPAWN_KEYS and m["op"] == "spawn":
            get = m.get
            sid, argv, envp, rlimits, ids = m["id"], m["argv"], m["envp"], m["rlimits"], m["ids"]
            cwd_root, cwd, loginuid, go = m["cwd_root"], m["cwd"], m["loginuid"], get("go", False)
            warm = get("warm", False)
            env = get("env", "")
            if (
                type(env) is str
                and type(sid) is str
                and type(m["profile"]) is str
                and type(m["by_fd"]) is bool
                and type(m["exe_path"]) is bytes
                and type(m["landlock"]) is bool
                and type(go) is bool
                and type(warm) is bool
                and (cwd_root is None or type(cwd_root) is bytes)
                and (cwd is None or type(cwd) is bytes)
                and (loginuid is None or type(loginuid) is bytes)
                and (type(argv) is list or type(argv) is tuple)
                and not [a for a in argv if type(a) is not bytes]
                and (type(envp) is list or type(envp) is tuple)
                and not [e for e in envp if type(e) is not bytes]
                and (type(rlimits) is list or type(rlimits) is tuple)
                and not [r for r in rlimits if not _is_rlimit(r)]
                and (ids is None or _is_ids(ids))
            ):
                return cls(
                    sid,
                    m["profile"],
                    m["by_fd"],
                    m["exe_path"],
                    argv,
                    envp,
                    cwd_root,
                    cwd,
                    rlimits,
                    None if ids is None else (ids[0], ids[1]),
                    loginuid,
                    m["landlock"],
                    go,
                    warm,
                    env,
                )
        return cls._explained(m)

    @classmethod
    def _explained(cls, m: Mapping[str, Any]) -> SpawnOrder:
        """from_wire, field by field: raises MalformedMessage naming the first
        field that is wrong."""
        op = cls.OP
        sid = m.get("id")
        if type(sid) is not str:
            raise _missing(op, "id", None)
        _keys(m, op, _SPAWN_KEYS, sid)
        rlimits = _seq(m, op, "rlimits", sid)
        for rlimit in rlimits:
            if not _ints(rlimit, 3):
                raise _missing(op, "rlimits", sid)
        ids = m.get("ids")
        if ids is not None and not _ints(ids, 2):
            raise _missing(op, "ids", sid)
        go = m.get("go", False)
        if type(go) is not bool:
            raise _missing(op, "go", sid)
        warm = m.get("warm", False)
        if type(warm) is not bool:
            raise _missing(op, "warm", sid)
        env = m.get("env", "")
        if type(env) is not str:
            raise _missing(op, "env", sid)
        return cls(
            id=sid,
            profile=_str(m, op, "profile", sid),
            by_fd=_bool(m, op, "by_fd", sid),
            exe_path=_bytes(m, op, "exe_path", sid),
            argv=_bytes_seq(m, op, "argv", sid),
            envp=_bytes_seq(m, op, "envp", sid),
            cwd_root=_opt_bytes(m, op, "cwd_root", sid),
            cwd=_opt_bytes(m, op, "cwd", sid),
            rlimits=rlimits,
            ids=None if ids is None else (ids[0], ids[1]),
            loginuid=_opt_bytes(m, op, "loginuid", sid),
            landlock=_bool(m, op, "landlock", sid),
            go=go,
            warm=warm,
            env=env,
        )


_SPAWN_KEYS = _wire_keys(SpawnOrder)
_SPAWN_REQUIRED = _SPAWN_KEYS - {"go", "warm", "env"}


@dataclass(frozen=True, slots=True)
class WarmOrder:
    """Make a warm child of profile `profile` ahead of need: set up to its
    filters (namespaces, mounts, cgroups, identity, landlock, seccomp), it
    waits for the SpawnOrder of the same id (`warm`), which it runs once.
    Its fds: the landlock ruleset (when `landlock`), then the cgroup.procs
    fds. `roots` are the paths (in its namespace) a cwd may be beneath."""

    OP: ClassVar[str] = "warm"
    id: str
    profile: str
    ids: tuple[int, int] | None
    loginuid: bytes | None
    landlock: bool
    roots: tuple[bytes, ...]
    #: Set before the identity, as a fresh child sets them (RLIMIT_NPROC:
    #: the uid switch checks it); a spawn's rlimits come with its request.
    rlimits: tuple[RLimit, ...] = ()

    def to_wire(self) -> Wire:
        return {
            "op": "warm",
            "rlimits": self.rlimits,
            "id": self.id,
            "profile": self.profile,
            "ids": self.ids,
            "loginuid": self.loginuid,
            "landlock": self.landlock,
            "roots": self.roots,
        }

    @classmethod
    def from_wire(cls, m: Mapping[str, Any]) -> WarmOrder:
        op = cls.OP
        sid = m.get("id")
        if type(sid) is not str:
            raise _missing(op, "id", None)
        _keys(m, op, _WARM_KEYS, sid)
        ids = m.get("ids")
        if ids is not None and not _ints(ids, 2):
            raise _missing(op, "ids", sid)
        rlimits = _seq(m, op, "rlimits", sid)
        if not all(_is_rlimit(r) for r in rlimits):
            raise _missing(op, "rlimits", sid)
        return cls(
            rlimits=tuple((r[0], r[1], r[2]) for r in rlimits),
            id=sid,
            profile=_str(m, op, "profile", sid),
            ids=None if ids is None else (ids[0], ids[1]),
            loginuid=_opt_bytes(m, op, "loginuid", sid),
            landlock=_bool(m, op, "landlock", sid),
            roots=tuple(_bytes_seq(m, op, "roots", sid)),
        )


_WARM_KEYS = _wire_keys(WarmOrder)


@dataclass(frozen=True, slots=True)
class DropWarm:
    """Kill the warm child `id` if it still waits (no spawn will take it)."""

    OP: ClassVar[str] = "drop_warm"
    id: str

    def to_wire(self) -> Wire:
        return {"op": "drop_warm", "id": self.id}

    @classmethod
    def from_wire(cls, m: Mapping[str, Any]) -> DropWarm:
        _keys(m, cls.OP, _DROP_WARM_KEYS)
        return cls(_str(m, cls.OP, "id"))


_DROP_WARM_KEYS = _wire_keys(DropWarm)


@dataclass(frozen=True, slots=True)
class Kill:
    """Signal the main process (and its group) of a spawn not yet reaped."""

    OP: ClassVar[str] = "kill"
    id: str
    pid: int
    sig: int

    def to_wire(self) -> Wire:
        return {"op": "kill", "id": self.id, "pid": self.pid, "sig": self.sig}

    @classmethod
    def from_wire(cls, m: Mapping[str, Any]) -> Kill:
        op = cls.OP
        _keys(m, op, _KILL_KEYS)
        return cls(_str(m, op, "id"), _int(m, op, "pid"), _int(m, op, "sig"))


_KILL_KEYS = _wire_keys(Kill)


@dataclass(frozen=True, slots=True)
class Shutdown:
    """Kill and reap every child, then exit."""

    OP: ClassVar[str] = "shutdown"

    def to_wire(self) -> Wire:
        return {"op": "shutdown"}

    @classmethod
    def from_wire(cls, m: Mapping[str, Any]) -> Shutdown:
        _keys(m, cls.OP, _SHUTDOWN_KEYS)
        return cls()


_SHUTDOWN_KEYS = _wire_keys(Shutdown)


@dataclass(frozen=True, slots=True)
class OpenEnv:
    """Make the namespaces of environment `id` (network, IPC, and mount with
    profile `profile`'s new root) and hold them until CloseEnv. A spawn that
    names it joins them. If making them fails, its spawns fail at step
    "environment"."""

    OP: ClassVar[str] = "open_env"
    id: str
    profile: str

    def to_wire(self) -> Wire:
        return {"op": "open_env", "id": self.id, "profile": self.profile}

    @classmethod
    def from_wire(cls, m: Mapping[str, Any]) -> OpenEnv:
        _keys(m, cls.OP, _OPEN_ENV_KEYS)
        return cls(_str(m, cls.OP, "id"), _str(m, cls.OP, "profile"))


_OPEN_ENV_KEYS = _wire_keys(OpenEnv)


@dataclass(frozen=True, slots=True)
class CloseEnv:
    """Drop environment `id`'s namespaces (its spawns have been killed)."""

    OP: ClassVar[str] = "close_env"
    id: str

    def to_wire(self) -> Wire:
        return {"op": "close_env", "id": self.id}

    @classmethod
    def from_wire(cls, m: Mapping[str, Any]) -> CloseEnv:
        _keys(m, cls.OP, _CLOSE_ENV_KEYS)
        return cls(_str(m, cls.OP, "id"))


_CLOSE_ENV_KEYS = _wire_keys(CloseEnv)

ToSpawner = (
    RegisterProfile
    | DropProfile
    | SpawnOrder
    | WarmOrder
    | DropWarm
    | Kill
    | Shutdown
    | OpenEnv
    | CloseEnv
)

_TO_SPAWNER: dict[Any, Any] = {
    cls.OP: cls.from_wire
    for cls in (
        RegisterProfile,
        DropProfile,
        SpawnOrder,
        WarmOrder,
        DropWarm,
        Kill,
        Shutdown,
        OpenEnv,
        CloseEnv,
    )
}


def to_spawner(m: Mapping[str, Any]) -> ToSpawner:
    """The front-end's message `m` as received by the spawner, checked."""
    decode = _TO_SPAWNER.get(m.get("op"))
    if decode is None:
        raise MalformedMessage(f"unknown op {m.get('op')!r}")
    message: ToSpawner = decode(m)
    return message


# --- the spawner's reports to the front-end ---


@dataclass(frozen=True, slots=True)
class Hello:
    """The spawner is up (sent once, before anything else)."""

    OP: ClassVar[str] = "hello"
    pid: int

    def to_wire(self) -> Wire:
        return {"op": "hello", "pid": self.pid}

    @classmethod
    def from_wire(cls, m: Mapping[str, Any]) -> Hello:
        _keys(m, cls.OP, _HELLO_KEYS)
        return cls(_int(m, cls.OP, "pid"))


_HELLO_KEYS = _wire_keys(Hello)


@dataclass(frozen=True, slots=True)
class Started:
    """The child of spawn `id` has exec'd as `pid`."""

    OP: ClassVar[str] = "started"
    id: str
    pid: int

    def to_wire(self) -> Wire:
        return {"op": "started", "id": self.id, "pid": self.pid}

    @classmethod
    def from_wire(cls, m: Mapping[str, Any]) -> Started:
        _keys(m, cls.OP, _STARTED_KEYS)
        return cls(_str(m, cls.OP, "id"), _int(m, cls.OP, "pid"))


_STARTED_KEYS = _wire_keys(Started)


@dataclass(frozen=True, slots=True)
class Warmed:
    """The warm child `id` is set up and waits, as `pid`."""

    OP: ClassVar[str] = "warmed"
    id: str
    pid: int

    def to_wire(self) -> Wire:
        return {"op": "warmed", "id": self.id, "pid": self.pid}

    @classmethod
    def from_wire(cls, m: Mapping[str, Any]) -> Warmed:
        _keys(m, cls.OP, _WARMED_KEYS)
        return cls(_str(m, cls.OP, "id"), _int(m, cls.OP, "pid"))


_WARMED_KEYS = _wire_keys(Warmed)


@dataclass(frozen=True, slots=True)
class WarmLost:
    """The warm child `id` died waiting (it is no spawn's: never a Failed)."""

    OP: ClassVar[str] = "warm_lost"
    id: str

    def to_wire(self) -> Wire:
        return {"op": "warm_lost", "id": self.id}

    @classmethod
    def from_wire(cls, m: Mapping[str, Any]) -> WarmLost:
        _keys(m, cls.OP, _WARM_LOST_KEYS)
        return cls(_str(m, cls.OP, "id"))


_WARM_LOST_KEYS = _wire_keys(WarmLost)


@dataclass(frozen=True, slots=True)
class Failed:
    """Spawn `id` failed at set-up step `step` with `errno` (nothing ran)."""

    OP: ClassVar[str] = "failed"
    id: str
    step: str
    errno: int
    detail: str = ""

    def to_wire(self) -> Wire:
        return {
            "op": "failed",
            "id": self.id,
            "step": self.step,
            "errno": self.errno,
            "detail": self.detail,
        }

    @classmethod
    def from_wire(cls, m: Mapping[str, Any]) -> Failed:
        op = cls.OP
        _keys(m, op, _FAILED_KEYS)
        detail = m.get("detail", "")
        if type(detail) is not str:
            raise _missing(op, "detail", None)
        return cls(_str(m, op, "id"), _str(m, op, "step"), _int(m, op, "errno"), detail)


_FAILED_KEYS = _wire_keys(Failed)


@dataclass(frozen=True, slots=True)
class Exited:
    """The main process of spawn `id` was reaped with wait status `status`."""

    OP: ClassVar[str] = "exited"
    id: str
    pid: int
    status: int
    rusage: Rusage

    def to_wire(self) -> Wire:
        return {
            "op": "exited",
            "id": self.id,
            "pid": self.pid,
            "status": self.status,
            "rusage": self.rusage,
        }

    @classmethod
    def from_wire(cls, m: Mapping[str, Any]) -> Exited:
        op = cls.OP
        _keys(m, op, _EXITED_KEYS)
        usage = m.get("rusage")
        if not (
            (type(usage) is tuple or type(usage) is list)
            and len(usage) == 7
            and (type(usage[0]) is float or type(usage[0]) is int)
            and (type(usage[1]) is float or type(usage[1]) is int)
            and not [x for x in usage[2:] if type(x) is not int]
        ):
            raise _missing(op, "rusage", None)
        return cls(
            _str(m, op, "id"),
            _int(m, op, "pid"),
            _int(m, op, "status"),
            (usage[0], usage[1], usage[2], usage[3], usage[4], usage[5], usage[6]),
        )


_EXITED_KEYS = _wire_keys(Exited)


@dataclass(frozen=True, slots=True)
class OrderRefused:
    """The spawner could not act on a message (no spawn to fail): why."""

    OP: ClassVar[str] = "error"
    message: str

    def to_wire(self) -> Wire:
        return {"op": "error", "message": self.message}

    @classmethod
    def from_wire(cls, m: Mapping[str, Any]) -> OrderRefused:
        _keys(m, cls.OP, _REFUSED_KEYS)
        return cls(_str(m, cls.OP, "message"))


_REFUSED_KEYS = _wire_keys(OrderRefused)


@dataclass(frozen=True, slots=True)
class EnvOpened:
    """Environment `id`'s namespaces are made (a failure is a Failed of its id,
    at step "environment")."""

    OP: ClassVar[str] = "env_opened"
    id: str

    def to_wire(self) -> Wire:
        return {"op": "env_opened", "id": self.id}

    @classmethod
    def from_wire(cls, m: Mapping[str, Any]) -> EnvOpened:
        _keys(m, cls.OP, _ENV_OPENED_KEYS)
        return cls(_str(m, cls.OP, "id"))


_ENV_OPENED_KEYS = _wire_keys(EnvOpened)

FromSpawner = Hello | Started | Warmed | WarmLost | Failed | Exited | OrderRefused | EnvOpened

_FROM_SPAWNER: dict[Any, Any] = {
    cls.OP: cls.from_wire
    for cls in (Hello, Started, Warmed, WarmLost, Failed, Exited, OrderRefused, EnvOpened)
}


def from_spawner(m: Mapping[str, Any]) -> FromSpawner:
    """The spawner's report `m` as received by the front-end, checked."""
    decode = _FROM_SPAWNER.get(m.get("op"))
    if decode is None:
        raise MalformedMessage(f"unknown op {m.get('op')!r}")
    message: FromSpawner = decode(m)
    return message
