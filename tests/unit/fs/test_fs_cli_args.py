"""hostcapctl fs: its arguments on a parser of our own, and the JSON shapes
built from wire responses."""

from __future__ import annotations

import argparse
import base64

import pytest
from hostcap.ctl import fs as fs_cli
from hostcap_proto.v1 import fs_pb2


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="hostcapctl")
    parser.add_argument("--socket")
    fs_cli.register(parser.add_subparsers(dest="command", required=True))
    return parser.parse_args(["--socket", "/run/t.sock", *argv])


def test_each_command_parses_its_options_and_sets_its_handler() -> None:
    read = parse("fs", "read", "a.txt", "--offset", "3", "--max-bytes", "5", "--json")
    assert (read.path, read.offset, read.max_bytes, read.json, read.func) == (
        "a.txt",
        3,
        5,
        True,
        fs_cli.cmd_read,
    )
    write = parse("fs", "write", "b", "--create-parents", "--exclusive", "--expected-sha256", "")
    assert (write.create_parents, write.exclusive, write.expected_sha256, write.data_file) == (
        True,
        True,
        "",
        None,
    )
    assert write.func is fs_cli.cmd_write
    ls = parse("fs", "ls", ".", "--max-entries", "10", "--depth", "2", "--all")
    assert (ls.max_entries, ls.depth, ls.all, ls.func) == (10, 2, True, fs_cli.cmd_ls)
    assert parse("fs", "stat", "x").func is fs_cli.cmd_stat
    assert read.socket == "/run/t.sock"


@pytest.mark.parametrize(
    "argv", [("fs", "read", "a", "--offset", "-1"), ("fs", "ls", ".", "--depth", "two"), ("fs",)]
)
def test_bad_arguments_are_usage_errors(argv: tuple[str, ...]) -> None:
    with pytest.raises(SystemExit) as exited:
        parse(*argv)
    assert exited.value.code == 2


def test_read_json_is_text_for_text_and_base64_for_binary() -> None:
    text = fs_pb2.ReadFileResponse(
        data="héllo".encode(), size=6, media_type="text/plain", sha256="ab"
    )
    assert fs_cli.read_json(text) == {
        "text": "héllo",
        "size": 6,
        "truncated": False,
        "is_binary": False,
        "media_type": "text/plain",
        "sha256": "ab",
    }
    blob = fs_pb2.ReadFileResponse(
        data=b"\0\xff", size=9, truncated=True, is_binary=True, sha256="cd"
    )
    shaped = fs_cli.read_json(blob)
    assert base64.b64decode(shaped["data_b64"]) == b"\0\xff" and "text" not in shaped
    assert (shaped["truncated"], shaped["size"]) == (True, 9)


def test_list_and_stat_json_name_types_and_null_missing_targets() -> None:
    listing = fs_pb2.ListDirectoryResponse(
        entries=[
            fs_pb2.DirEntry(name="d", type=fs_pb2.DIRECTORY, size=4096, mtime=1.5),
            fs_pb2.DirEntry(name="l", type=fs_pb2.SYMLINK, size=3, mtime=2.0, target="d/x"),
        ],
        truncated=True,
    )
    assert fs_cli.list_json(listing) == {
        "entries": [
            {"name": "d", "type": "directory", "size": 4096, "mtime": 1.5, "target": None},
            {"name": "l", "type": "symlink", "size": 3, "mtime": 2.0, "target": "d/x"},
        ],
        "truncated": True,
    }
    stat = fs_pb2.StatResponse(type=fs_pb2.REGULAR, size=5, mode=0o644, mtime=3.0, writable=True)
    assert fs_cli.stat_json(stat) == {
        "type": "regular",
        "size": 5,
        "mode": 0o644,
        "mtime": 3.0,
        "writable": True,
    }
