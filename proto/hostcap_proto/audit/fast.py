"""The writer's check of an event's fields: a fast path compiled from the
models, falling back to the models themselves, whose answer it always gives."""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping, Sequence
from types import UnionType
from typing import Any, Literal, NoReturn, Union, get_args, get_origin

from pydantic import TypeAdapter

from hostcap_proto.audit.canonical import _plain
from hostcap_proto.audit.models import EVENT_FIELDS, _dump_by_model, _Fields, _model_of
from hostcap_proto.audit.schema import AuditRecordError

#
# Validating with pydantic and dumping back to JSON values is a large part of
# what a record costs the writer. A check compiled from the same models
# handles values of exactly the declared types: it copies them, adds the
# defaults the dump would add and leaves out None. Anything else (a value
# pydantic would coerce or refuse, an extra nested key, a constrained field)
# it leaves to the model, so the answer is always the model's.
#
# What it passes is also plain in the canonical encoder's sense
# (`canonical._plain`: exact builtin types, text keys, and floats that are 0
# or in [1e-4, 1e16)), so the writer seals it without walking it again
# (`sealed_line(..., plain=True)`). A float outside that range (or NaN, an
# infinity) is left to the model too: rare (a rusage below 0.1 ms).


class _ModelDecides(Exception):
    """The fast path cannot vouch for a value: the model must validate it."""


_MISSING: Any = object()
_Convert = Callable[[Any], Any]


def _decline() -> NoReturn:
    raise _ModelDecides


def _str_list(value: Any) -> Any:
    if type(value) is not list or not all(type(item) is str for item in value):
        _decline()
    return list(value)


def _str_dict(value: Any) -> Any:
    if type(value) is not dict or not all(
        type(key) is str and type(item) is str for key, item in value.items()
    ):
        _decline()
    return dict(value)


def _list_of(item: _Convert) -> _Convert:
    def convert(value: Any) -> Any:
        if type(value) is not list:
            _decline()
        return [item(element) for element in value]

    return convert


def _literal(values: frozenset[str]) -> _Convert:
    def convert(value: Any) -> Any:
        if type(value) is not str or value not in values:
            _decline()
        return value

    return convert


def _exact(kind: type) -> _Convert:
    def convert(value: Any) -> Any:
        if type(value) is not kind:
            _decline()
        return value

    return convert


def _plain_float(value: Any) -> Any:
    """A float the canonical fast encoder writes as repr() does."""
    if type(value) is not float or not (value == 0.0 or 1e-4 <= abs(value) < 1e16):
        _decline()
    return value


def _converter(annotation: Any) -> _Convert | None:
    """How to check one value of `annotation`, or None when the fast path does
    not handle the type (the model then always decides)."""
    origin, args = get_origin(annotation), get_args(annotation)
    if annotation is float:
        # Exactly: pydantic turns an int into a float.
        return _plain_float
    if annotation in (str, int, bool):
        # Exactly: pydantic turns a bool into an int.
        return _exact(annotation)
    if origin is Literal and all(type(a) is str for a in args):
        return _literal(frozenset(args))
    if origin is list and len(args) == 1:
        if args[0] is str:
            return _str_list
        item = _converter(args[0])
        return None if item is None else _list_of(item)
    if origin is dict and args == (str, str):
        return _str_dict
    if isinstance(annotation, type) and issubclass(annotation, _Fields):
        nested = _FastModel.compile(annotation)
        return None if nested is None else nested.convert
    return None


# One field: name; the exact type a value must have to be kept as it is (str,
# int, bool), or None to use the converter; the converter; whether None is
# left out (an optional field); the dumped default, or _MISSING when a missing
# value is left out; whether it is required.
_Slot = tuple[str, type | None, _Convert, bool, Any, bool]


