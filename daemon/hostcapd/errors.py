"""The daemon's typed refusal: a reason of the wire contract and a message.

Mechanism code raises `Refusal`; only the front-end turns it into a gRPC
status (`hostcap_proto.errors.WireError`)."""

from __future__ import annotations

from hostcap_proto.errors import REASONS, WireError

#: Longest message a refusal carries: messages may quote request values, and
#: the status travels in a trailer with a size limit (and in the audit log).
MAX_MESSAGE = 512


def shorten(text: str, limit: int = MAX_MESSAGE) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


class Refusal(Exception):
    def __init__(self, reason: str, message: str) -> None:
        assert reason in REASONS, reason
        message = shorten(message)
        super().__init__(message)
        self.reason = reason
        self.message = message

    def wire(self) -> WireError:
        return WireError(self.reason, self.message)
