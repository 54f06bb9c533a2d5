"""A cancel is final before it is reported (issue 13).

The client's ToolCancelledError comes only once the daemon has said the
command's tree is gone: a program cancelled in the middle leaves no late
side effect behind it.
"""

from __future__ import annotations

import asyncio
import os
import time
from signal import SIGCONT, SIGSTOP
from typing import Any

import hostcap
import pytest
from client_daemon import Daemon, make_ctx, start_daemon, stop_daemon
from hostcap import (
    StaticToolHost,
    ToolCall,
    ToolCancelledError,
    ToolDispatchError,
    ToolPolicy,
    grpc_host,
)

#: The daemon's kill grace under `serve --dev` is 0.5 s; generous margin on top.
CANCEL_RETURNS_WITHIN_S = 0.5 + 3.0


async def test_a_cancelled_program_never_writes_its_late_file(
    daemon: Daemon, host: hostcap.GrpcToolHost
) -> None:
    registry = hostcap.create_tool_registry(tools=hostcap.BUILTIN_TOOLS, host=host)
    late = daemon.workspace / "late.txt"
    program = "import time; time.sleep(1.3); open('late.txt','w').write('x')"
    signal = asyncio.Event()
    ctx = make_ctx(
        signal=signal,
        tool_policy=ToolPolicy(allowed_commands={"python3"}),
    )
    task = asyncio.create_task(
        registry.dispatch(
            ToolCall("it-late-1", "run_command", {"command": "python3", "args": ["-c", program]}),
            ctx,
        )
    )
    deadline = time.monotonic() + 30
    spawns: list = []  # type: ignore[type-arg]
    while not spawns:
        assert time.monotonic() < deadline and not task.done(), task
        spawns = [s for s in await host.process.live_spawns() if "python3" in s.argv[0]]
        await asyncio.sleep(0.02)
    await asyncio.sleep(max(0.0, 1.0 - spawns[0].age_seconds))
    cancelled_at = time.monotonic()
    signal.set()
    with pytest.raises(ToolCancelledError) as raised:
        await task
    took = time.monotonic() - cancelled_at
    assert "not confirmed" not in str(raised.value)
    assert took < CANCEL_RETURNS_WITHIN_S, took
    # The tree was gone when the cancel returned: nothing is live ...
    assert [s for s in await host.process.live_spawns() if "python3" in s.argv[0]] == []
    # ... and the program's late write never comes.
    await asyncio.sleep(1.0)
    assert not late.exists()
    records = daemon.records_for("it-late-1", "process.exit")
    assert [r["outcome"] for r in records] == ["CANCELLED"]


async def test_a_cancel_the_daemon_cannot_confirm_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    # The daemon is stopped (SIGSTOP) while the command runs: the cancel
    # still raises, but says the end of the tree was not confirmed.
    monkeypatch.setattr(grpc_host, "SETTLE_TIMEOUT_S", 1.0)
    own = start_daemon()
    try:
        async with hostcap.connect(own.socket) as host:
            registry = hostcap.create_tool_registry(tools=hostcap.BUILTIN_TOOLS, host=host)
            signal = asyncio.Event()
            task = asyncio.create_task(
                registry.dispatch(
                    ToolCall(
                        "it-unconfirmed-1", "run_command", {"command": "sleep", "args": ["30"]}
                    ),
                    make_ctx(signal=signal),
                )
            )
            deadline = time.monotonic() + 30
            while not await host.process.live_spawns():
                assert time.monotonic() < deadline and not task.done(), task
                await asyncio.sleep(0.05)
            os.kill(own.process.pid, SIGSTOP)
            try:
                signal.set()
                with pytest.raises(ToolCancelledError) as raised:
                    await asyncio.wait_for(task, 20)
            finally:
                os.kill(own.process.pid, SIGCONT)
            assert "not confirmed" in str(raised.value)
    finally:
        stop_daemon(own)


class _AbortAsItSettles:
    """The daemon's own process arm, with the abort set in the step its answer
    lands: the race issue 34 found (a host error and a cancel together)."""

    def __init__(self, arm: grpc_host.GrpcProcessArm, signal: asyncio.Event) -> None:
        self.arm = arm
        self.signal = signal

    async def spawn(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return await self.arm.spawn(*args, **kwargs)
        finally:
            self.signal.set()


@pytest.mark.parametrize(
    ("argv", "without_the_race"),
    [
        (["nonexistent-tool-xyz"], ToolDispatchError),  # the daemon refuses the executable
        (["sh", "-c", "exit 3"], None),  # the command runs to its end
    ],
)
async def test_an_abort_landing_with_the_daemons_answer_is_cancelled(
    host: hostcap.GrpcToolHost, argv: list[str], without_the_race: type[Exception] | None
) -> None:
    def registry_for(signal: asyncio.Event) -> hostcap.ToolRegistry:
        raced = StaticToolHost(process=_AbortAsItSettles(host.process, signal), fs=host.fs)  # type: ignore[arg-type]
        return hostcap.create_tool_registry(tools=hostcap.BUILTIN_TOOLS, host=raced)

    call = ToolCall("it-race-1", "run_command", {"command": argv[0], "args": argv[1:]})
    # The control: without the race the same call fails (or runs) as it always did.
    if without_the_race is not None:
        with pytest.raises(without_the_race) as plain:
            await hostcap.create_tool_registry(tools=hostcap.BUILTIN_TOOLS, host=host).dispatch(
                call, make_ctx()
            )
        assert plain.value.code != "cancelled"  # type: ignore[attr-defined]
    signal = asyncio.Event()
    with pytest.raises(ToolCancelledError) as raised:
        await registry_for(signal).dispatch(call, make_ctx(signal=signal))
    assert raised.value.code == "cancelled"
    # The host call had settled: nothing of it is live.
    assert [s for s in await host.process.live_spawns() if s.argv[0] == argv[0]] == []
