"""The spawner channel's messages: each crosses the real channel unchanged,
and a message that is not one of ours (unknown op, a field missing, extra or
of the wrong type) is refused with MalformedMessage on receipt; the spawner
then fails the spawn it named, running nothing, and closes the fds it got."""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator
from typing import Any

import msgspec
import pytest
from hostcapd.spawner import channel, messages
from hostcapd.spawner.messages import MalformedMessage
from hostcapd.spawner.process import Spawner

MOUNT = (0, None, b"/", None, (1 << 14) | (1 << 18), None, 0)

PROFILE = messages.RegisterProfile(
    key="t#1",
    clone_flags=0x20000000 | 0x00020000,
    mounts=(MOUNT, (0, b"proc", b"/proc", b"proc", 14, None, 0)),
    join_mounts=((0, b"proc", b"/proc", b"proc", 14, None, 0),),
    hostname=b"hostcap",
    loopback_up=True,
    umask=0o022,
    landlock_rules=((b"/tmp", 8191),),
    seccomp=b"\x06\x00\x00\x00\x00\x00\xff\x7f",
    drop_caps=True,
    no_new_privs=True,
    oom_score_adj=b"500",
    pdeathsig=9,
)
ORDER = messages.SpawnOrder(
    id="s1",
    profile="t#1",
    by_fd=True,
    exe_path=b"/bin/true",
    argv=[b"/bin/true", b"x"],
    envp=[b"PATH=/usr/bin:/bin"],
    cwd_root=b"/srv",
    cwd=b".",
    rlimits=[(4, 0, 0), (7, 256, 256)],
    ids=(65534, 65534),
    loginuid=b"65534",
    landlock=True,
    go=True,
)
EVERY_MESSAGE: list[Any] = [
    PROFILE,
    messages.DropProfile("t#1"),
    ORDER,
    messages.Kill("s1", 1234, 9),
    messages.Shutdown(),
    messages.Hello(99),
    messages.Started("s1", 1234),
    messages.Failed("s1", "landlock", 1),
    messages.Failed("s1", "prepare", 0, "argv item contains a NUL byte"),
    messages.Exited("s1", 1234, 256, (0.001, 0.002, 1800, 1, 0, 0, 8)),
    messages.OrderRefused("unknown op 'x'"),
    msgspec.structs.replace(ORDER, warm=True),
    messages.WarmOrder(
        id="w1",
        profile="t#1",
        ids=(65534, 65534),
        loginuid=b"65534",
        landlock=True,
        roots=(b"/srv/a", b"/srv/b"),
        rlimits=((6, 64, 64),),
    ),
    messages.DropWarm("w1"),
    messages.Warmed("w1", 4321),
    messages.WarmLost("w1"),
]


@pytest.fixture
def pair() -> Iterator[tuple[socket.socket, socket.socket]]:
    a, b = channel.socketpair()
    yield a, b
    a.close()
    b.close()


def _across(pair: tuple[socket.socket, socket.socket], wire: messages.Wire) -> messages.Wire:
    channel.send(pair[0], wire)
    received = channel.receive(pair[1])
    assert received is not None
    return received[0]


@pytest.mark.parametrize("message", EVERY_MESSAGE, ids=lambda m: type(m).__name__)
def test_every_message_crosses_the_channel_unchanged(
    pair: tuple[socket.socket, socket.socket], message: Any
) -> None:
    wire = _across(pair, message.to_wire())
    decode = messages.from_spawner if message.OP in _REPORT_OPS else messages.to_spawner
    assert decode(wire) == message
    assert type(message).from_wire(wire) == message


_REPORT_OPS = {"hello", "started", "warmed", "warm_lost", "failed", "exited", "error"}


def _raw(value: Any) -> messages.Wire:
    """What a sender could put on the wire."""
    return msgspec.msgpack.encode(value)


def _fields(message: Any) -> list[Any]:
    """A message as the array it travels as: its op, then its fields."""
    return [message.OP, *(getattr(message, name) for name in message.__struct_fields__)]


