"""The minimal init as pid 1 (issue 13): programs behave as they do outside.

Every spawn with a pid namespace runs a small init as its pid 1 and the
command as its pid 2: signals a program sends itself arrive, a timeout's
SIGTERM ends a program with the default disposition at once, orphans are
reaped while the command runs, and the outcome is what the command did.
"""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from hostcap_proto.v1 import common_pb2, process_pb2
from support.daemon import wait_gone
from support.process import Client, outcome, request


async def test_a_program_that_signals_itself_dies_of_it(client: Client) -> None:
    result = await client.run("sh", "-c", "kill -TERM $$; echo survived")
    assert (outcome(result), result.exited.signal) == ("SIGNALED", signal.SIGTERM)
    assert result.stdout == b""
    killed = await client.run("sh", "-c", "kill -9 $$; echo survived")
    assert (outcome(killed), killed.exited.signal) == ("SIGNALED", signal.SIGKILL)


async def test_abort_ends_signaled_6(client: Client) -> None:
    result = await client.run("python3", "-c", "import os; os.abort()")
    assert (outcome(result), result.exited.signal) == ("SIGNALED", signal.SIGABRT)


async def test_an_exit_code_is_exact(client: Client) -> None:
    result = await client.run("sh", "-c", "exit 7")
    assert (outcome(result), result.exited.exit_code, result.exited.signal) == ("EXITED", 7, 0)
    assert (await client.run("sh", "-c", "exit 255")).exited.exit_code == 255
    assert (await client.run("sh", "-c", "exit 0")).exited.exit_code == 0


async def test_the_command_is_pid_2_beneath_its_init(client: Client) -> None:
    result = await client.run("sh", "-c", "echo $$; cat /proc/1/comm; ls /proc | grep -c '^[0-9]'")
    me, init, count = result.stdout.decode().split()
    assert (me, init) == ("2", "hostcap-init")
    assert int(count) in (3, 4)  # the init, sh, ls, and grep if it started first


async def test_orphans_are_reaped_while_the_command_runs(client: Client) -> None:
    # 5,000 orphaned grandchildren, one after another, under a pids limit of
    # 256: without a reaper their zombies would hit the limit long before.
    script = (
        "i=0; while [ $i -lt 5000 ]; do ( /bin/true & ); i=$((i+1)); done; "
        "zombies=$(grep -l '^State:.*Z' /proc/[0-9]*/status 2>/dev/null | wc -l); "
        "echo done $zombies"
    )
    result = await client.run("sh", "-c", script, limits={"pids": 256, "wall_seconds": 110})
    assert outcome(result) == "EXITED", result
    words = result.stdout.split()
    assert words[0] == b"done" and int(words[1]) < 64


async def test_a_double_forked_daemon_dies_with_the_spawn(client: Client, marker: str) -> None:
    # Double-forked and in a session of its own, it is no child of the
    # command: it dies with the pid namespace when the command ends.
    script = "( setsid sh -c 'sleep 1000' < /dev/null > /dev/null 2>&1 & ); echo started"
    result = await client.run("sh", "-c", script, env={"TEST_MARKER": marker})
    assert outcome(result) == "EXITED" and result.stdout == b"started\n"
    assert wait_gone(marker, 5.0) == []


async def test_sigint_through_signal_is_a_keyboard_interrupt(client: Client) -> None:
    program = (
        "import sys, time\n"
        "try:\n"
        "    print('ready', flush=True)\n"
        "    time.sleep(60)\n"
        "except KeyboardInterrupt:\n"
        "    print('interrupted', flush=True)\n"
        "    sys.exit(3)\n"
    )
    stream = client.stub.Spawn(request(["python3", "-c", program]))
    spawn_id = ""
    out = b""
    async for event in stream:
        kind = event.WhichOneof("event")
        if kind == "started":
            spawn_id = event.started.spawn_id
        elif kind == "output":
            out += event.output.data
            if b"ready" in out and b"interrupted" not in out:
                await client.stub.Signal(
                    process_pb2.SignalRequest(spawn_id=spawn_id, signal=signal.SIGINT)
                )
        elif kind == "exited":
            assert (common_pb2.Outcome.Name(event.exited.outcome), event.exited.exit_code) == (
                "EXITED",
                3,
            )
    assert out == b"ready\ninterrupted\n"


#: A grace long enough that waiting it out, or not, cannot be confused.
GRACE = 3.0
#: A wall limit a python3 start surely fits in before its SIGTERM, so that
#: its handler (or its SIG_IGN) is in place: a bare start took up to 1.9 s on
#: this 2-core host at load 24.
PY_WALL = 4.0


@pytest.fixture
async def graceful(start_daemon: Any, state_dir: Path) -> AsyncIterator[Client]:
    """A daemon whose kill grace is GRACE seconds."""
    daemon = start_daemon(
        daemon={
            "state_dir": str(state_dir),
            "runtime_dir": str(state_dir / "run"),
            "kill_grace_seconds": GRACE,
            "cgroup_parent": f"hostcapd-test/{state_dir.parent.name}-{os.getpid()}",
        }
    )
    c = Client(daemon.socket)
    yield c
    await c.close()


