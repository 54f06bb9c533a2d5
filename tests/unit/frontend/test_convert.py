"""The front-end's one conversion, on its fast paths: an answer goes to
protobuf straight from `msgspec.to_builtins` (no pass removing None values),
and a request is read by a plan of its message made once. Each is checked
against what the generic way gives."""

from __future__ import annotations

import typing
from typing import Any

import msgspec
import pytest
from hostcap_proto.v1 import fs_pb2, host_pb2, process_pb2
from hostcapd.bridge import channel, messages
from hostcapd.frontend import convert
from hostcapd.frontend.convert import (
    _present,
    message_class,
    request_of,
    request_proto,
    streamed,
    to_proto,
    unary_reply,
)


def _answer_types() -> list[type[msgspec.Struct]]:
    """Every struct an answer may hold, nested ones included."""
    seen: dict[type[msgspec.Struct], None] = {}

    def walk(info: Any) -> None:
        if isinstance(info, msgspec.inspect.StructType):
            if info.cls in seen:
                return
            seen[info.cls] = None
            for field in info.fields:
                walk(field.type)
        elif isinstance(info, msgspec.inspect.UnionType):
            for member in info.types:
                walk(member)
        elif isinstance(info, (msgspec.inspect.ListType, msgspec.inspect.DictType)):
            walk(getattr(info, "item_type", None) or info.value_type)  # type: ignore[union-attr]

    for answer in (*typing.get_args(messages.Replied), *typing.get_args(messages.Streamed)):
        walk(msgspec.inspect.type_info(answer))
    return list(seen)


def _nullable(info: Any) -> bool:
    return isinstance(info, msgspec.inspect.UnionType) and any(
        isinstance(t, msgspec.inspect.NoneType) for t in info.types
    )


@pytest.mark.parametrize("cls", _answer_types(), ids=lambda c: c.__name__)
def test_no_answer_field_can_hand_protobuf_a_none(cls: type[msgspec.Struct]) -> None:
    """`to_proto` relies on it: with omit_defaults, a field that may be None
    and whose default is None is left out when None; any other such field
    would reach protobuf as None."""
    assert cls.__struct_config__.omit_defaults, f"{cls.__name__} does not omit its defaults"
    info = msgspec.inspect.type_info(cls)
    assert isinstance(info, msgspec.inspect.StructType)
    for field in info.fields:
        if _nullable(field.type):
            assert not field.required and field.default is None, (
                f"{cls.__name__}.{field.name} may be None and its default is not None"
            )


def _generic(answer: messages.Answer) -> bytes:
    fields = _present(msgspec.to_builtins(answer, builtin_types=(bytes,)))
    fields.pop("message", None)
    return message_class(answer.proto)(**fields).SerializeToString()


ANSWERS: list[messages.Answer] = [
    messages.RunResult(
        started=messages.Started(
            spawn_id="s1",
            pid=7,
            limits=messages.Limits(wall_seconds=2.5, pids=None),
            protections=[
                messages.Protection(name="cgroup", applied=False, reason="why", required=False)
            ],
            env_names=["A"],
        ),
        stdout=b"out",
        exited=messages.Exited(outcome="EXITED", exit_code=0, rusage=messages.Rusage()),
    ),
    messages.RunResult(exited=messages.Exited(outcome="TIMEOUT", exit_code=None, signal=9)),
    messages.SpawnEvent(exited=messages.Exited(outcome="EXITED", exit_code=3)),
    messages.ReadFileResponse(path="a", data=b"x" * 10, size=10, media_type="text/plain"),
]


@pytest.mark.parametrize("answer", ANSWERS, ids=lambda a: type(a).__name__)
def test_an_answer_converts_as_the_generic_way_did(answer: messages.Answer) -> None:
    assert to_proto(answer).SerializeToString() == _generic(answer)


