"""Error reasons of the wire contract and their google.rpc.ErrorInfo encoding.

Both sides use this: the daemon to refuse a call with a reason, the client to
read the reason back. The reason is the name of a `hostcap.v1.ErrorReason`
value; the ErrorInfo domain is always "hostcap".
"""

from __future__ import annotations

from dataclasses import dataclass, field

import grpc
from google.rpc import error_details_pb2, status_pb2
from grpc_status import rpc_status

from hostcap_proto import names
from hostcap_proto.reasons import STATUS_CODE_NAME

__all__ = ["DOMAIN", "REASONS", "STATUS_CODE", "WireError", "from_rpc_error"]

DOMAIN = "hostcap"

#: Every reason the daemon may send, by name (`hostcap_proto.names.ReasonName`).
REASONS: frozenset[str] = frozenset(names.REASONS)

#: The gRPC status code each reason travels with (`hostcap_proto.reasons`).
STATUS_CODE: dict[str, grpc.StatusCode] = {
    reason: grpc.StatusCode[code] for reason, code in STATUS_CODE_NAME.items()
}


@dataclass(frozen=True)
class WireError:
    """A refusal as it travels: reason, human message, extra metadata."""

    reason: str
    message: str
    metadata: dict[str, str] = field(default_factory=dict)

    @property
    def code(self) -> grpc.StatusCode:
        return STATUS_CODE.get(self.reason, grpc.StatusCode.UNKNOWN)

    def to_status(self) -> grpc.Status:
        info = error_details_pb2.ErrorInfo(reason=self.reason, domain=DOMAIN)
        for key, value in self.metadata.items():
            info.metadata[key] = value
        status = status_pb2.Status(code=self.code.value[0], message=self.message)
        status.details.add().Pack(info)
        return rpc_status.to_status(status)


def from_rpc_error(error: grpc.RpcError) -> WireError | None:
    """The hostcap reason carried by a failed call, or None when it has none
    (transport failure, unimplemented method, ...)."""
    try:
        status = rpc_status.from_call(error)  # type: ignore[arg-type]
    except (ValueError, AttributeError):
        return None
    if status is None:
        return None
    for detail in status.details:
        if detail.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
            info = error_details_pb2.ErrorInfo()
            detail.Unpack(info)
            if info.domain == DOMAIN:
                return WireError(info.reason, status.message, dict(info.metadata))
    return None