class _FastModel:
    """One model's fields, compiled to plain type checks."""

    def __init__(self, slots: Sequence[_Slot]) -> None:
        self._slots = tuple(slots)
        self._names = frozenset(slot[0] for slot in slots)

    @classmethod
    def compile(cls, model: type[_Fields]) -> _FastModel | None:
        """The fast check of `model`, or None if it has anything beyond plain
        typed fields (constraints, aliases, validators, other config)."""
        decorators = model.__pydantic_decorators__
        if set(model.model_config) - {"extra", "frozen"} or any(
            (
                decorators.validators,
                decorators.field_validators,
                decorators.root_validators,
                decorators.model_validators,
                decorators.field_serializers,
                decorators.model_serializers,
                decorators.computed_fields,
            )
        ):
            return None
        slots: list[_Slot] = []
        for name, info in model.model_fields.items():
            if info.metadata or info.alias or info.validation_alias or info.serialization_alias:
                return None
            declared: Any = info.annotation
            annotation, optional = declared, False
            if get_origin(annotation) in (Union, UnionType) and all(
                get_origin(a) is Literal for a in get_args(annotation)
            ):  # a union of literals (`hostcap_proto.names.ProtectionName`) is one literal
                annotation = Literal[tuple(v for a in get_args(annotation) for v in get_args(a))]
            if get_origin(annotation) in (Union, UnionType):
                members = [a for a in get_args(annotation) if a is not type(None)]
                if len(members) != 1 or len(get_args(annotation)) != 2:
                    return None
                annotation, optional = members[0], True
            convert = _converter(annotation)
            if convert is None:
                return None
            default = _MISSING
            if not info.is_required():
                dumped = TypeAdapter(declared).dump_python(
                    info.get_default(call_default_factory=True), mode="json", exclude_none=True
                )
                if dumped is not None:
                    if not _plain(dumped):
                        return None  # the writer could not seal it unwalked
                    default = dumped
            exact = annotation if annotation in (str, int, bool) else None
            slots.append((name, exact, convert, optional, default, info.is_required()))
        return cls(slots)

    def convert(self, value: Any) -> dict[str, Any]:
        """`value` as the model would dump it; raises _ModelDecides otherwise."""
        if type(value) is not dict or not self._names.issuperset(value):
            _decline()  # extra keys: the model keeps or refuses them
        out: dict[str, Any] = {}
        get = value.get
        for name, exact, convert, optional, default, required in self._slots:
            item = get(name, _MISSING)
            if item is _MISSING:
                if required:
                    _decline()
                if default is not _MISSING:
                    # Defaults are {}, [], "" or 0: copy the mutable ones.
                    out[name] = copy.deepcopy(default) if type(default) in (dict, list) else default
            elif item is None and optional:
                continue
            elif exact is not None:
                # Inline for the commonest fields: one call less each.
                if type(item) is not exact:
                    _decline()
                out[name] = item
            else:
                out[name] = convert(item)
        return out


_FAST_MODELS: Mapping[str, _FastModel] = {
    event: fast
    for event, model in EVENT_FIELDS.items()
    if (fast := _FastModel.compile(model)) is not None
}


def validate_event_fields(event: str, fields: Mapping[str, Any]) -> dict[str, Any]:
    """The writer's check: `fields` validated against the event's model, unknown
    and header fields refused, returned as JSON values with unknown values
    (None) left out.

    Plain values of exactly the model's types (what the daemon passes) take
    a fast path; anything else is validated by the model itself. Either way
    the result, or the `AuditRecordError`, is the model's
    (`validate_event_fields_by_model`)."""
    return checked_event_fields(event, fields)[0]


def checked_event_fields(event: str, fields: Mapping[str, Any]) -> tuple[dict[str, Any], bool]:
    """`validate_event_fields`, and whether its result came by the fast path,
    and so is plain for `sealed_line(..., plain=True)` (else the model's
    dump, which `sealed_line` walks)."""
    model = _model_of(event, fields)
    fast = _FAST_MODELS.get(event)
    if fast is not None:
        try:
            return fast.convert(fields), True
        except _ModelDecides:
            pass
    return _dump_by_model(event, model, fields), False


def fast_event_fields(event: str, fields: Mapping[str, Any]) -> dict[str, Any] | None:
    """The fast path of `validate_event_fields` alone: its result, or None when
    it leaves the answer to the model (and for names the writer refuses)."""
    fast = _FAST_MODELS.get(event)
    if fast is None:
        return None
    try:
        _model_of(event, fields)
        return fast.convert(fields)
    except (AuditRecordError, _ModelDecides):
        return None
