"""hostcapctl fs read / write / ls / stat: the tenant's FsService from a shell.

    hostcapctl --socket S fs read src/main.py [--offset N] [--max-bytes N] [--json]
    hostcapctl --socket S fs write notes.md [--data-file F] [--create-parents]
                                            [--exclusive] [--expected-sha256 H] [--json]
    hostcapctl --socket S fs ls . [--max-entries N] [--depth N] [--all] [--json]
    hostcapctl --socket S fs stat notes.md [--json]

Without --json, `read` writes the raw content to stdout and the others print
a readable line per item; with --json each prints one object (the shapes of
`read_json`, `list_json`, `stat_json`, `write_json`) or, on a refusal,
`{"error": {"reason", "message"}}`. Exit status 0 on success, 125 on a
refusal or daemon error. `write` reads its content from stdin unless
--data-file is given.
"""

from __future__ import annotations

import argparse
import base64
import datetime as dt
import sys
from pathlib import Path
from typing import Any

import grpc
from hostcap_proto.v1 import fs_pb2, fs_pb2_grpc

from hostcap.ctl.common import (
    EXIT_REFUSED,
    channel,
    print_json,
    report_error,
    socket_of,
    wire_error,
)

_TYPE_NAMES = {
    fs_pb2.REGULAR: "regular",
    fs_pb2.DIRECTORY: "directory",
    fs_pb2.SYMLINK: "symlink",
    fs_pb2.OTHER: "other",
}


def register(sub: Any) -> None:
    """Add `fs` and its four commands to hostcapctl's subparsers."""
    fs = sub.add_parser("fs", help="read, write, list and stat files beneath the tenant's roots")
    commands = fs.add_subparsers(dest="fs_command", required=True, metavar="COMMAND")

    read = commands.add_parser("read", help="print a file's content")
    read.add_argument("path", help="relative to the primary root, or absolute beneath a root")
    read.add_argument("--offset", type=_non_negative, default=0, help="byte offset to start at")
    read.add_argument(
        "--max-bytes",
        type=_non_negative,
        help="at most this many bytes (default: the tenant's ceiling)",
    )
    read.add_argument("--json", action="store_true", help="print one JSON object")
    read.set_defaults(func=cmd_read)

    write = commands.add_parser(
        "write", help="replace or create a file atomically (content from stdin)"
    )
    write.add_argument("path")
    write.add_argument(
        "--data-file", type=Path, help="take the content from this file instead of stdin"
    )
    write.add_argument(
        "--create-parents", action="store_true", help="create missing parent directories"
    )
    write.add_argument("--exclusive", action="store_true", help="fail if the file exists")
    write.add_argument(
        "--expected-sha256",
        metavar="H",
        help="fail with CONFLICT unless the current content has this sha256",
    )
    write.add_argument("--json", action="store_true")
    write.set_defaults(func=cmd_write)

    ls = commands.add_parser("ls", help="list a directory")
    ls.add_argument("path")
    ls.add_argument("--max-entries", type=_non_negative, help="at most this many entries")
    ls.add_argument(
        "--depth", type=_non_negative, help="1 lists the directory itself, N descends N-1 levels"
    )
    ls.add_argument("--all", action="store_true", help="include names starting with '.'")
    ls.add_argument("--json", action="store_true")
    ls.set_defaults(func=cmd_ls)

    stat = commands.add_parser(
        "stat", help="type, size, mode, mtime, and whether the tenant may write it"
    )
    stat.add_argument("path")
    stat.add_argument("--json", action="store_true")
    stat.set_defaults(func=cmd_stat)


def _non_negative(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text} is negative")
    return value


def _stub(args: argparse.Namespace) -> Any:
    # the generated *_pb2_grpc modules carry no type information
    return fs_pb2_grpc.FsServiceStub(channel(socket_of(args)))  # type: ignore[no-untyped-call]


def _refused(error: grpc.RpcError, args: argparse.Namespace) -> int:
    report_error(wire_error(error), args.json)
    return EXIT_REFUSED


def _time(seconds: float) -> str:
    return (
        dt.datetime.fromtimestamp(seconds, dt.UTC)
        .isoformat(timespec="seconds")
        .replace("+00:00", "Z")
    )


# --- the JSON shapes ---------------------------------------------------------


def read_json(response: fs_pb2.ReadFileResponse) -> dict[str, Any]:
    """`text` for text content, `data_b64` otherwise, and the read's facts."""
    body: dict[str, Any] = {}
    if response.is_binary:
        body["data_b64"] = base64.b64encode(response.data).decode("ascii")
    else:
        # a read cut at an offset or max_bytes may split a character at its edges
        body["text"] = response.data.decode("utf-8", "replace")
    body.update(
        size=response.size,
        truncated=response.truncated,
        is_binary=response.is_binary,
        media_type=response.media_type,
        sha256=response.sha256,
    )
    return body


