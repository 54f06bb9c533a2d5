"""What a command leaves behind in its process group dies with it without a
pid namespace too (in one, the kernel kills the namespace when its init is
reaped): the spawner kills the command's group as it reaps it, before its
exit is reported (spawner/process.py); a cgroup, if it has one, is killed
by the root as well."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from support.daemon import Daemon
from support.process import Client, outcome

#: Starts a sleep in its own process group (a shell's background job) and
#: prints its pid: what it tries to leave running after it exits.
LEAVE_BEHIND = "sleep 60 >/dev/null 2>&1 </dev/null & echo $!"


def _sleeping(pid: int) -> bool:
    """Whether `pid` is still the sleep the command left (not a zombie)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):  # gone (between open and read: ESRCH)
        return False
    name, state = stat.split("(", 1)[1].rsplit(")", 1)[0], stat.rsplit(")", 1)[1].split()[0]
    return name == "sleep" and state != "Z"


@pytest.mark.parametrize(
    "sandbox",
    [{"pid_namespace": "off", "cgroup": "off"}, {"pid_namespace": "off"}],
    ids=["no-pid-namespace-no-cgroup", "no-pid-namespace"],
)
async def test_a_process_left_in_the_commands_group_is_dead_once_it_is_answered(
    start_daemon: Callable[..., Daemon], sandbox: dict[str, str]
) -> None:
    daemon = start_daemon(tenants={"dev": {"warm_spawns": 0, "sandbox": sandbox}})
    client = Client(daemon.socket)
    try:
        result = await client.run("sh", "-c", LEAVE_BEHIND)
        assert outcome(result) == "EXITED", result.stderr
        pid = int(result.stdout)  # the host's: no pid namespace
        # Killed before the answer; gone (reaped by the spawner) a moment after.
        deadline = time.monotonic() + 5
        while _sleeping(pid) and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        assert not _sleeping(pid), "the command's background job outlived it"
    finally:
        await client.close()
