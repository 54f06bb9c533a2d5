"""The daemon's typed refusal: a reason of the wire contract and a message.

Mechanism code raises `Refusal`; only the front-end turns it into a gRPC
status (`hostcap_proto.errors.WireError`)."""

from __future__ import annotations

from hostcap_proto.errors import REASONS, WireError


class Refusal(Exception):
    def __init__(self, reason: str, message: str) -> None:
        assert reason in REASONS, reason
        super().__init__(message)
        self.reason = reason
        self.message = message

    def wire(self) -> WireError:
        return WireError(self.reason, self.message)
