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
from hostcapd.bridge import messages
from hostcapd.frontend.convert import _present, message_class, request_of, request_proto, to_proto


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
