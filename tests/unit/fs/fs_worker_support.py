"""Helpers of the fs worker tests: temp roots and a client of a real worker.

The roots live in a directory the tenant can traverse (pytest's own temp dirs
are 0700 root): `ws` read-write and owned by the tenant, `ref` read-only,
`other` another tenant's root, `outside` a directory beneath no root whose
file the tenant's uid *can* read, so only the jail stands between them.
"""

from __future__ import annotations

import os
import pwd
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest
from hostcapd.errors import Refusal
from hostcapd.fs.client import FsWorker
from hostcapd.fs.content import read_range
from hostcapd.fs.scope import RootSpec
from hostcapd.fs.worker import WorkerSettings

OUTSIDE_CONTENT = b"outside the roots\n"


@dataclass
class Roots:
    base: Path
    ws: Path
    ref: Path
    other: Path
    outside: Path
    uid: int
    gid: int

    def as_tenant(self, *paths: Path) -> None:
        for path in paths:
            os.lchown(path, self.uid, self.gid)


def tenant_identity() -> tuple[int, int]:
    if os.getuid() != 0:
        return os.getuid(), os.getgid()
    nobody = pwd.getpwnam("nobody")
    return nobody.pw_uid, nobody.pw_gid


def settings_for(roots: Roots, **overrides: Any) -> WorkerSettings:
    settings = WorkerSettings(
        tenant="test",
        roots=(RootSpec(str(roots.ws), False), RootSpec(str(roots.ref), True)),
        uid=roots.uid,
        gid=roots.gid,
        follow_symlinks=True,
        protected_paths=(".git/hooks/**", ".git/config"),
        secret_paths=("**/.env", "**/.env.*", "**/*.pem", "**/*.key", "**/.ssh/**", "**/id_*"),
        file_mode=0o644,
        dir_mode=0o755,
        umask=0o022,
        max_write_bytes=16 << 20,
        uid_drop="required" if os.getuid() == 0 else "best-effort",
        landlock="best-effort",
        parent_pid=os.getpid(),
    )
    return replace(settings, **overrides)


class WorkerClient:
    """The four operations over a real worker, the way the servicer drives it."""

    def __init__(self, worker: FsWorker) -> None:
        self.worker = worker

    async def call(self, header: dict[str, Any], data: bytes = b"") -> dict[str, Any]:
        async with self.worker.session() as session:
            reply = await session.exchange(header, data)
        reply.close()
        return reply.header

    async def read(
        self, path: str, offset: int = 0, max_bytes: int = 1 << 20
    ) -> tuple[dict[str, Any], bytes]:
        """The worker opens and checks; the content is read from the fd it
        passed, as the servicer does."""
        async with self.worker.session() as session:
            reply = await session.exchange({"op": "open_read", "path": path})
        assert reply.fd is not None
        try:
            result = read_range(reply.fd, offset, max_bytes, reply.header["name"])
        finally:
            reply.close()
        header = {key: value for key, value in result._asdict().items() if key != "data"}
        return {**header, "path": reply.header["path"]}, result.data

    async def write(
        self,
        path: str,
        data: bytes,
        *,
        create_parents: bool = False,
        exclusive: bool = False,
        expected_sha256: str | None = None,
        commit: bool = True,
    ) -> dict[str, Any]:
        async with self.worker.session() as session:
            prepared = await session.exchange(
                {
                    "op": "write_prepare",
                    "path": path,
                    "create_parents": create_parents,
                    "exclusive": exclusive,
                    "expected_sha256": expected_sha256,
                },
                data,
            )
            await session.exchange({"op": "write_commit" if commit else "write_abort"})
        return prepared.header

    async def list(
        self, path: str, max_entries: int = 1000, depth: int = 1, include_hidden: bool = False
    ) -> dict[str, Any]:
        return await self.call(
            {
                "op": "list",
                "path": path,
                "max_entries": max_entries,
                "depth": depth,
                "include_hidden": include_hidden,
            }
        )

    async def stat(self, path: str) -> dict[str, Any]:
        return await self.call({"op": "stat", "path": path})

    async def refusal(self, coroutine: Any) -> Refusal:
        """The refusal `coroutine` ends with (fails the test if it succeeds)."""
        with pytest.raises(Refusal) as refused:
            await coroutine
        return refused.value


async def start_worker(settings: WorkerSettings, op_timeout_s: float = 30.0) -> FsWorker:
    worker = FsWorker(settings, op_timeout_s=op_timeout_s)
    await worker.start()
    return worker