def test_request_plans_read_every_kind_of_field() -> None:
    wire = process_pb2.SpawnRequest(
        argv=["ls", "-l"], cwd="sub", env={"A": "1"}, stdin=b"in", request_id="r", labels={"k": "v"}
    )
    wire.limits.wall_seconds = 2.5
    wire.limits.pids = 0  # present, and zero: kept
    for _ in range(2):  # the second time from the plan made by the first
        model, payload = request_of(messages.RunCall, wire)
        assert payload == b"in"
        assert request_proto(model, payload) == wire
        assert model.limits is not None and model.limits.pids == 0  # type: ignore[attr-defined]
    bare = process_pb2.SpawnRequest(argv=["true"])
    model, payload = request_of(messages.SpawnCall, bare)
    assert request_proto(model, payload) == bare and model.limits is None  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("model", "wire"),
    [
        (messages.REQUESTS["tenant"]["FsService.ReadFile"], fs_pb2.ReadFileRequest(path="p")),
        (
            messages.REQUESTS["tenant"]["FsService.WriteFile"],
            fs_pb2.WriteFileRequest(path="p", data=b"d", labels={"a": "b"}),
        ),
        (
            messages.REQUESTS["tenant"]["HostService.Capabilities"],
            host_pb2.CapabilitiesRequest(),
        ),
    ],
)
def test_other_requests_round_trip(model: type[messages.Request], wire: Any) -> None:
    request, payload = request_of(model, wire)
    assert request_proto(request, payload) == wire


def _wire_default(field: Any) -> Any:
    if field.message_type is not None and field.message_type.GetOptions().map_entry:
        return {}
    return [] if field.is_repeated else field.default_value


def _requests() -> list[tuple[str, type[messages.Request]]]:
    return [
        (name, model) for models in messages.REQUESTS.values() for name, model in models.items()
    ]


@pytest.mark.parametrize(
    ("name", "model"), _requests(), ids=lambda v: v if isinstance(v, str) else ""
)
def test_a_field_left_at_its_wire_default_reads_as_the_structs_default(
    name: str, model: type[messages.Request]
) -> None:
    """`request_of` reads only the fields a message has (`ListFields`): a
    field at its wire default is left out, so the struct's default must be
    what that wire default converts to, and valid (else a request the
    struct refuses, or reads otherwise, would pass as its default)."""
    descriptor = message_class(model.proto).DESCRIPTOR
    nested = [
        f
        for f in descriptor.fields
        if f.message_type is not None
        and not f.is_repeated
        and not f.message_type.GetOptions().map_entry
    ]
    scopes: list[tuple[Any, Any]] = [(descriptor, lambda v: v)]
    scopes += [(f.message_type, lambda v, n=f.name: {n: v}) for f in nested]
    for scope, wrap in scopes:
        left_out = msgspec.convert(wrap({}), model)
        for field in scope.fields:
            if field.name == model.payload_field or (field.has_presence and not field.is_repeated):
                continue
            given = msgspec.convert(wrap({field.name: _wire_default(field)}), model)
            assert given == left_out, f"{name}: {field.full_name} at its wire default"


@pytest.mark.parametrize(
    ("name", "model"), _requests(), ids=lambda v: v if isinstance(v, str) else ""
)
def test_an_empty_request_reads_as_its_structs_defaults(
    name: str, model: type[messages.Request]
) -> None:
    request, payload = request_of(model, message_class(model.proto)())
    assert payload == b""
    # A payload field without presence is always given (its bytes may be empty).
    field = message_class(model.proto).DESCRIPTOR.fields_by_name.get(model.payload_field or "")
    assert getattr(request, "payload", False) is (field is not None and not field.has_presence)


PROTECTIONS = [
    messages.Protection(name="cgroup", applied=False, reason="why", required=False),
    messages.Protection(name="seccomp", applied=True, reason="", required=True),
]
STARTED = messages.Started(spawn_id="s1", pid=7, protections=PROTECTIONS, env_names=["A"])
EXITED = messages.Exited(outcome="EXITED", exit_code=0)


