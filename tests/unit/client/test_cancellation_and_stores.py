"""Cancellation of the host call, the run-scoped output stores, and the
in-memory host's own floor."""

from __future__ import annotations

import asyncio
import os

import pytest
from client_support import MakeCtx
from hostcap import (
    BUILTIN_TOOLS,
    LocalOutputStore,
    ToolCall,
    ToolCancelledError,
    ToolRegistry,
    create_tool_registry,
)
from hostcap.errors import HostError
from hostcap.output_store import OutputStoreError
from hostcap.testing import MemoryFs, MemoryRoot, MemoryToolHost


async def _wait_until_running(host: MemoryToolHost) -> None:
    assert host.process is not None
    while not host.process.live:
        await asyncio.sleep(0)


async def test_the_signal_cancels_a_running_command_and_leaves_nothing_running(
    host: MemoryToolHost, registry: ToolRegistry, make_ctx: MakeCtx
) -> None:
    signal = asyncio.Event()
    task = asyncio.create_task(
        registry.dispatch(
            ToolCall("c1", "run_command", {"command": "sleep", "args": ["3600"]}),
            make_ctx(signal=signal),
        )
    )
    await _wait_until_running(host)
    signal.set()
    with pytest.raises(ToolCancelledError) as caught:
        await task
    assert caught.value.code == "cancelled"
    assert host.process is not None
    assert host.process.live == {}
    assert [spawn.outcome.value for spawn in host.process.spawns if spawn.outcome] == ["CANCELLED"]


async def test_cancelling_the_callers_task_propagates_and_still_cleans_up(
    host: MemoryToolHost, registry: ToolRegistry, make_ctx: MakeCtx
) -> None:
    task = asyncio.create_task(
        registry.dispatch(
            ToolCall("c1", "run_command", {"command": "sleep", "args": ["3600"]}), make_ctx()
        )
    )
    await _wait_until_running(host)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert host.process is not None and host.process.live == {}


async def test_an_abort_before_the_call_refuses_entry(
    host: MemoryToolHost, registry: ToolRegistry, make_ctx: MakeCtx
) -> None:
    signal = asyncio.Event()
    signal.set()
    with pytest.raises(ToolCancelledError):
        await registry.dispatch(
            ToolCall("c1", "run_command", {"command": "echo"}), make_ctx(signal=signal)
        )
    assert host.process is not None and host.process.spawns == []


async def test_a_host_call_cancelled_from_the_host_side_is_a_cancellation(
    make_ctx: MakeCtx,
) -> None:
    class CancellingProcess:
        async def spawn(self, *args: object) -> object:
            raise asyncio.CancelledError  # e.g. the RPC was cancelled under us

    from hostcap import StaticToolHost

    fake = StaticToolHost(process=CancellingProcess())  # type: ignore[arg-type]
    registry = create_tool_registry(tools=BUILTIN_TOOLS, host=fake)
    with pytest.raises(ToolCancelledError):
        await registry.dispatch(ToolCall("c1", "run_command", {"command": "echo"}), make_ctx())


async def test_a_wall_clock_limit_is_a_result_not_an_error(
    registry: ToolRegistry, make_ctx: MakeCtx
) -> None:
    outcome = await registry.dispatch(
        ToolCall("c1", "run_command", {"command": "sleep", "args": ["3600"], "timeout_s": 0.05}),
        make_ctx(),
    )
    assert "wall-clock limit" in outcome.tool_result.unwrap()


# ------------------------------------------------------------------ stores


async def test_local_store_is_private_opaque_and_swept() -> None:
    store = LocalOutputStore("run42")
    spilled = await store.spill("x" * 1000)
    media = await store.store_media(b"\x00\x01", "application/octet-stream")
    directory = store.directory
    assert spilled.handle.startswith("hostcap-spill:run42/")
    assert str(directory) not in spilled.handle  # the handle names no local path
    assert (directory.stat().st_mode & 0o777) == 0o700
    assert all((p.stat().st_mode & 0o777) == 0o600 for p in directory.iterdir())
    assert await store.open(spilled.handle) == b"x" * 1000
    assert await store.open(media.handle) == b"\x00\x01"
    await store.sweep()
    assert not directory.exists()
    with pytest.raises(OutputStoreError):
        await store.open(spilled.handle)
    with pytest.raises(OutputStoreError):
        await store.spill("after the run")


async def test_local_store_as_a_run_scope_sweeps_on_exit() -> None:
    async with LocalOutputStore() as store:
        await store.spill("data")
        directory = store.directory
    assert not os.path.exists(directory)


async def test_a_store_refuses_past_its_ceiling() -> None:
    store = LocalOutputStore(max_total_bytes=10)
    with pytest.raises(OutputStoreError):
        await store.spill("x" * 11)
    assert list(store.directory.iterdir()) == []
    await store.sweep()


# ------------------------------------------------------------------ memory floor


@pytest.mark.parametrize(
    ("path", "reason"),
    [
        ("../outside", "PATH_ESCAPES_ROOT"),
        ("a/../../outside", "PATH_ESCAPES_ROOT"),
        ("/etc/passwd", "PATH_ESCAPES_ROOT"),
        ("/workspace-evil/x", "PATH_ESCAPES_ROOT"),
        ("escape/passwd", "SYMLINK_REFUSED"),
        ("inside/notes.txt", None),
        ("/reference/doc.md", None),
    ],
)
async def test_memory_fs_resolution(path: str, reason: str | None) -> None:
    fs = MemoryFs((MemoryRoot("/workspace"), MemoryRoot("/reference", "read-only")))
    fs.put("notes.txt", "n")
    fs.put("/reference/doc.md", "d")
    fs.symlink("escape", "/etc")
    fs.symlink("inside", ".")
    if reason is None:
        assert (await fs.read_file(path)).data in (b"n", b"d")
    else:
        with pytest.raises(HostError) as caught:
            await fs.read_file(path)
        assert caught.value.reason == reason


async def test_memory_fs_write_is_conditional_on_the_expected_sha() -> None:
    fs = MemoryFs()
    labels = {"session": "s", "node_id": "n", "tool_call_id": "t"}
    first = await fs.write_file("a.txt", b"one", labels=labels, expected_sha256="")
    with pytest.raises(HostError) as caught:
        await fs.write_file("a.txt", b"two", labels=labels, expected_sha256="0" * 64)
    assert caught.value.reason == "CONFLICT"
    await fs.write_file("a.txt", b"two", labels=labels, expected_sha256=first.sha256)
    assert fs.content("a.txt") == b"two"
    with pytest.raises(HostError) as unlabelled:
        await fs.write_file("b.txt", b"x", labels={})
    assert unlabelled.value.reason == "INVALID_ARGUMENT"