async def test_a_timeout_ends_a_default_disposition_command_at_its_sigterm(
    graceful: Client,
) -> None:
    # The SIGTERM reaches the command (not a pid 1 any more) and ends it at
    # once: the end comes long before the grace would have run out.
    result = await graceful.run("sleep", "30", limits={"wall_seconds": 0.5})
    assert (outcome(result), result.exited.signal) == ("TIMEOUT", signal.SIGTERM)
    assert result.exited.duration_seconds < 0.5 + GRACE / 3


async def test_a_sigterm_handler_gets_its_grace(graceful: Client) -> None:
    program = (
        "import signal, sys, time\n"
        "def cleanup(*_):\n"
        "    time.sleep(0.5)\n"
        "    print('cleaning up', flush=True)\n"
        "    sys.exit(0)\n"
        "signal.signal(signal.SIGTERM, cleanup)\n"
        "print('ready', flush=True)\n"
        "time.sleep(60)\n"
    )
    result = await graceful.run("python3", "-c", program, limits={"wall_seconds": PY_WALL})
    assert outcome(result) == "TIMEOUT"
    assert result.stdout == b"ready\ncleaning up\n"
    assert result.exited.exit_code == 0 and result.exited.signal == 0


async def test_a_program_that_ignores_sigterm_is_killed_after_the_grace(graceful: Client) -> None:
    program = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(60)"
    result = await graceful.run("python3", "-c", program, limits={"wall_seconds": PY_WALL})
    assert (outcome(result), result.exited.signal) == ("TIMEOUT", signal.SIGKILL)
    assert result.exited.duration_seconds >= PY_WALL + GRACE - 0.1


async def test_concurrent_spawns_each_have_their_own_init(client: Client) -> None:
    results = await asyncio.gather(
        *(client.run("sh", "-c", f"echo $$ {i}; exit {i}") for i in range(8))
    )
    for i, result in enumerate(results):
        assert result.stdout == f"2 {i}\n".encode() and result.exited.exit_code == i


async def test_signal_sigkill_answers_once_the_tree_is_gone(client: Client, marker: str) -> None:
    stream = client.stub.Spawn(
        request(["sh", "-c", "sleep 1000 & echo ready; wait"], env={"TEST_MARKER": marker})
    )
    spawn_id = ""
    async for event in stream:
        kind = event.WhichOneof("event")
        if kind == "started":
            spawn_id = event.started.spawn_id
        elif kind == "output" and b"ready" in event.output.data:
            await client.stub.Signal(
                process_pb2.SignalRequest(spawn_id=spawn_id, signal=signal.SIGKILL)
            )
            listed = await client.stub.List(process_pb2.ListRequest())
            assert spawn_id not in [s.spawn_id for s in listed.spawns]
            assert wait_gone(marker, 0.0) == []
        elif kind == "exited":
            assert (common_pb2.Outcome.Name(event.exited.outcome), event.exited.signal) == (
                "SIGNALED",
                signal.SIGKILL,
            )


async def test_the_command_keeps_the_daemons_cpu_affinity(client: Client) -> None:
    # The init and the command's process are born on the spawner's CPU (a
    # pin for the clone only): the command must not inherit the pin.
    result = await client.run("python3", "-c", "import os; print(sorted(os.sched_getaffinity(0)))")
    assert result.stdout.decode().strip() == str(sorted(os.sched_getaffinity(0)))


async def test_the_init_holds_nothing_and_is_confined_as_the_command(client: Client) -> None:
    # Seen from the host while the command runs: the init (the spawn's main
    # pid) has one fd (its report pipe), the command's uid, no capabilities,
    # no_new_privs, the seccomp filter, and is not the command.
    stream = client.stub.Spawn(request(["sh", "-c", "echo ready; sleep 30"]))
    async for event in stream:
        kind = event.WhichOneof("event")
        if kind == "started":
            pid = event.started.pid
        elif kind == "output" and b"ready" in event.output.data:
            init = Path(f"/proc/{pid}")
            status = dict(line.split(":", 1) for line in (init / "status").read_text().splitlines())
            command_pids = (init / "task" / str(pid) / "children").read_text().split()
            command = Path(f"/proc/{command_pids[0]}")
            command_status = dict(
                line.split(":", 1) for line in (command / "status").read_text().splitlines()
            )
            assert os.listdir(init / "fd") == [os.listdir(init / "fd")[0]]
            assert os.readlink(init / "fd" / os.listdir(init / "fd")[0]).startswith("pipe:")
            for key in ("Uid", "Gid", "CapEff", "CapPrm", "CapBnd", "NoNewPrivs", "Seccomp"):
                assert status[key].split() == command_status[key].split(), key
            assert status["Uid"].split()[0] != "0" and status["CapEff"].strip() == "0" * 16
            assert status["NoNewPrivs"].strip() == "1" and status["Seccomp"].strip() == "2"
            assert status["Name"].strip() == "hostcap-init"
            assert status["NSpid"].split()[-1] == "1"
            assert command_status["NSpid"].split()[-1] == "2"
            await client.stub.Signal(process_pb2.SignalRequest(pid=pid, signal=signal.SIGKILL))
