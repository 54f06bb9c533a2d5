"""The messages of the daemon <-> spawner channel, one msgspec struct each.

    order = SpawnOrder(id=..., profile=key, by_fd=True, exe_path=b"/bin/true", ...)
    channel.send(sock, order.to_wire(), fds)       # the daemon
    message = to_spawner(received)                 # the spawner: typed, checked
    channel.send(sock, Started(id, pid).to_wire()) # and back: from_spawner(...)

The daemon sends `ToSpawner` messages (a profile registration, a spawn
order, a kill, ...), the spawner answers with `FromSpawner` reports. On the
wire each is the MessagePack array of its fields, its kind (`op`) first: the
bridge's codec (msgspec), with the fields declared once, here.

Decoding checks every field's type (strictly: a bool is no int, a str no
bytes) and that there is no field too many, and raises MalformedMessage, so
a receiver never acts on half a message: the spawner fails the spawn it
named (or answers "error"), the daemon treats its channel as lost. The
values themselves (argv without NUL bytes, fds that are open) are the C
set-up's to refuse. bench/spawner_codec.py measures it against the marshal
and hand-written checks it replaced.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import msgspec
from hostcap_proto.names import Rusage

from hostcapd.childsetup import LandlockRule, Mount, RLimit

#: A message as it travels: the bytes of its encoding.
Wire = bytes


class MalformedMessage(ValueError):
    """A message on the spawner channel that is not one of ours: an unknown
    op, a missing or extra field, or a field of the wrong type."""

    def __init__(self, message: str, spawn_id: str | None = None) -> None:
        super().__init__(message)
        #: The spawn a malformed order named, when its id could be read.
        self.spawn_id = spawn_id


class _Message(
    msgspec.Struct, frozen=True, forbid_unknown_fields=True, array_like=True, tag_field="op"
):
    @property
    def OP(self) -> str:
        return str(self.__struct_config__.tag)

    def to_wire(self) -> Wire:
        return _ENCODER.encode(self)

    @classmethod
    def from_wire(cls, wire: Wire) -> Any:
        """This kind of message from `wire`, checked; MalformedMessage else."""
        message = _decode(_DECODERS[cls], wire)
        return message


_ENCODER = msgspec.msgpack.Encoder()


# --- the daemon's messages to the spawner ---


class RegisterProfile(_Message, frozen=True, tag="profile"):
    """A tenant's prepared sandbox values, registered once (and again after a
    restart of the spawner), used by every spawn order naming `key`."""

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
    #: Rules a tty spawn's child adds too (its /dev/tty, /dev/ptmx and the
    #: devpts instance it mounted: each reaches only its own terminals).
    tty_landlock_rules: tuple[LandlockRule, ...] = ()

    @property
    def pooled_mounts(self) -> tuple[Mount, ...]:
        """The steps a pooled namespace is made with (as NamespacePlan's)."""
        return self.mounts[: len(self.mounts) - len(self.join_mounts)]


class DropProfile(_Message, frozen=True, tag="drop_profile"):
    key: str


class SpawnOrder(_Message, frozen=True, tag="spawn"):
    """Clone one child of profile `profile`. Its fds travel beside the message,
    in this order: the executable, stdin, stdout, stderr, the cancel eventfd,
    then the go eventfd (when `go`), the terminal's socket (when `tty`),
    the landlock ruleset (when `landlock`),
    the network namespace (when `netns`) and the cgroup.procs fds (the rest). With `warm`, the warm child made by
    the WarmOrder of the same id runs it: its fds are the executable, stdin,
    stdout, stderr, cancel and go only (it has its ruleset and cgroups), and
    `ids`, `loginuid` and `landlock` are the WarmOrder's."""

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
    #: A network namespace fd follows the landlock ruleset: the child joins
    #: it (the egress proxy's listener is in it already).
    netns: bool = False
    #: In the environment of this id (OpenEnv): its network, IPC and mount
    #: namespaces, not a fresh one's. Empty: fresh ones.
    env: str = ""
    #: (rows, cols): the command runs on a terminal of a devpts instance of
    #: its own, whose master the child sends on the socket that follows the
    #: go eventfd among the fds (a fresh child only: never a warm one).
    tty: tuple[int, int] | None = None


class WarmOrder(_Message, frozen=True, tag="warm"):
    """Make a warm child of profile `profile` ahead of need: set up to its
    filters (namespaces, mounts, cgroups, identity, landlock, seccomp), it
    waits for the SpawnOrder of the same id (`warm`), which it runs once.
    Its fds: the landlock ruleset (when `landlock`), then the cgroup.procs
    fds, then (when `netns`) the network namespace to join (a proxy-mode
    tenant's, the egress proxy's ends in it). `roots` are the paths (in its
    namespace) a cwd may be beneath."""

    id: str
    profile: str
    ids: tuple[int, int] | None
    loginuid: bytes | None
    landlock: bool
    roots: tuple[bytes, ...]
    #: Set before the identity, as a fresh child sets them (RLIMIT_NPROC:
    #: the uid switch checks it); a spawn's rlimits come with its request.
    rlimits: tuple[RLimit, ...] = ()
    netns: bool = False


class DropWarm(_Message, frozen=True, tag="drop_warm"):
    """Kill the warm child `id` if it still waits (no spawn will take it)."""

    id: str


class Kill(_Message, frozen=True, tag="kill"):
    """Signal the main process (and its group) of a spawn not yet reaped."""

    id: str
    pid: int
    sig: int


class Shutdown(_Message, frozen=True, tag="shutdown"):
    """Kill and reap every child, then exit."""


class OpenEnv(_Message, frozen=True, tag="open_env"):
    """Make the namespaces of environment `id` (network, IPC, and mount with
    profile `profile`'s new root) and hold them until CloseEnv; answered
    EnvOpened, or Failed of the id at step "environment". A spawn that names
    it joins them. With `netns`, the network namespace is the one whose fd
    comes beside the order (a proxy-mode tenant's: the egress proxy's
    listeners are in it), not a new one."""

    id: str
    profile: str
    netns: bool = False


class CloseEnv(_Message, frozen=True, tag="close_env"):
    """Drop environment `id`'s namespaces (its spawns have been killed)."""

    id: str


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


# --- the spawner's reports to the daemon ---


class Hello(_Message, frozen=True, tag="hello"):
    """The spawner is up (sent once, before anything else)."""

    pid: int


class Started(_Message, frozen=True, tag="started"):
    """The child of spawn `id` has exec'd as `pid`."""

    id: str
    pid: int


class Warmed(_Message, frozen=True, tag="warmed"):
    """The warm child `id` is set up and waits, as `pid`."""

    id: str
    pid: int


class WarmLost(_Message, frozen=True, tag="warm_lost"):
    """The warm child `id` died waiting (it is no spawn's: never a Failed)."""

    id: str


class Failed(_Message, frozen=True, tag="failed"):
    """Spawn `id` failed at set-up step `step` with `errno` (nothing ran)."""

    id: str
    step: str
    errno: int
    detail: str = ""


class Exited(_Message, frozen=True, tag="exited"):
    """The main process of spawn `id` was reaped with wait status `status`."""

    id: str
    pid: int
    status: int
    rusage: Rusage


class OrderRefused(_Message, frozen=True, tag="error"):
    """The spawner could not act on a message (no spawn to fail): why."""

    message: str


class EnvOpened(_Message, frozen=True, tag="env_opened"):
    """Environment `id`'s namespaces are made (a failure is a Failed of its
    id, at step "environment")."""

    id: str


FromSpawner = Hello | Started | Warmed | WarmLost | Failed | Exited | OrderRefused | EnvOpened

_TO_SPAWNER = (
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
_FROM_SPAWNER = (Hello, Started, Warmed, WarmLost, Failed, Exited, OrderRefused, EnvOpened)
_DECODERS: dict[type, msgspec.msgpack.Decoder[Any]] = {
    cls: msgspec.msgpack.Decoder(cls) for cls in (*_TO_SPAWNER, *_FROM_SPAWNER)
}
_TO_SPAWNER_DECODER = msgspec.msgpack.Decoder(ToSpawner)
_FROM_SPAWNER_DECODER = msgspec.msgpack.Decoder(FromSpawner)
#: The orders a malformed one of which fails the spawn it names (its id first).
_NAMING_A_SPAWN = frozenset({"spawn", "warm"})


def _decode(decoder: msgspec.msgpack.Decoder[Any], wire: Wire) -> Any:
    try:
        return decoder.decode(wire)
    except (msgspec.ValidationError, msgspec.DecodeError) as error:
        raise _malformed(str(error), wire) from None


_BY_OP = {str(cls.__struct_config__.tag): cls for cls in (*_TO_SPAWNER, *_FROM_SPAWNER)}
_POSITION = re.compile(r"`\$\[(\d+)\]")


def _malformed(problem: str, wire: Wire) -> MalformedMessage:
    """The error, naming the field at fault (an array position says little)
    and the spawn a malformed order names, when they can be read."""
    try:
        raw = msgspec.msgpack.decode(wire)
    except msgspec.DecodeError:
        return MalformedMessage(problem)
    if type(raw) is not list or not raw or type(raw[0]) is not str:
        return MalformedMessage(problem)
    cls = _BY_OP.get(raw[0])
    if cls is None:
        return MalformedMessage(f"unknown op {raw[0]!r}")
    names = cls.__struct_fields__
    position = _POSITION.search(problem)
    if position is not None and 0 < int(position.group(1)) <= len(names):
        problem = f"{raw[0]}: field {names[int(position.group(1)) - 1]!r}: {problem}"
    else:
        problem = f"{raw[0]}: {problem}"
    spawn_id = None
    if raw[0] in _NAMING_A_SPAWN and len(raw) > 1 and type(raw[1]) is str:
        spawn_id = raw[1]
    return MalformedMessage(problem, spawn_id)


def to_spawner(wire: Wire) -> ToSpawner:
    """The daemon's message `wire` as received by the spawner, checked."""
    message: ToSpawner = _decode(_TO_SPAWNER_DECODER, wire)
    return message


def from_spawner(wire: Wire) -> FromSpawner:
    """The spawner's report `wire` as received by the daemon, checked."""
    message: FromSpawner = _decode(_FROM_SPAWNER_DECODER, wire)
    return message