def test_a_message_travels_as_its_op_and_its_fields() -> None:
    assert msgspec.msgpack.decode(ORDER.to_wire()) == msgspec.msgpack.decode(_raw(_fields(ORDER)))


def test_an_order_without_go_does_not_wait() -> None:
    wire = _raw(_fields(ORDER)[:-5])  # without go, warm, netns, env and tty
    assert messages.SpawnOrder.from_wire(wire).go is False


def _with(message: Any, **change: Any) -> messages.Wire:
    """`message` on the wire, with fields changed; _DROP ends the array
    before that field; a field it does not have comes as one too many."""
    raw = _fields(message)
    names = message.__struct_fields__
    for key, value in change.items():
        if key not in names:
            raw.append(value)
        elif value is _DROP:
            raw = raw[: names.index(key) + 1]
        else:
            raw[names.index(key) + 1] = value
    return _raw(raw)


_DROP = object()

MALFORMED_ORDERS = {
    "argv is a str": _with(ORDER, argv="/bin/true"),
    "an argv item is a str": _with(ORDER, argv=[b"/bin/true", "x"]),
    "envp missing": _with(ORDER, envp=_DROP),
    "exe_path is a str": _with(ORDER, exe_path="/bin/true"),
    "by_fd is an int": _with(ORDER, by_fd=1),
    "landlock missing": _with(ORDER, landlock=_DROP),
    "go is a str": _with(ORDER, go="yes"),
    "an rlimit of two fields": _with(ORDER, rlimits=[(7, 256)]),
    "an rlimit of a bool": _with(ORDER, rlimits=[(7, True, 256)]),
    "ids of one uid": _with(ORDER, ids=(0,)),
    "ids as a str": _with(ORDER, ids="0:0"),
    "cwd is a str": _with(ORDER, cwd="."),
    "loginuid is an int": _with(ORDER, loginuid=0),
    "profile is bytes": _with(ORDER, profile=b"t#1"),
    "a field too many": _with(ORDER, clone_flags=0),
}


@pytest.mark.parametrize("wire", MALFORMED_ORDERS.values(), ids=MALFORMED_ORDERS.keys())
def test_a_malformed_spawn_order_is_refused_naming_its_spawn(wire: messages.Wire) -> None:
    with pytest.raises(MalformedMessage) as raised:
        messages.to_spawner(wire)
    assert raised.value.spawn_id == "s1"


MALFORMED = {
    "no op": _raw({"id": "s1"}),
    "an unknown op": _raw(["exec", "s1"]),
    "an op that is not a str": _raw([1]),
    "not msgpack": b"\xc1",
    "a spawn order without an id": _with(ORDER, id=_DROP),
    "a spawn order with an int id": _with(ORDER, id=1),
    "a kill with a str pid": _with(messages.Kill("s1", 1, 9), pid="1"),
    "a kill with a bool signal": _with(messages.Kill("s1", 1, 9), sig=True),
    "a kill without its id": _with(messages.Kill("s1", 1, 9), id=_DROP),
    "a shutdown with a field": _raw(["shutdown", True]),
    "a drop without its key": _raw(["drop_profile"]),
    "a profile with a 5-field mount": _with(PROFILE, mounts=[MOUNT[:5]]),
    "a profile with a 6-field mount": _with(PROFILE, mounts=[MOUNT[:6]]),
    "a profile with a str mount target": _with(PROFILE, mounts=[(0, None, "/", None, 0, None, 0)]),
    "a profile with a str seccomp filter": _with(PROFILE, seccomp=""),
    "a profile without its hostname": _with(PROFILE, hostname=_DROP),
    "a profile with a landlock rule of a str path": _with(PROFILE, landlock_rules=[("/tmp", 1)]),
    "a profile with an int loopback_up": _with(PROFILE, loopback_up=1),
}


