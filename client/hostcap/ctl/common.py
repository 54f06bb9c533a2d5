"""Shared helpers of hostcapctl commands: channels, refusals, exit codes."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import grpc
from hostcap_proto.errors import WireError, from_rpc_error
from hostcap_proto.messages import MAX_REPLY_BYTES, MAX_REQUEST_BYTES
from hostcap_proto.v1 import common_pb2, process_pb2

#: Exit status of hostcapctl for a refusal or daemon error.
EXIT_REFUSED = 125
EXIT_NOT_FOUND = 127
EXIT_TIMEOUT = 124


def socket_of(args: argparse.Namespace, admin: bool = False) -> Path:
    path = args.admin_socket if admin else args.socket
    if path is None:
        flag = "--admin-socket" if admin else "--socket"
        raise SystemExit(
            f"hostcapctl: {flag} is required (or set HOSTCAP_{'ADMIN_' if admin else ''}SOCKET)"
        )
    return Path(path)


def channel(path: Path) -> grpc.Channel:
    return grpc.insecure_channel(
        f"unix:{path}",
        options=[
            ("grpc.max_receive_message_length", MAX_REPLY_BYTES),
            ("grpc.max_send_message_length", MAX_REQUEST_BYTES),
        ],
    )


def wire_error(error: grpc.RpcError) -> WireError:
    """The refusal a failed call carries, or a transport error as one."""
    found = from_rpc_error(error)
    if found is not None:
        return found
    code = error.code() if hasattr(error, "code") else None
    details = error.details() if hasattr(error, "details") else str(error)
    name = code.name if code is not None else "UNKNOWN"
    return WireError("UNAVAILABLE" if name == "UNAVAILABLE" else name, details or name)


def report_error(error: WireError, as_json: bool) -> None:
    if as_json:
        print(json.dumps({"error": {"reason": error.reason, "message": error.message}}))
    else:
        print(f"hostcapctl: {error.reason}: {error.message}", file=sys.stderr)


def refused(error: grpc.RpcError, as_json: bool) -> int:
    """Report a refused call on a spawn; its exit status: EXIT_NOT_FOUND
    for an id the daemon does not know (for this caller), else EXIT_REFUSED."""
    wire = wire_error(error)
    report_error(wire, as_json)
    return EXIT_NOT_FOUND if wire.reason == "NOT_FOUND" else EXIT_REFUSED


def print_json(value: Any) -> None:
    print(json.dumps(value, indent=None, sort_keys=False))


def exit_status(exited: process_pb2.Exited) -> int:
    """hostcapctl's exit status for how a spawn ended."""
    outcome = common_pb2.Outcome.Name(exited.outcome)
    if outcome == "TIMEOUT":
        return EXIT_TIMEOUT
    if outcome == "SPAWN_FAILED":
        return EXIT_REFUSED
    if exited.signal:
        return 128 + exited.signal
    return exited.exit_code
