"""The one conversion between the wire (protobuf) and the channel's typed
messages, in the front-end only.

    request, payload = request_of(messages.SpawnCall, parsed)   # a call in
    reply = to_proto(answer)                                    # an answer out
    await abort(context, message)                               # a refusal out

The channel's structs mirror the wire messages field for field, so both
directions are generic: a request's fields are read by the message's
descriptor and validated by the struct; an answer's values build the
message named by its `proto`. A spawn's output is the hot path: its event is
written as wire bytes directly (`output_event`).
"""

from __future__ import annotations

import functools
import typing
from collections.abc import Mapping, Sequence
from typing import Any, Union

import grpc
import msgspec
from google.protobuf import descriptor_pool
from google.protobuf import message as protobuf_message
from google.protobuf.message_factory import GetMessageClass
from hostcap_proto.errors import WireError

# The wire's messages must be in the default pool before they are looked up.
from hostcap_proto.v1 import admin_pb2, fs_pb2, host_pb2, process_pb2  # noqa: F401

from hostcapd.bridge import messages

_CODES = {code.value[0]: code for code in grpc.StatusCode}
_STREAMS = {"STDOUT": 1, "STDERR": 2}
_CLASSES: dict[str, type[protobuf_message.Message]] = {}


def message_class(full_name: str) -> type[protobuf_message.Message]:
    """The generated class of a wire message, by its full name."""
    found = _CLASSES.get(full_name)
    if found is None:
        descriptor = descriptor_pool.Default().FindMessageTypeByName(full_name)
        found = _CLASSES[full_name] = GetMessageClass(descriptor)
    return found


#: How a request field is read: its value as is, a map's as a dict, a
#: repeated field's as a list, a nested message's as a dict of its fields.
_SCALAR, _MAP, _LIST, _NESTED = range(4)


class _Plan:
    """How a request message's fields are read, made once per message from
    its descriptor: by field name, how each is read; and whether its
    payload field (if any) has presence."""

    def __init__(self, descriptor: Any, payload_field: str | None) -> None:
        self.how: dict[str, int] = {}
        for field in descriptor.fields:
            if field.message_type is not None and field.message_type.GetOptions().map_entry:
                self.how[field.name] = _MAP
            elif field.message_type is not None and not field.is_repeated:
                self.how[field.name] = _NESTED
            elif field.is_repeated:
                self.how[field.name] = _LIST
            else:
                self.how[field.name] = _SCALAR
        payload = descriptor.fields_by_name.get(payload_field) if payload_field else None
        #: A payload field without presence is always given (b"" when empty).
        self.payload_always = payload is not None and not payload.has_presence


_PLANS: dict[tuple[str, str | None], _Plan] = {}


def _plan(descriptor: Any, payload_field: str | None) -> _Plan:
    key = (descriptor.full_name, payload_field)
    found = _PLANS.get(key)
    if found is None:
        found = _PLANS[key] = _Plan(descriptor, payload_field)
    return found


def request_of(
    model: type[messages.Request], message: protobuf_message.Message
) -> tuple[messages.Request, bytes]:
    """The struct of a parsed request message and its payload; raises
    msgspec.ValidationError (or ValueError) for a value the struct refuses.

    Only the fields the message has are read (`ListFields`: a field with
    presence if present, any other if not its default): a field left out
    takes the struct's default, which for every request is what its wire
    default converts to (tests/unit/frontend/test_convert.py checks each)."""
    payload_field = model.payload_field
    plan = _plan(message.DESCRIPTOR, payload_field)
    values: dict[str, Any] = {}
    payload = b""
    if plan.payload_always:
        values["payload"] = True
    for field, value in message.ListFields():
        name = field.name
        how = plan.how[name]
        if name == payload_field:
            payload, values["payload"] = value, True
        elif how == _SCALAR:
            values[name] = value
        elif how == _NESTED:
            values[name] = {f.name: v for f, v in value.ListFields()}
        elif how == _MAP:
            values[name] = dict(value)
        else:
            values[name] = list(value)
    return msgspec.convert(values, model), payload


