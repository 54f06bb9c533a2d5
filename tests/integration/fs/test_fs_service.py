"""FsService over gRPC on a tenant socket: the behaviour an engine relies on,
the wire errors it reads, and the audit records ops read."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import stat
from typing import Any

import grpc
import pytest
from fs_endpoint import FsEndpoint, failure, refusal
from hostcap_proto.v1 import fs_pb2


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def audit_records(endpoint: FsEndpoint, event: str) -> list[dict[str, Any]]:
    lines = endpoint.audit_path.read_text().splitlines()
    return [record for record in map(json.loads, lines) if record.get("event") == event]


async def test_write_then_read_round_trip(endpoint: FsEndpoint, stub: Any) -> None:
    base = endpoint.scratch()
    written = await stub.WriteFile(
        fs_pb2.WriteFileRequest(path=f"{base}/notes.md", data=b"# notes\n")
    )
    assert written.path == str(endpoint.workspace / base / "notes.md")
    assert (written.size, written.sha256, written.previous_sha256, written.created) == (
        8,
        sha(b"# notes\n"),
        "",
        True,
    )
    read = await stub.ReadFile(fs_pb2.ReadFileRequest(path=f"{base}/notes.md"))
    assert read.data == b"# notes\n" and read.sha256 == read.file_sha256 == sha(b"# notes\n")
    assert (read.size, read.truncated, read.is_binary, read.media_type) == (
        8,
        False,
        False,
        "text/markdown",
    )
    replaced = await stub.WriteFile(
        fs_pb2.WriteFileRequest(path=f"{base}/notes.md", data=b"# v2\n")
    )
    assert replaced.previous_sha256 == sha(b"# notes\n") and replaced.created is False
    st = (endpoint.workspace / base / "notes.md").stat()
    assert (st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)) == (endpoint.uid, endpoint.gid, 0o644)


async def test_refusals_carry_a_hostcap_reason_and_the_matching_status(
    endpoint: FsEndpoint, stub: Any
) -> None:
    base = endpoint.scratch()
    cases = [
        (
            stub.ReadFile(fs_pb2.ReadFileRequest(path="../../etc/passwd")),
            "PATH_ESCAPES_ROOT",
            grpc.StatusCode.PERMISSION_DENIED,
        ),
        (
            stub.Stat(fs_pb2.StatRequest(path="/etc")),
            "PATH_ESCAPES_ROOT",
            grpc.StatusCode.PERMISSION_DENIED,
        ),
        (
            stub.ReadFile(fs_pb2.ReadFileRequest(path=f"{base}/missing")),
            "NOT_FOUND",
            grpc.StatusCode.NOT_FOUND,
        ),
        (
            stub.WriteFile(
                fs_pb2.WriteFileRequest(path=f"{base}/x", data=b"", expected_sha256=sha(b"y"))
            ),
            "CONFLICT",
            grpc.StatusCode.ABORTED,
        ),
        (
            stub.ReadFile(fs_pb2.ReadFileRequest(path=f"{base}/x", max_bytes=0)),
            "LIMIT_INVALID",
            grpc.StatusCode.INVALID_ARGUMENT,
        ),
        (
            stub.WriteFile(fs_pb2.WriteFileRequest(path=".git/config", data=b"")),
            "PROTECTED_PATH",
            grpc.StatusCode.PERMISSION_DENIED,
        ),
    ]
    for call, reason, code in cases:
        status, found = await failure(call)
        assert (found.reason, status) == (reason, code)
        assert "/etc" not in found.message and "passwd" not in found.message


async def test_read_ceiling_is_enforced_never_clamped(endpoint: FsEndpoint, stub: Any) -> None:
    base = endpoint.scratch()
    await stub.WriteFile(fs_pb2.WriteFileRequest(path=f"{base}/f", data=b"0123456789"))
    above = await refusal(
        stub.ReadFile(
            fs_pb2.ReadFileRequest(path=f"{base}/f", max_bytes=endpoint.max_read_bytes + 1)
        )
    )
    assert above.reason == "LIMIT_INVALID"
    zero = await refusal(stub.ReadFile(fs_pb2.ReadFileRequest(path=f"{base}/f", max_bytes=0)))
    assert zero.reason == "LIMIT_INVALID"
    part = await stub.ReadFile(fs_pb2.ReadFileRequest(path=f"{base}/f", offset=3, max_bytes=4))
    assert (part.data, part.size, part.offset, part.truncated) == (b"3456", 10, 3, True)
    assert part.sha256 == sha(b"3456") and part.file_sha256 == ""


async def test_a_write_above_the_ceiling_is_too_large_and_writes_nothing(
    endpoint: FsEndpoint, stub: Any
) -> None:
    base = endpoint.scratch()
    data = b"\0" * (endpoint.max_write_bytes + 1)
    assert (
        await refusal(stub.WriteFile(fs_pb2.WriteFileRequest(path=f"{base}/big", data=data)))
    ).reason == "TOO_LARGE"
    assert os.listdir(endpoint.workspace / base) == []


async def test_bad_arguments_are_invalid(endpoint: FsEndpoint, stub: Any) -> None:
    base = endpoint.scratch()
    for request in (
        fs_pb2.WriteFileRequest(path=f"{base}/a", data=b"x", expected_sha256="NOT-HEX"),
        fs_pb2.WriteFileRequest(path=f"{base}/a", data=b"x", labels={"k": "v" * 5000}),
        fs_pb2.WriteFileRequest(path="", data=b"x"),
        fs_pb2.WriteFileRequest(path=f"{base}/a\0b", data=b"x"),
    ):
        assert (await refusal(stub.WriteFile(request))).reason == "INVALID_ARGUMENT"
    assert os.listdir(endpoint.workspace / base) == []


async def test_listing_is_sorted_bounded_and_says_truncated(
    endpoint: FsEndpoint, stub: Any
) -> None:
    base = endpoint.scratch()
    for path in ("b.txt", "a/deep/x.txt", "a.txt", ".hidden"):
        await stub.WriteFile(
            fs_pb2.WriteFileRequest(path=f"{base}/{path}", data=b"x", create_parents=True)
        )
    listing = await stub.ListDirectory(fs_pb2.ListDirectoryRequest(path=base, depth=3))
    assert [e.name for e in listing.entries] == ["a", "a.txt", "a/deep", "a/deep/x.txt", "b.txt"]
    assert listing.truncated is False and listing.path == str(endpoint.workspace / base)
    kinds = {e.name: e.type for e in listing.entries}
    assert kinds["a"] == fs_pb2.DIRECTORY and kinds["b.txt"] == fs_pb2.REGULAR
    hidden = await stub.ListDirectory(fs_pb2.ListDirectoryRequest(path=base, include_hidden=True))
    assert [e.name for e in hidden.entries] == [".hidden", "a", "a.txt", "b.txt"]
    short = await stub.ListDirectory(fs_pb2.ListDirectoryRequest(path=base, max_entries=2))
    assert [e.name for e in short.entries] == ["a", "a.txt"] and short.truncated is True
    deep = await refusal(stub.ListDirectory(fs_pb2.ListDirectoryRequest(path=base, depth=1000)))
    assert deep.reason == "LIMIT_INVALID"


async def test_stat_reports_type_size_mode_and_writability(endpoint: FsEndpoint, stub: Any) -> None:
    base = endpoint.scratch()
    await stub.WriteFile(fs_pb2.WriteFileRequest(path=f"{base}/f.txt", data=b"12345"))
    st = await stub.Stat(fs_pb2.StatRequest(path=f"{base}/f.txt"))
    assert (st.type, st.size, st.mode, st.writable) == (fs_pb2.REGULAR, 5, 0o644, True)
    (endpoint.reference / "ref.txt").write_text("read-only\n")
    ref = await stub.Stat(fs_pb2.StatRequest(path=str(endpoint.reference / "ref.txt")))
    assert ref.writable is False
    directory = await stub.Stat(fs_pb2.StatRequest(path=base))
    assert directory.type == fs_pb2.DIRECTORY and directory.writable is True


async def test_each_write_is_audited_with_hashes_labels_and_never_the_content(
    endpoint: FsEndpoint, stub: Any
) -> None:
    base = endpoint.scratch()
    request_id = f"req-{base}"
    await stub.WriteFile(
        fs_pb2.WriteFileRequest(
            path=f"{base}/audited.txt",
            data=b"CONTENT-CANARY-1",
            labels={"session": "s1"},
            request_id=request_id,
        )
    )
    await stub.WriteFile(
        fs_pb2.WriteFileRequest(
            path=f"{base}/audited.txt", data=b"CONTENT-CANARY-2", request_id=request_id
        )
    )
    records = [
        r for r in audit_records(endpoint, "file.write") if r.get("request_id") == request_id
    ]
    assert [(r["size"], r.get("sha256_before"), r["sha256_after"]) for r in records] == [
        (16, None, sha(b"CONTENT-CANARY-1")),
        (16, sha(b"CONTENT-CANARY-1"), sha(b"CONTENT-CANARY-2")),
    ]
    assert records[0]["path"] == str(endpoint.workspace / base / "audited.txt")
    assert records[0]["labels"] == {"session": "s1"} and records[0]["tenant"] == "dev"
    assert "CONTENT-CANARY" not in endpoint.audit_path.read_text()


async def test_refused_writes_and_secret_reads_are_audited_as_denials(
    endpoint: FsEndpoint, stub: Any
) -> None:
    base = endpoint.scratch()
    request_id = f"deny-{base}"
    refused = await refusal(
        stub.WriteFile(
            fs_pb2.WriteFileRequest(path=".git/hooks/pre-commit", data=b"x", request_id=request_id)
        )
    )
    assert refused.reason == "PROTECTED_PATH"
    await refusal(stub.ReadFile(fs_pb2.ReadFileRequest(path=f"{base}/.env")))
    denials = audit_records(endpoint, "policy.deny")
    write_denial = [d for d in denials if d.get("request_id") == request_id]
    assert len(write_denial) == 1
    assert (write_denial[0]["method"], write_denial[0]["reason"]) == ("WriteFile", "PROTECTED_PATH")
    assert any(
        d["method"] == "ReadFile" and d["reason"] == "SECRET_PATH" and d["path"] == f"{base}/.env"
        for d in denials
    )


async def test_concurrent_writers_with_expected_sha256_let_exactly_one_win(
    endpoint: FsEndpoint, stub: Any
) -> None:
    base = endpoint.scratch()
    first = await stub.WriteFile(fs_pb2.WriteFileRequest(path=f"{base}/shared.txt", data=b"v0"))
    attempts = [
        stub.WriteFile(
            fs_pb2.WriteFileRequest(
                path=f"{base}/shared.txt", data=f"v{n}".encode(), expected_sha256=first.sha256
            )
        )
        for n in range(1, 9)
    ]
    results = await asyncio.gather(*attempts, return_exceptions=True)
    winners = [r for r in results if isinstance(r, fs_pb2.WriteFileResponse)]
    losers = [r for r in results if isinstance(r, grpc.aio.AioRpcError)]
    assert len(winners) == 1 and len(losers) == 7
    assert all(loser.code() == grpc.StatusCode.ABORTED for loser in losers)
    assert sha((endpoint.workspace / base / "shared.txt").read_bytes()) == winners[0].sha256


async def test_many_clients_at_once_all_complete(endpoint: FsEndpoint) -> None:
    base = endpoint.scratch()

    async def client(n: int) -> None:
        async with endpoint.channel() as channel:
            from hostcap_proto.v1 import fs_pb2_grpc

            stub = fs_pb2_grpc.FsServiceStub(channel)  # type: ignore[no-untyped-call]
            for i in range(5):
                data = os.urandom(1000 + n * 10 + i)
                path = f"{base}/c{n}-{i}.bin"
                await stub.WriteFile(fs_pb2.WriteFileRequest(path=path, data=data))
                assert (await stub.ReadFile(fs_pb2.ReadFileRequest(path=path))).sha256 == sha(data)
                await stub.Stat(fs_pb2.StatRequest(path=path))

    await asyncio.wait_for(asyncio.gather(*(client(n) for n in range(8))), 120)
    listing = await _list(endpoint, base)
    assert len(listing) == 40


async def _list(endpoint: FsEndpoint, path: str) -> list[str]:
    async with endpoint.channel() as channel:
        from hostcap_proto.v1 import fs_pb2_grpc

        stub = fs_pb2_grpc.FsServiceStub(channel)  # type: ignore[no-untyped-call]
        return [
            e.name
            for e in (await stub.ListDirectory(fs_pb2.ListDirectoryRequest(path=path))).entries
        ]


async def test_a_client_that_gives_up_mid_write_leaves_the_file_whole(
    endpoint: FsEndpoint, stub: Any
) -> None:
    base = endpoint.scratch()
    await stub.WriteFile(fs_pb2.WriteFileRequest(path=f"{base}/f.bin", data=b"original"))
    big = os.urandom(32 << 20)
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        await stub.WriteFile(fs_pb2.WriteFileRequest(path=f"{base}/f.bin", data=big), timeout=0.05)
    assert raised.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    # a Stat queues behind a write still running in the worker: after it the write is done
    assert (await stub.Stat(fs_pb2.StatRequest(path=f"{base}/f.bin"))).type == fs_pb2.REGULAR
    assert (endpoint.workspace / base / "f.bin").read_bytes() in (b"original", big)
    assert await _list(endpoint, base) == ["f.bin"]