def write_json(response: fs_pb2.WriteFileResponse) -> dict[str, Any]:
    return {
        "path": response.path,
        "size": response.size,
        "sha256": response.sha256,
        "previous_sha256": response.previous_sha256 or None,
        "created": response.created,
    }


def list_json(response: fs_pb2.ListDirectoryResponse) -> dict[str, Any]:
    return {
        "entries": [
            {
                "name": entry.name,
                "type": _TYPE_NAMES.get(entry.type, "unspecified"),
                "size": entry.size,
                "mtime": entry.mtime,
                "target": entry.target or None,
            }
            for entry in response.entries
        ],
        "truncated": response.truncated,
    }


def stat_json(response: fs_pb2.StatResponse) -> dict[str, Any]:
    return {
        "type": _TYPE_NAMES.get(response.type, "unspecified"),
        "size": response.size,
        "mode": response.mode,
        "mtime": response.mtime,
        "writable": response.writable,
    }


# --- the commands ---------------------------------------------------------


def cmd_read(args: argparse.Namespace) -> int:
    request = fs_pb2.ReadFileRequest(path=args.path, offset=args.offset)
    if args.max_bytes is not None:
        request.max_bytes = args.max_bytes
    try:
        response = _stub(args).ReadFile(request)
    except grpc.RpcError as error:
        return _refused(error, args)
    if args.json:
        print_json(read_json(response))
        return 0
    sys.stdout.buffer.write(response.data)
    sys.stdout.flush()
    if response.truncated:
        end = response.offset + len(response.data)
        print(
            f"hostcapctl: truncated: bytes {response.offset}-{end} of {response.size}",
            file=sys.stderr,
        )
    return 0


def cmd_write(args: argparse.Namespace) -> int:
    if args.data_file is not None:
        try:
            data = args.data_file.read_bytes()
        except OSError as error:
            raise SystemExit(
                f"hostcapctl: cannot read {args.data_file}: {error.strerror}"
            ) from None
    else:
        data = sys.stdin.buffer.read()
    request = fs_pb2.WriteFileRequest(
        path=args.path, data=data, create_parents=args.create_parents, exclusive=args.exclusive
    )
    if args.expected_sha256 is not None:
        request.expected_sha256 = args.expected_sha256
    try:
        response = _stub(args).WriteFile(request)
    except grpc.RpcError as error:
        return _refused(error, args)
    if args.json:
        print_json(write_json(response))
    elif response.created:
        print(f"created {response.path} ({response.size} bytes, sha256 {response.sha256})")
    else:
        print(
            f"replaced {response.path} ({response.size} bytes, sha256 {response.sha256}, was {response.previous_sha256})"
        )
    return 0


def cmd_ls(args: argparse.Namespace) -> int:
    request = fs_pb2.ListDirectoryRequest(path=args.path, include_hidden=args.all)
    if args.max_entries is not None:
        request.max_entries = args.max_entries
    if args.depth is not None:
        request.depth = args.depth
    try:
        response = _stub(args).ListDirectory(request)
    except grpc.RpcError as error:
        return _refused(error, args)
    if args.json:
        print_json(list_json(response))
        return 0
    marks = {fs_pb2.DIRECTORY: "d", fs_pb2.SYMLINK: "l", fs_pb2.REGULAR: "-"}
    for entry in response.entries:
        name = entry.name + ("/" if entry.type == fs_pb2.DIRECTORY else "")
        if entry.target:
            name += f" -> {entry.target}"
        print(f"{marks.get(entry.type, '?')} {entry.size:>12} {_time(entry.mtime)} {name}")
    if response.truncated:
        print("hostcapctl: truncated (more entries than returned)", file=sys.stderr)
    return 0


def cmd_stat(args: argparse.Namespace) -> int:
    try:
        response = _stub(args).Stat(fs_pb2.StatRequest(path=args.path))
    except grpc.RpcError as error:
        return _refused(error, args)
    if args.json:
        print_json(stat_json(response))
        return 0
    print(f"path: {response.path}")
    print(f"type: {_TYPE_NAMES.get(response.type, 'unspecified')}")
    print(f"size: {response.size}")
    print(f"mode: {response.mode:04o}")
    print(f"mtime: {_time(response.mtime)}")
    print(f"writable: {'yes' if response.writable else 'no'}")
    return 0
