"""hostcapctl fs against a served tenant socket: output shapes and exit codes."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import importlib.util
import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest
from fs_endpoint import FsEndpoint

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("hostcap.ctl.main") is None,
    reason="hostcapctl's main module is not there yet",
)


async def hostcapctl(
    endpoint: FsEndpoint, *args: str, stdin: bytes = b""
) -> tuple[int, bytes, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "hostcap.ctl.main",
        "--socket",
        str(endpoint.socket),
        "fs",
        *args,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(stdin), 60)
    assert proc.returncode is not None
    return proc.returncode, out, err.decode()


def as_json(out: bytes) -> Any:
    return json.loads(out)


async def test_write_from_stdin_then_read_back_as_json(endpoint: FsEndpoint) -> None:
    base = endpoint.scratch()
    code, out, _ = await hostcapctl(
        endpoint, "write", f"{base}/hello.txt", "--json", stdin=b"hello\n"
    )
    assert code == 0
    written = as_json(out)
    digest = hashlib.sha256(b"hello\n").hexdigest()
    assert written == {
        "path": str(endpoint.workspace / base / "hello.txt"),
        "size": 6,
        "sha256": digest,
        "previous_sha256": None,
        "created": True,
    }
    code, out, _ = await hostcapctl(endpoint, "read", f"{base}/hello.txt", "--json")
    assert code == 0
    assert as_json(out) == {
        "text": "hello\n",
        "size": 6,
        "truncated": False,
        "is_binary": False,
        "media_type": "text/plain",
        "sha256": digest,
    }


async def test_binary_content_round_trips_through_the_cli(
    endpoint: FsEndpoint, tmp_path: Path
) -> None:
    base = endpoint.scratch()
    blob = bytes(range(256)) * 4
    (tmp_path / "blob.bin").write_bytes(blob)
    code, _, _ = await hostcapctl(
        endpoint, "write", f"{base}/blob.bin", "--data-file", str(tmp_path / "blob.bin")
    )
    assert code == 0
    code, out, _ = await hostcapctl(endpoint, "read", f"{base}/blob.bin")
    assert code == 0 and out == blob
    code, out, _ = await hostcapctl(
        endpoint, "read", f"{base}/blob.bin", "--json", "--offset", "256", "--max-bytes", "16"
    )
    body = as_json(out)
    assert base64.b64decode(body["data_b64"]) == bytes(range(16)) and "text" not in body
    assert (body["is_binary"], body["truncated"], body["size"]) == (True, True, 1024)


async def test_ls_and_stat_print_their_json_shapes(endpoint: FsEndpoint) -> None:
    base = endpoint.scratch()
    await hostcapctl(endpoint, "write", f"{base}/d/f.txt", "--create-parents", stdin=b"12345")
    await endpoint.plant_symlink("d/f.txt", f"{base}/link")
    code, out, _ = await hostcapctl(endpoint, "ls", base, "--depth", "2", "--json")
    assert code == 0
    listing = as_json(out)
    assert listing["truncated"] is False
    assert [(e["name"], e["type"], e["target"]) for e in listing["entries"]] == [
        ("d", "directory", None),
        ("d/f.txt", "regular", None),
        ("link", "symlink", "d/f.txt"),
    ]
    assert set(listing["entries"][1]) == {"name", "type", "size", "mtime", "target"}
    code, out, _ = await hostcapctl(endpoint, "stat", f"{base}/d/f.txt", "--json")
    stat = as_json(out)
    assert code == 0 and set(stat) == {"type", "size", "mode", "mtime", "writable"}
    assert (stat["type"], stat["size"], stat["mode"], stat["writable"]) == (
        "regular",
        5,
        0o644,
        True,
    )
    code, out, _ = await hostcapctl(endpoint, "ls", base, "--max-entries", "1")
    assert code == 0 and out.decode().splitlines()[0].endswith(" d/")


async def test_refusals_exit_125_with_the_reason(endpoint: FsEndpoint) -> None:
    code, out, _ = await hostcapctl(endpoint, "read", "../../etc/passwd", "--json")
    assert code == 125
    error = as_json(out)["error"]
    assert error["reason"] == "PATH_ESCAPES_ROOT" and "passwd" not in error["message"]
    code, out, err = await hostcapctl(endpoint, "read", "/etc/shadow")
    assert (code, out) == (125, b"") and err.startswith("hostcapctl: PATH_ESCAPES_ROOT: ")
    base = endpoint.scratch()
    await hostcapctl(endpoint, "write", f"{base}/f", stdin=b"v1")
    code, out, _ = await hostcapctl(
        endpoint, "write", f"{base}/f", "--exclusive", "--json", stdin=b"v2"
    )
    assert (code, as_json(out)["error"]["reason"]) == (125, "CONFLICT")
    code, out, _ = await hostcapctl(
        endpoint,
        "write",
        f"{base}/f",
        "--expected-sha256",
        hashlib.sha256(b"other").hexdigest(),
        "--json",
        stdin=b"v2",
    )
    assert (code, as_json(out)["error"]["reason"]) == (125, "CONFLICT")
    assert (endpoint.workspace / base / "f").read_bytes() == b"v1"


async def test_a_socket_nobody_serves_is_a_daemon_error(
    endpoint: FsEndpoint, tmp_path: Path
) -> None:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "hostcap.ctl.main",
        "--socket",
        str(tmp_path / "none.sock"),
        "fs",
        "stat",
        ".",
        "--json",
        stdout=asyncio.subprocess.PIPE,
        env={**os.environ, "GRPC_VERBOSITY": "NONE"},
    )
    out, _ = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 125 and as_json(out)["error"]["reason"] == "UNAVAILABLE"
