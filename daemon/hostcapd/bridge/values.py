"""The channel's field types and the nested values the requests and the
answers share (`hostcapd.bridge.messages` re-exports them).

The integer types bound a field to its wire width (msgspec does not
coerce: a bool is not an int, a float not an int); `Limits` has the fields
of the one limits model (`hostcap_proto.limits`), each None when unset.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

import msgspec
from hostcap_proto.limits import BYTES, LIMIT_NAMES, SECONDS, UNITS
from hostcap_proto.names import ProtectionName

#: A uint64: msgspec's bounds are int64, so only the lower one is checked
#: here (its MessagePack decoder takes up to 2^64 - 1).
U64 = Annotated[int, msgspec.Meta(ge=0)]
U32 = Annotated[int, msgspec.Meta(ge=0, le=(1 << 32) - 1)]
I32 = Annotated[int, msgspec.Meta(ge=-(1 << 31), le=(1 << 31) - 1)]
I64 = Annotated[int, msgspec.Meta(ge=-(1 << 63), le=(1 << 63) - 1)]
CallId = Annotated[int, msgspec.Meta(gt=0, le=(1 << 63) - 1)]
Text = Annotated[str, msgspec.Meta(max_length=64)]


class Value(msgspec.Struct, frozen=True, forbid_unknown_fields=True, omit_defaults=True):
    """A nested value of a request (limits, a timestamp, a protection)."""


def _limit_type(name: str) -> Any:
    # The wire's widths: seconds are doubles, bytes uint64, counts uint32.
    unit = UNITS[name]
    return float | None if unit == SECONDS else (U64 | None if unit == BYTES else U32 | None)


if TYPE_CHECKING:
    Limits = Value
else:
    #: A spawn's limits: the fields of the one limits model
    #: (`hostcap_proto.limits`), each None when unset.
    Limits = msgspec.defstruct(
        "Limits",
        [(name, _limit_type(name), None) for name in LIMIT_NAMES],
        bases=(Value,),
        module=__name__,
        frozen=True,
    )


class Timestamp(Value, frozen=True):
    seconds: I64 = 0
    nanos: Annotated[int, msgspec.Meta(ge=0, le=999_999_999)] = 0


class Protection(Value, frozen=True):
    """One protection and whether it is in force (hostcap.v1.Protection): a
    spawn's or a confined helper's (`hostcap_proto.names.ProtectionName`)."""

    name: ProtectionName
    applied: bool
    reason: str
    required: bool


#: A pid or an id as SO_PEERCRED gives it (a pid_t, a uid_t or gid_t).
PeerId = Annotated[int, msgspec.Meta(ge=0, le=(1 << 32) - 1)]


class Caller(Value, frozen=True):
    """Who made a call: the process at the other end of the client's
    connection, as the front-end read it with SO_PEERCRED when it accepted
    that connection (`hostcapd.frontend.peers`). The front-end's word: as
    trustworthy as the front-end, and the pid names the process that
    connected, which may since have exited, or handed the connection to
    another (docs/decisions/0033-who-asked.md). The root side records it and
    decides nothing by it: the tenant is the channel's."""

    uid: PeerId
    gid: PeerId
    pid: PeerId

    def record(self) -> dict[str, int]:
        """The audit record's `caller` field."""
        return {"uid": self.uid, "gid": self.gid, "pid": self.pid}


class TerminalSize(Value, frozen=True):
    """A terminal's size in character cells (hostcap.v1.TerminalSize); the
    service checks the range (LIMIT_INVALID)."""

    rows: U32 = 0
    cols: U32 = 0