@pytest.mark.parametrize("wire", MALFORMED.values(), ids=MALFORMED.keys())
def test_a_malformed_order_is_refused(wire: messages.Wire) -> None:
    with pytest.raises(MalformedMessage) as raised:
        messages.to_spawner(wire)
    assert raised.value.spawn_id is None


MALFORMED_REPORTS = {
    "an unknown op": _raw(["spawned", "s1", 1]),
    "a hello without its pid": _raw(["hello"]),
    "a started with a str pid": _with(messages.Started("s1", 1), pid="1"),
    "a started for a bytes id": _with(messages.Started("s1", 1), id=b"s1"),
    "a failed without its step": _with(messages.Failed("s1", "uid", 1), step=_DROP),
    "a failed with an int detail": _with(messages.Failed("s1", "uid", 1), detail=1),
    "an exited with a short rusage": _with(
        messages.Exited("s1", 1, 0, (0.0, 0.0, 0, 0, 0, 0, 0)), rusage=(0.0, 0.0, 0)
    ),
    "an exited with a str in its rusage": _with(
        messages.Exited("s1", 1, 0, (0.0, 0.0, 0, 0, 0, 0, 0)), rusage=(0.0, 0.0, "0", 0, 0, 0, 0)
    ),
    "an exited without its status": _with(
        messages.Exited("s1", 1, 0, (0.0, 0.0, 0, 0, 0, 0, 0)), status=_DROP
    ),
    "an error with a field too many": _raw(["error", "x", "s1"]),
    "an order, not a report": ORDER.to_wire(),
}


@pytest.mark.parametrize("wire", MALFORMED_REPORTS.values(), ids=MALFORMED_REPORTS.keys())
def test_a_malformed_report_is_refused(wire: messages.Wire) -> None:
    with pytest.raises(MalformedMessage):
        messages.from_spawner(wire)


def test_a_report_is_not_taken_for_an_order() -> None:
    with pytest.raises(MalformedMessage):
        messages.to_spawner(messages.Started("s1", 1).to_wire())


def test_from_wire_of_one_class_refuses_another_op() -> None:
    with pytest.raises(MalformedMessage):
        messages.Kill.from_wire(messages.Started("s1", 1).to_wire())


def _spawner(ours: socket.socket, theirs: socket.socket) -> Spawner:
    spawner = Spawner(theirs, -1)
    spawner.add_profile(PROFILE)
    return spawner


def test_the_spawner_fails_a_malformed_order_runs_nothing_and_closes_its_fds(
    pair: tuple[socket.socket, socket.socket],
) -> None:
    ours, theirs = pair
    spawner = _spawner(ours, theirs)
    fds = [os.open("/dev/null", os.O_RDONLY | os.O_CLOEXEC) for _ in range(6)]
    spawner.handle(_with(ORDER, argv="/bin/true"), fds)
    received = channel.receive(ours)
    assert received is not None
    report = messages.from_spawner(received[0])
    assert isinstance(report, messages.Failed)
    assert (report.id, report.step, report.errno) == ("s1", "prepare", 0)
    assert "argv" in report.detail
    assert spawner.children == {} and spawner.running
    for fd in fds:
        with pytest.raises(OSError):
            os.fstat(fd)


def test_the_spawner_answers_an_unknown_order_with_an_error_and_keeps_running(
    pair: tuple[socket.socket, socket.socket],
) -> None:
    ours, theirs = pair
    spawner = _spawner(ours, theirs)
    spawner.handle(_raw(["exec", [b"/bin/sh"]]), [])
    received = channel.receive(ours)
    assert received is not None
    report = messages.from_spawner(received[0])
    assert report == messages.OrderRefused("unknown op 'exec'")
    assert spawner.running and spawner.children == {}
    # A malformed shutdown is no shutdown either.
    spawner.handle(_raw(["shutdown", True]), [])
    assert spawner.running
    spawner.handle(messages.Shutdown().to_wire(), [])
    assert not spawner.running