def read_file_call(message: Any) -> messages.ReadFileCall:
    """What `request_of` makes of a ReadFileRequest, without its generic
    walk (a direct read's every call): the struct's fields are the wire's,
    of the same types (a str, a uint64, an optional uint64: nothing the
    struct's conversion would refuse), `max_bytes` None when absent.
    tests/unit/frontend/test_convert.py checks it against `request_of`."""
    return messages.ReadFileCall(
        path=message.path,
        offset=message.offset,
        max_bytes=message.max_bytes if message.HasField("max_bytes") else None,
    )


def _present(value: Any) -> Any:
    """`value` without None entries (unset optional fields), recursively."""
    if isinstance(value, dict):
        return {k: _present(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_present(v) for v in value]
    return value


def to_proto(answer: messages.Answer) -> protobuf_message.Message:
    """The wire message of a typed answer (ValueError or TypeError for a
    value protobuf refuses: a daemon bug, answered INTERNAL)."""
    # Every answer's struct omits its defaults, and none has a field that
    # may be None with another default: no None reaches protobuf
    # (tests/unit/frontend/test_convert.py checks both of every answer).
    fields = msgspec.to_builtins(answer, builtin_types=(bytes,))
    fields.pop("message", None)
    return message_class(answer.proto)(**fields)


#: A stream's kept output as pieces (head, marker, tail), by stream (1, 2).
Kept = Mapping[int, Sequence[bytes | bytearray]]


def unary_reply(
    answer: messages.Answer, kept: Kept | None = None
) -> bytes | protobuf_message.Message:
    """A unary answer as gRPC sends it: a `RunResult` as its wire bytes, its
    output `kept` here as it came (decision 0032: the root side passes it on
    and keeps none), any other as a message. Its output is most of it, and
    at the ceiling two streams of 256 MiB: it is joined once, into the
    bytes gRPC sends, not copied into a message and serialized again."""
    if isinstance(answer, (messages.RunResult, RunResultWire)):
        run: Any = answer  # either has a RunResult's fields
        pieces = {1: [run.stdout], 2: [run.stderr]} if kept is None else kept
        if any(any(p) for p in pieces.values()):
            return run_result(run, pieces)
        return started_apart(run)
    return to_proto(answer)


#: The most `Started` parts whose wire bytes are kept (a tenant has one per
#: command, profile and host state; past it the oldest goes).
MAX_PROTECTION_LISTS = 64
_PROTECTIONS: dict[tuple[Any, ...], bytes] = {}

#: The fields of a `Started` that are the same for every spawn of a command
#: in a profile (but its cwd, a string): a Run's `Reply` is decoded with
#: them as their MessagePack bytes (`FROM_ROOT`), which key the wire bytes
#: they make (`started_apart`); they are decoded to their structs, and so
#: validated, when those bytes are first seen. A Run's protections were
#: most of its Reply's decoding (bench/README.md, "the front-end's Run
#: path, seventh pass").
STABLE = ("executable", "limits", "protections", "env_names")


def _wire_fields(model: Any, raw: Sequence[str], types: Mapping[str, Any]) -> list[Any]:
    """`model`'s fields for `msgspec.defstruct`: those named in `raw` as
    their bytes (msgspec.Raw, empty when left out), those in `types` of
    that type, the others as they are."""
    fields: list[Any] = []
    for field in msgspec.structs.fields(model):
        kind = msgspec.Raw if field.name in raw else types.get(field.name, field.type)
        if field.name in raw:
            fields.append((field.name, kind, msgspec.Raw()))
        elif field.default is not msgspec.NODEFAULT:
            fields.append((field.name, kind, field.default))
        elif field.default_factory is not msgspec.NODEFAULT:
            fields.append((field.name, kind, msgspec.field(default_factory=field.default_factory)))
        else:
            fields.append((field.name, kind))
    return fields


StartedWire = msgspec.defstruct(
    "StartedWire",
    _wire_fields(messages.Started, STABLE, {}),
    frozen=True,
    forbid_unknown_fields=True,
    omit_defaults=True,
)
RunResultWire = msgspec.defstruct(
    "RunResultWire",
    _wire_fields(messages.RunResult, (), {"started": StartedWire | None}),
    bases=(messages.Answer,),
    tag=messages.RunResult.__struct_config__.tag,
    frozen=True,
)
_REPLIED = tuple(
    RunResultWire if a is messages.RunResult else a for a in typing.get_args(messages.Replied)
)
ReplyWire = msgspec.defstruct(
    "ReplyWire",
    _wire_fields(messages.Reply, (), {"answer": Union[_REPLIED]}),  # noqa: UP007
    bases=(messages.Message,),
    tag=messages.Reply.__struct_config__.tag,
    frozen=True,
)
#: What the root side sends a front-end, as the front-end decodes it: as
#: `messages.TO_FRONTEND`, but a `RunResult`'s `Started` as a `StartedWire`.
FROM_ROOT_TYPES = tuple(
    ReplyWire if t is messages.Reply else t for t in typing.get_args(messages.TO_FRONTEND.type)
)


class OwnedDecoder:
    """`FROM_ROOT`'s decoder, decoding a copy of each header: a Raw refers
    to the bytes it was decoded from, and the channel reads every datagram
    into the same buffer."""

    def __init__(self) -> None:
        self._decoder: msgspec.msgpack.Decoder[Any] = msgspec.msgpack.Decoder(
            Union[FROM_ROOT_TYPES]  # noqa: UP007
        )

    def decode(self, header: bytes | memoryview) -> Any:
        return self._decoder.decode(bytes(header))


#: A decoder of each stable field, and the names of the other fields
#: (but cwd) of a `Started`.
_STABLE_DECODERS = {
    f.name: msgspec.msgpack.Decoder(f.type)
    for f in msgspec.structs.fields(messages.Started)
    if f.name in STABLE
}
_VARYING = tuple(
    f.name for f in msgspec.structs.fields(messages.Started) if f.name not in (*STABLE, "cwd")
)


def _stable(started: Any) -> dict[str, Any]:
    """The stable fields of a `StartedWire`, each decoded as a `Started`'s
    is (raises msgspec.ValidationError for a value it refuses), left out
    when it was."""
    return {
        name: _STABLE_DECODERS[name].decode(raw)
        for name in STABLE
        if (raw := getattr(started, name))
    }


def started_apart(answer: Any) -> bytes:
    """The wire bytes of an answer with a `started` (a RunResult, a
    RunResultWire or a SpawnEvent): the answer without the fields of
    `started` that are the same for every spawn of a command in a profile
    (its executable, limits, protections, cwd and environment's names),
    serialized, then the same message holding only them, serialized once
    per value and kept (the protections alone were about half of the
    answer's conversion, these fields together two thirds). Protobuf parses
    concatenated messages as one: the two `started` merge, each field set in
    one of them, the repeated fields' elements in order."""
    started = answer.started
    if started is None:
        return to_proto(answer).SerializeToString()
    wire = isinstance(started, StartedWire)
    if wire:
        key: tuple[Any, ...] = (
            answer.proto,
            bytes(started.executable),
            bytes(started.limits),
            bytes(started.protections),
            started.cwd,
            bytes(started.env_names),
        )
    else:
        key = (
            answer.proto,
            started.executable,
            started.limits,
            tuple(started.protections),
            started.cwd,
            tuple(started.env_names),
        )
    tail = _PROTECTIONS.get(key)
    if tail is None:
        if wire:
            only = messages.Started(cwd=started.cwd, **_stable(started))
        else:
            only = messages.Started(
                executable=started.executable,
                limits=started.limits,
                protections=started.protections,
                cwd=started.cwd,
                env_names=started.env_names,
            )
        alone = message_class(answer.proto)(started=msgspec.to_builtins(only))
        tail = alone.SerializeToString()
        if len(_PROTECTIONS) >= MAX_PROTECTION_LISTS:
            del _PROTECTIONS[next(iter(_PROTECTIONS))]  # the oldest
        _PROTECTIONS[key] = tail
    if wire:
        rest_started = messages.Started(**{name: getattr(started, name) for name in _VARYING})
    else:
        rest_started = msgspec.structs.replace(
            started, executable=None, limits=None, protections=[], cwd="", env_names=[]
        )
    rest = msgspec.structs.replace(answer, started=rest_started)
    return to_proto(rest).SerializeToString() + tail


_READ_FILE_RESPONSE = "hostcap.v1.ReadFileResponse"


def read_file_response(data: bytes | memoryview, **fields: Any) -> bytes:
    """A direct read's answer (`hostcapd.frontend.reads`) as its wire bytes:
    its small fields serialized by protobuf from the worker's values (every
    one a plain value, none None), then its data as a tag, its length and
    the bytes themselves (a parser takes fields in any order), joined once:
    up to 1 MiB is not copied into a message and serialized again."""
    small = message_class(_READ_FILE_RESPONSE)(**fields).SerializeToString()
    if not data:
        return small
    return b"".join((small, _bytes_tag(_READ_FILE_RESPONSE, "data"), _varint(len(data)), data))


@functools.cache
def _bytes_tag(message: str, field: str) -> bytes:
    """The tag of a message's length-delimited field (wire type 2)."""
    return _varint(message_class(message).DESCRIPTOR.fields_by_name[field].number << 3 | 2)


def run_result(result: Any, kept: Kept) -> bytes:
    """The wire bytes of a `RunResult`: its small fields serialized by
    protobuf, then stdout (field 2) and stderr (field 3) from their pieces,
    each a tag, its length and the bytes themselves (a parser takes fields
    in any order), joined once."""
    small = started_apart(msgspec.structs.replace(result, stdout=b"", stderr=b""))
    parts: list[bytes | bytearray] = [small]
    for stream, tag in ((1, b"\x12"), (2, b"\x1a")):
        pieces = kept.get(stream, ())
        size = sum(len(p) for p in pieces)
        if size:
            parts += (tag, _varint(size), *pieces)
    return b"".join(parts)


def request_proto(request: messages.Request, payload: bytes) -> protobuf_message.Message:
    """The wire message a request struct stands for (tests compare it with
    what the client sent)."""
    fields = _present(msgspec.to_builtins(request, builtin_types=(bytes,)))
    fields.pop("method", None)
    if fields.pop("payload", False) and request.payload_field is not None:
        fields[request.payload_field] = payload
    return message_class(request.proto)(**fields)


def _varint(n: int) -> bytes:
    out = bytearray()
    while n > 0x7F:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def output_event(stream: int, data: bytes | memoryview) -> bytes:
    """The wire bytes of `SpawnEvent{output: Output{stream, data}}`, as
    SerializeToString would give them, built with one concatenation: no
    message is built and serialized per chunk (a stream's hot path).
    `stream` is STDOUT or STDERR and `data` is not empty (proto3 would omit
    either field otherwise)."""
    inner = b"\x08" + _varint(stream) + b"\x12" + _varint(len(data))
    return b"".join((b"\x12", _varint(len(inner) + len(data)), inner, data))


def streamed(item: messages.Streamed) -> bytes | protobuf_message.Message:
    """A streamed answer as gRPC sends it (an output event as its bytes)."""
    if isinstance(item, messages.SpawnEvent) and item.output is not None:
        return output_event(_STREAMS[item.output.stream], item.output.data)
    if isinstance(item, messages.SpawnEvent) and item.started is not None:
        return started_apart(item)
    return to_proto(item)


def serialize(message: protobuf_message.Message | bytes) -> bytes:
    return message if isinstance(message, bytes) else message.SerializeToString()


async def abort(context: Any, message: messages.Abort) -> None:
    """End the call with the Abort's status: a hostcap reason travels as a
    google.rpc.Status with its ErrorInfo; a bare code as itself."""
    if message.reason:
        await context.abort_with_status(WireError(message.reason, message.message).to_status())
    code = _CODES.get(message.code, grpc.StatusCode.UNKNOWN)
    if code is grpc.StatusCode.UNAVAILABLE and not message.message:
        await context.abort(code, "the daemon went away")
    await context.abort(code, message.message)
