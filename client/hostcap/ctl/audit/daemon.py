"""Audit records over the daemon's admin socket: the QueryAudit/TailAudit
streams read as records."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

import grpc
from hostcap_proto.audit import AuditRecordError, parse_line
from hostcap_proto.v1 import admin_pb2, admin_pb2_grpc

from hostcap.ctl.common import wire_error


class DaemonStreamError(Exception):
    """The daemon refused or broke off an audit stream; the message says why."""


def daemon_records(lines: Iterable[admin_pb2.AuditLine]) -> Iterator[dict[str, Any]]:
    """The records of a TailAudit/QueryAudit stream. Raises DaemonStreamError
    when the daemon refuses or ends the stream with an error, or sends a line
    that is not a record."""
    try:
        for line in lines:
            try:
                yield parse_line(line.json.encode("utf-8"))
            except AuditRecordError as error:
                raise DaemonStreamError(f"the daemon sent an unreadable record: {error}") from None
    except grpc.RpcError as error:
        wire = wire_error(error)
        raise DaemonStreamError(f"{wire.reason}: {wire.message}") from None


def _stub(ch: grpc.Channel) -> admin_pb2_grpc.AdminServiceStub:
    return admin_pb2_grpc.AdminServiceStub(ch)  # type: ignore[no-untyped-call]
