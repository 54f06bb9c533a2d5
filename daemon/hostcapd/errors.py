"""The daemon's one typed refusal: a reason and a message.

Mechanism code (the spawn's preparation, the fs worker) and the services
raise `Refusal`; the channel carries it to the front-end as an `Abort` (its
status code, reason and message), and only the front-end turns that into a
gRPC status. The reason is the name of a `hostcap.v1.ErrorReason` value
(`hostcap_proto.names.ReasonName`), or one of the transport conditions below,
which travel as gRPC's own status codes without a reason:
`hostcap_proto.names.RefusalReason`, which mypy holds every raise to. This
module imports nothing of gRPC or protobuf: the fs worker and the daemon's
root side never load them.
"""

from __future__ import annotations

from typing import Final

from hostcap_proto.names import REASONS, RefusalReason
from hostcap_proto.reasons import CODES, STATUS_CODE_NAME

#: Not wire reasons (`hostcap_proto.names.TransportReason`): an unexpected
#: failure (gRPC INTERNAL), a mechanism that is not there right now, such as
#: the fs worker (UNAVAILABLE), and the admin socket's waits and followers
#: (DEADLINE_EXCEEDED, RESOURCE_EXHAUSTED).
INTERNAL: Final = "INTERNAL"
UNAVAILABLE: Final = "UNAVAILABLE"
DEADLINE_EXCEEDED: Final = "DEADLINE_EXCEEDED"
RESOURCE_EXHAUSTED: Final = "RESOURCE_EXHAUSTED"
TRANSPORT_REASONS = frozenset({INTERNAL, UNAVAILABLE, DEADLINE_EXCEEDED, RESOURCE_EXHAUSTED})
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

    @property
    def on_the_wire(self) -> bool:
        """Whether the reason travels as a hostcap ErrorInfo (else it is a
        transport condition: a bare gRPC status code)."""
        return self.reason in WIRE_REASONS

    @property
    def code(self) -> int:
        """The gRPC status code number the refusal travels with; INTERNAL for
        a reason that is neither the wire's nor a transport condition."""
        if self.reason in WIRE_REASONS:
            return CODES[STATUS_CODE_NAME[self.reason]]  # type: ignore[index]
        return CODES[self.reason] if self.reason in TRANSPORT_REASONS else CODES[INTERNAL]
