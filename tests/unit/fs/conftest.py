"""Fixtures of the fs worker tests: temp roots and a real worker process
running as the tenant (see fs_worker_support)."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from fs_worker_support import (
    OUTSIDE_CONTENT,
    Roots,
    WorkerClient,
    settings_for,
    start_worker,
    tenant_identity,
)


@pytest.fixture
def roots() -> Iterator[Roots]:
    uid, gid = tenant_identity()
    base = Path(tempfile.mkdtemp(prefix="hostcap-fs-"))
    base.chmod(0o711)
    made = Roots(base, base / "ws", base / "ref", base / "other", base / "outside", uid, gid)
    for directory in (made.ws, made.ref, made.other, made.outside):
        directory.mkdir()
        directory.chmod(0o755)
    made.as_tenant(made.ws, made.other)
    (made.ref / "doc.md").write_text("# reference\n")
    (made.other / "theirs.txt").write_text("another tenant's file\n")
    (made.outside / "secret.txt").write_bytes(OUTSIDE_CONTENT)
    (made.outside / "secret.txt").chmod(0o644)
    yield made
    shutil.rmtree(base, ignore_errors=True)


@pytest.fixture
async def fs(roots: Roots) -> AsyncIterator[WorkerClient]:
    worker = await start_worker(settings_for(roots))
    yield WorkerClient(worker)
    await worker.close()


@pytest.fixture
async def fs_nofollow(roots: Roots) -> AsyncIterator[WorkerClient]:
    worker = await start_worker(settings_for(roots, follow_symlinks=False))
    yield WorkerClient(worker)
    await worker.close()
