"""No audit, no write: with the audit log on a full disk, WriteFile is refused
with AUDIT_UNAVAILABLE and nothing of the write appears (docs/decisions/0020)."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from fs_endpoint import in_process, make_state_dir, refusal
from hostcap_proto.errors import from_rpc_error
from hostcap_proto.v1 import fs_pb2, fs_pb2_grpc
from hostcapd.config import AuditSettings

pytestmark = pytest.mark.skipif(os.getuid() != 0, reason="mounts a small tmpfs for the audit log")


@contextlib.contextmanager
def small_tmpfs() -> Iterator[Path]:
    mount_point = make_state_dir()
    subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(mount_point)], check=True
    )
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", "--lazy", str(mount_point)], check=True)
        mount_point.rmdir()


def fill(directory: Path) -> None:
    fd = os.open(directory / "filler", os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        with contextlib.suppress(OSError):
            while True:
                os.write(fd, b"\0" * 4096)
    finally:
        os.close(fd)


def audited_paths(audit_file: Path) -> set[str]:
    records = (
        json.loads(line) for line in audit_file.read_text().splitlines() if line.endswith("}")
    )
    return {r["path"] for r in records if r.get("event") == "file.write"}


async def test_a_write_that_cannot_be_audited_does_not_happen() -> None:
    with small_tmpfs() as audit_dir:
        async with in_process(
            audit_settings=lambda s: AuditSettings(
                **{**s.model_dump(), "path": audit_dir / "audit.jsonl"}
            )
        ) as endpoint:
            async with endpoint.channel() as channel:
                stub = fs_pb2_grpc.FsServiceStub(channel)  # type: ignore[no-untyped-call]
                await stub.WriteFile(fs_pb2.WriteFileRequest(path="before.txt", data=b"audited"))
                fill(audit_dir)
                # the log's last page may still take a few records: write until it cannot
                refused_at = None
                for n in range(500):
                    try:
                        await stub.WriteFile(fs_pb2.WriteFileRequest(path=f"w{n}.txt", data=b"x"))
                    except grpc.aio.AioRpcError as error:
                        found = from_rpc_error(error)  # type: ignore[arg-type]
                        assert found is not None and found.reason == "AUDIT_UNAVAILABLE"
                        refused_at = n
                        break
                assert refused_at is not None, "the audit log never filled up"
                refused = await refusal(
                    stub.WriteFile(
                        fs_pb2.WriteFileRequest(
                            path="new/dir/after.txt", data=b"x", create_parents=True
                        )
                    )
                )
                assert refused.reason == "AUDIT_UNAVAILABLE"
                replace = await refusal(
                    stub.WriteFile(fs_pb2.WriteFileRequest(path="before.txt", data=b"changed"))
                )
                assert replace.reason == "AUDIT_UNAVAILABLE"
                # reads are not audited and keep working
                assert (
                    await stub.ReadFile(fs_pb2.ReadFileRequest(path="before.txt"))
                ).data == b"audited"
            on_disk = {str(endpoint.workspace / name) for name in os.listdir(endpoint.workspace)}
            assert on_disk == audited_paths(audit_dir / "audit.jsonl")
            assert str(endpoint.workspace / f"w{refused_at}.txt") not in on_disk
            assert (endpoint.workspace / "before.txt").read_bytes() == b"audited"