@pytest.mark.parametrize(
    ("answer", "kept"),
    [
        (messages.RunResult(started=STARTED, exited=EXITED), None),
        (messages.RunResult(started=STARTED, exited=EXITED), {1: [b"out", b"put"], 2: [b"e"]}),
        (messages.RunResult(started=STARTED, stdout=b"o", exited=EXITED), None),
        (messages.RunResult(exited=EXITED), None),
    ],
)
def test_a_run_results_bytes_parse_as_its_message(
    answer: messages.RunResult, kept: dict[int, list[bytes]] | None
) -> None:
    """The protections travel apart (their bytes kept per list), and the
    client's parser merges them back: twice, the second from the cache."""
    expected = to_proto(answer)
    if kept is not None:
        expected.stdout, expected.stderr = b"output", b"e"  # type: ignore[attr-defined]
    for _ in range(2):
        reply = unary_reply(answer, kept)
        assert isinstance(reply, bytes)
        assert process_pb2.RunResult.FromString(reply) == expected


def test_a_started_event_parses_as_its_message_and_its_list_is_kept() -> None:
    event = messages.SpawnEvent(started=STARTED)
    first = streamed(event)
    assert isinstance(first, bytes)
    assert process_pb2.SpawnEvent.FromString(first) == to_proto(event)
    other = msgspec.structs.replace(STARTED, spawn_id="s2", protections=list(PROTECTIONS[:1]))
    second = streamed(messages.SpawnEvent(started=other))
    assert isinstance(second, bytes)
    parsed = process_pb2.SpawnEvent.FromString(second)
    assert parsed.started.spawn_id == "s2" and len(parsed.started.protections) == 1
    assert process_pb2.SpawnEvent.FromString(streamed(event)) == to_proto(event)  # type: ignore[arg-type]


def test_the_kept_protection_lists_are_bounded() -> None:
    for n in range(convert.MAX_PROTECTION_LISTS * 2):
        listed = [messages.Protection(name="cgroup", applied=True, reason=str(n), required=True)]
        started = msgspec.structs.replace(STARTED, protections=listed)
        streamed(messages.SpawnEvent(started=started))
        assert len(convert._PROTECTIONS) <= convert.MAX_PROTECTION_LISTS


@pytest.mark.parametrize(
    "fields",
    [
        {"path": "a/b", "data": b"x" * 10, "size": 10, "offset": 0, "truncated": False},
        {"path": "p", "data": b"", "size": 0, "offset": 7, "truncated": True, "is_binary": True},
        {"path": "big", "data": b"y" * ((1 << 20) + 3), "size": 1 << 21, "offset": 0},
    ],
)
def test_a_direct_reads_answer_is_what_its_struct_converts_to(fields: dict[str, Any]) -> None:
    full: dict[str, Any] = {"media_type": "text/plain", "sha256": "ab", "file_sha256": "cd"}
    full["is_binary"] = False
    full.update(fields)
    expected = to_proto(messages.ReadFileResponse(**full))
    wire = convert.read_file_response(**full)
    assert fs_pb2.ReadFileResponse.FromString(wire) == expected
    if not full.get("data"):
        assert wire == expected.SerializeToString()


def test_a_starteds_fields_of_its_command_travel_apart_and_parse_back() -> None:
    """A `started`'s executable, limits, protections, cwd and names of its
    environment are serialized once per value: answers that differ in any
    of them, or only in the rest, each parse as their own message."""
    limits = messages.Limits(**dict.fromkeys(messages.Limits.__struct_fields__[:3], 1))
    true = messages.Executable(path="/usr/bin/true", device=1, inode=2, sha256="a" * 64)
    base = msgspec.structs.replace(
        STARTED, executable=true, limits=limits, cwd="/w", env_names=["A", "B"]
    )
    variants = [
        base,
        msgspec.structs.replace(base, spawn_id="s2", pid=8, request_id="r"),
        msgspec.structs.replace(base, executable=msgspec.structs.replace(true, inode=3)),
        msgspec.structs.replace(base, limits=None),
        msgspec.structs.replace(base, cwd="/w/sub"),
        msgspec.structs.replace(base, env_names=["B", "A"]),
        msgspec.structs.replace(base, protections=list(PROTECTIONS[:1])),
        msgspec.structs.replace(base, executable=None, cwd="", env_names=[], protections=[]),
    ]
    for _ in range(2):  # the second from the kept parts
        for started in variants:
            answer = messages.RunResult(started=started, exited=EXITED)
            reply = unary_reply(answer)
            assert isinstance(reply, bytes)
            assert process_pb2.RunResult.FromString(reply) == to_proto(answer)
            event = messages.SpawnEvent(started=started)
            assert process_pb2.SpawnEvent.FromString(streamed(event)) == to_proto(event)  # type: ignore[arg-type]


