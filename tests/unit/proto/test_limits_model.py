"""The limits have one definition (hostcap_proto.limits): the daemon's config,
the audit record and the client inherit its fields, and the wire message
carries the same names with matching types."""

from __future__ import annotations

import dataclasses

import pytest
from google.protobuf.descriptor import FieldDescriptor
from hostcap.host import ProcessLimits
from hostcap_proto.audit import AppliedLimits
from hostcap_proto.limits import (
    DEV_CEILING,
    DEV_DEFAULT,
    LIMIT_NAMES,
    UNITS,
    ZERO_ALLOWED,
    LimitValues,
    set_values,
)
from hostcap_proto.v1 import common_pb2
from hostcapd.config import Limits

_WIRE_KIND = {
    FieldDescriptor.TYPE_DOUBLE: float,
    FieldDescriptor.TYPE_UINT64: int,
    FieldDescriptor.TYPE_UINT32: int,
}


def test_the_wire_message_has_the_same_fields_in_order_with_matching_types() -> None:
    wire = common_pb2.Limits.DESCRIPTOR.fields
    assert tuple(f.name for f in sorted(wire, key=lambda f: f.number)) == LIMIT_NAMES
    hints = {f.name: f.type for f in dataclasses.fields(LimitValues)}
    for f in wire:
        assert hints[f.name] == f"{_WIRE_KIND[f.type].__name__} | None", f.name


@pytest.mark.parametrize("model", [Limits, AppliedLimits])
def test_the_models_take_their_fields_from_the_one_definition(model: type) -> None:
    assert tuple(model.model_fields) == LIMIT_NAMES  # type: ignore[attr-defined]
    assert all(model.model_fields[n].default is None for n in LIMIT_NAMES)  # type: ignore[attr-defined]


def test_the_client_request_takes_its_fields_from_the_one_definition() -> None:
    assert tuple(f.name for f in dataclasses.fields(ProcessLimits)) == LIMIT_NAMES
    with pytest.raises(dataclasses.FrozenInstanceError):
        ProcessLimits(pids=1).pids = 2  # type: ignore[misc]


def test_every_limit_has_a_unit_and_only_output_bytes_may_be_zero() -> None:
    assert set(UNITS) == set(LIMIT_NAMES)
    assert set(UNITS.values()) <= {"seconds", "bytes", "count"}
    assert frozenset({"output_bytes"}) == ZERO_ALLOWED
    assert Limits(output_bytes=0).output_bytes == 0
    with pytest.raises(ValueError, match="pids must be positive"):
        Limits(pids=0)


def test_the_dev_defaults_fit_under_the_dev_ceilings() -> None:
    ceiling = set_values(DEV_CEILING)
    assert set(ceiling) == set(LIMIT_NAMES)
    for name, value in set_values(DEV_DEFAULT).items():
        assert value <= ceiling[name]


def test_the_front_end_channel_takes_its_limits_from_the_one_definition() -> None:
    import msgspec
    from hostcapd.bridge import messages

    info = msgspec.inspect.type_info(messages.Limits)
    assert isinstance(info, msgspec.inspect.StructType)
    assert tuple(f.name for f in info.fields) == LIMIT_NAMES
    wire = {f.name: f for f in common_pb2.Limits.DESCRIPTOR.fields}
    for f in info.fields:
        assert f.default is None, f.name
        (kind,) = [t for t in f.type.types if not isinstance(t, msgspec.inspect.NoneType)]
        if wire[f.name].type == FieldDescriptor.TYPE_DOUBLE:
            assert isinstance(kind, msgspec.inspect.FloatType), f.name
        else:
            assert isinstance(kind, msgspec.inspect.IntType) and kind.ge == 0, f.name
            if wire[f.name].type == FieldDescriptor.TYPE_UINT32:
                assert kind.le == (1 << 32) - 1, f.name
