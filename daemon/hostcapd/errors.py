"""The daemon's one typed refusal: a reason and a message.

Mechanism code (the spawn's preparation, the fs worker, the fs front-end)
raises `Refusal`; only the front-end turns it into a gRPC status
(`hostcapd.frontend.refusals.refuse`). The reason is the name of a
`hostcap.v1.ErrorReason` value, or one of the two transport conditions below,
which travel as gRPC's own status codes: `hostcap_proto.names.RefusalReason`,
which mypy holds every raise to.
This module imports nothing of gRPC or protobuf: the fs worker, which never
loads them, raises the same type.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from hostcap_proto.names import REASONS, RefusalReason

if TYPE_CHECKING:
    from hostcap_proto.errors import WireError

#: Not wire reasons: an unexpected failure (gRPC INTERNAL) and a mechanism
#: that is not there right now, such as the fs worker (gRPC UNAVAILABLE).
INTERNAL: Final = "INTERNAL"
UNAVAILABLE: Final = "UNAVAILABLE"
TRANSPORT_REASONS = frozenset({INTERNAL, UNAVAILABLE})
WIRE_REASONS: frozenset[str] = frozenset(REASONS)

#: Longest message a refusal carries: messages may quote request values, and
#: the status travels in a trailer with a size limit (and in the audit log).
MAX_MESSAGE = 512


def shorten(text: str, limit: int = MAX_MESSAGE) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


class Refusal(Exception):
    """A request refused, or an operation failed, with a typed reason."""

    def __init__(self, reason: RefusalReason, message: str) -> None:
        message = shorten(message)
        super().__init__(message)
        self.reason: RefusalReason = reason
        self.message = message

    def __repr__(self) -> str:
        return f"Refusal({self.reason!r}, {self.message!r})"

    @staticmethod
    def reason_of(name: object) -> RefusalReason:
        """The reason a less trusted process (the fs worker) names, believed
        only if it is one the wire has; anything else is an internal failure."""
        if name in WIRE_REASONS:
            return name  # type: ignore[return-value]
        return INTERNAL

    def wire(self) -> WireError:
        from hostcap_proto.errors import REASONS, WireError

        assert self.reason in REASONS, self.reason
        return WireError(self.reason, self.message)