def _from_root(message: msgspec.Struct) -> Any:
    """`message` as a front-end decodes it from its channel."""
    buffers, _ = channel.encode(message)
    decoded, _ = channel.decode(memoryview(b"".join(buffers)), [], convert.OwnedDecoder())  # type: ignore[arg-type]
    return decoded


def test_a_run_result_decoded_with_its_stable_fields_as_bytes_converts_alike() -> None:
    """A Run's Reply as the front-end decodes it (its started's stable
    fields as their bytes, decoded when first seen) gives the same wire
    bytes as the structs themselves, from the kept parts or not."""
    limits = messages.Limits(**dict.fromkeys(messages.Limits.__struct_fields__[:3], 1))
    true = messages.Executable(path="/usr/bin/true", device=1, inode=2, sha256="a" * 64)
    base = msgspec.structs.replace(
        STARTED, executable=true, limits=limits, cwd="/w", env_names=["A", "B"], request_id="r"
    )
    variants = [
        base,
        msgspec.structs.replace(base, spawn_id="s9", pid=9, dry_run=True, stdin_open=True),
        msgspec.structs.replace(base, limits=None, protections=list(PROTECTIONS[:1])),
        msgspec.structs.replace(base, executable=None, cwd="", env_names=[], protections=[]),
    ]
    for kept in (None, {1: [b"out"], 2: []}):
        for _ in range(2):
            for started in variants:
                answer = messages.RunResult(started=started, exited=EXITED)
                reply = _from_root(messages.Reply(call=3, answer=answer))
                assert isinstance(reply.answer, convert.RunResultWire)
                assert unary_reply(reply.answer, kept) == unary_reply(answer, kept)
    # Every field of a Started is decoded, the stable ones as their bytes.
    assert convert.StartedWire.__struct_fields__ == messages.Started.__struct_fields__


def test_a_root_sides_bad_stable_value_is_refused_not_sent() -> None:
    """A protection's name the wire has no value for, sent by the root side
    in a Run's Reply, is refused when its bytes are first decoded (as the
    struct's decoder refused it) and never reaches the client's bytes."""
    bad = msgspec.msgpack.encode(
        messages.Reply(call=4, answer=messages.RunResult(started=STARTED, exited=EXITED))
    ).replace(b"seccomp", b"nothing")
    with pytest.raises(msgspec.ValidationError):
        messages.TO_FRONTEND.decode(bad)
    reply = convert.OwnedDecoder().decode(bad)
    with pytest.raises(msgspec.ValidationError):
        unary_reply(reply.answer)
    with pytest.raises(msgspec.ValidationError):  # and not from a kept part after
        unary_reply(reply.answer)


@pytest.mark.parametrize(
    "fields",
    [
        {},
        {"path": "src/main.py"},
        {"path": "/w/é/ü.txt", "offset": 7},
        {"path": "a", "max_bytes": 0},
        {"path": "a", "max_bytes": 4096, "offset": (1 << 64) - 1},
        {"path": "../x", "offset": 1 << 63, "max_bytes": (1 << 64) - 1},
    ],
)
def test_a_read_file_call_is_what_request_of_makes(fields: dict[str, Any]) -> None:
    """The direct read's own conversion (`read_file_call`) gives the struct
    the generic one gives, a max_bytes of 0 and one left out told apart."""
    wire = fs_pb2.ReadFileRequest.FromString(fs_pb2.ReadFileRequest(**fields).SerializeToString())
    assert convert.read_file_call(wire) == request_of(messages.ReadFileCall, wire)[0]
    assert convert.read_file_call(wire).max_bytes == fields.get("max_bytes")
