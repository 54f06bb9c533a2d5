"""ProcessService end to end against a real daemon: the issue's done-when list."""

from __future__ import annotations

import asyncio
import os
import signal
import time

import grpc
import pytest
from hostcap_proto.v1 import common_pb2, process_pb2
from hostcapd.process.cgroup_pool import KEEP
from support.daemon import (
    ahead_fds,
    audit_records,
    open_fds,
    processes_with,
    wait_gone,
    zombies_under,
)
from support.process import Client, outcome, request


async def test_echo_round_trip(client: Client) -> None:
    result = await client.run("echo", "hello", "world")
    assert outcome(result) == "EXITED"
    assert result.exited.exit_code == 0
    assert result.stdout == b"hello world\n"
    assert result.started.executable.path in ("/usr/bin/echo", "/bin/echo")
    assert len(result.started.executable.sha256) == 64


async def test_exit_code_and_stderr(client: Client) -> None:
    result = await client.run("sh", "-c", "echo out; echo err >&2; exit 7")
    assert (outcome(result), result.exited.exit_code) == ("EXITED", 7)
    assert (result.stdout, result.stderr) == (b"out\n", b"err\n")


async def test_streaming_spawn_sends_started_output_exited(client: Client) -> None:
    events = [e async for e in client.stub.Spawn(request(["sh", "-c", "echo a; echo b >&2"]))]
    kinds = [e.WhichOneof("event") for e in events]
    assert kinds[0] == "started" and kinds[-1] == "exited"
    assert events[0].started.pid > 0
    out = b"".join(
        e.output.data
        for e in events
        if e.WhichOneof("event") == "output" and e.output.stream == common_pb2.STDOUT
    )
    err = b"".join(
        e.output.data
        for e in events
        if e.WhichOneof("event") == "output" and e.output.stream == common_pb2.STDERR
    )
    assert (out, err) == (b"a\n", b"b\n")


async def test_stdin_is_fed_and_closed(client: Client) -> None:
    result = await client.run("wc", "-c", stdin=b"x" * 300_000)
    assert result.stdout.strip() == b"300000"


async def test_daemon_environment_never_reaches_a_child(client: Client) -> None:
    # The daemon runs with HOSTCAP_CANARY set (see support/daemon.py).
    result = await client.run("sh", "-c", "env; cat /proc/1/environ 2>/dev/null; echo")
    assert b"daemon-secret-canary" not in result.stdout
    assert b"HOSTCAP_CANARY" not in result.stdout
    assert b"PATH=/usr/local/bin:/usr/bin:/bin" in result.stdout


async def test_declared_env_allowed_and_refused(client: Client) -> None:
    result = await client.run("sh", "-c", "echo $GREETING", env={"GREETING": "hi"})
    assert result.stdout == b"hi\n"
    assert await client.refusal("true", env={"LD_PRELOAD": "/tmp/x.so"}) == "ENV_NOT_ALLOWED"
    assert await client.refusal("true", env={"NOT_LISTED": "1"}) == "ENV_NOT_ALLOWED"


async def test_timeout_kills_the_tree_including_a_setsid_grandchild(
    client: Client, marker: str
) -> None:
    script = "setsid sh -c 'sleep 1000' & (sleep 1000) & sleep 1000"
    started = time.monotonic()
    result = await client.run(
        "sh", "-c", script, limits={"wall_seconds": 1}, env={"TEST_MARKER": marker}
    )
    assert outcome(result) == "TIMEOUT"
    assert "wall-clock limit of 1 s" in result.exited.message
    assert time.monotonic() - started < 10
    assert wait_gone(marker, 1.0) == []


async def test_main_exit_kills_what_it_left_behind(client: Client, marker: str) -> None:
    result = await client.run(
        "sh",
        "-c",
        "setsid sh -c 'sleep 1000' > /dev/null 2>&1 & echo started",
        env={"TEST_MARKER": marker},
    )
    assert outcome(result) == "EXITED"
    assert wait_gone(marker, 1.0) == []


async def test_cpu_limit(client: Client) -> None:
    result = await client.run("sh", "-c", "while :; do :; done", limits={"cpu_seconds": 1})
    assert outcome(result) == "CPU_LIMIT"
    # SIGXCPU at the soft limit (a pid 1 used to drop it and run on to the
    # hard limit's SIGKILL); the accounted CPU is close to the limit, a
    # little under it on a loaded machine.
    assert result.exited.signal == signal.SIGXCPU
    assert result.exited.rusage.user_seconds + result.exited.rusage.system_seconds >= 0.5


async def test_output_cap_keeps_head_and_tail_and_counts_the_rest(client: Client) -> None:
    result = await client.run("seq", "1", "200000", limits={"output_bytes": 1000})
    assert outcome(result) == "EXITED" and result.exited.exit_code == 0
    total = len("".join(f"{i}\n" for i in range(1, 200001)))
    assert result.exited.stdout.total_bytes == total
    assert result.exited.stdout.kept_bytes == 1000
    assert result.exited.stdout.dropped_bytes == total - 1000
    assert result.stdout.startswith(b"1\n2\n3\n")
    assert result.stdout.endswith(b"199999\n200000\n")
    assert f"{total - 1000} bytes dropped".encode() in result.stdout


async def test_streaming_output_cap_keeps_head_and_tail(client: Client) -> None:
    events = [
        e
        async for e in client.stub.Spawn(
            request(["seq", "1", "100000"], limits={"output_bytes": 600})
        )
    ]
    data = b"".join(e.output.data for e in events if e.WhichOneof("event") == "output")
    assert data.startswith(b"1\n2\n") and data.endswith(b"99999\n100000\n")
    assert events[-1].exited.stdout.kept_bytes == 600


async def test_runaway_writer_hits_output_limit(client: Client, marker: str) -> None:
    result = await client.run(
        "yes", limits={"total_output_bytes": 2_000_000}, env={"TEST_MARKER": marker}
    )
    assert outcome(result) == "OUTPUT_LIMIT"
    assert result.exited.stdout.total_bytes >= 2_000_000
    assert wait_gone(marker, 1.0) == []


async def test_unknown_executable(client: Client) -> None:
    assert await client.refusal("no-such-command-xyz") == "EXECUTABLE_NOT_FOUND"


async def test_relative_path_with_slash_is_not_allowed(client: Client) -> None:
    assert await client.refusal("./run.sh") == "EXECUTABLE_NOT_ALLOWED"


@pytest.mark.parametrize("cwd", ["../..", "/etc", "/", "../../../../../etc"])
async def test_cwd_escape_is_refused(client: Client, cwd: str) -> None:
    assert await client.refusal("pwd", cwd=cwd) == "PATH_ESCAPES_ROOT"


async def test_cwd_symlink_out_of_the_root_is_refused(client: Client, daemon) -> None:  # type: ignore[no-untyped-def]
    (daemon.root() / "out").symlink_to("/etc")
    assert await client.refusal("pwd", cwd="out") == "PATH_ESCAPES_ROOT"


async def test_cwd_inside_roots(client: Client, daemon) -> None:  # type: ignore[no-untyped-def]
    sub = daemon.root() / "sub"
    sub.mkdir()
    os.chown(sub, 65534, 65534)
    assert (await client.run("pwd", cwd="sub")).stdout.decode().strip() == str(sub)
    ref = daemon.root(index=1)
    assert (await client.run("pwd", cwd=str(ref))).stdout.decode().strip() == str(ref)


@pytest.mark.parametrize(
    "limits",
    [
        {"wall_seconds": 10_000},
        {"memory_bytes": 1 << 50},
        {"pids": 100_000},
        {"cpu_seconds": 0},
        {"wall_seconds": -1},
        {"wall_seconds": float("inf")},
        {"wall_seconds": float("nan")},
    ],
)
async def test_limit_outside_the_ceiling_is_refused(
    client: Client, limits: dict[str, float]
) -> None:
    assert await client.refusal("true", limits=limits) == "LIMIT_INVALID"


async def test_applied_limits_are_reported(client: Client) -> None:
    result = await client.run("true", limits={"wall_seconds": 5, "pids": 50})
    assert result.started.limits.wall_seconds == 5
    assert result.started.limits.pids == 50
    assert result.started.limits.memory_bytes == 4 << 30  # the ceiling, as no default was set


async def test_cancel_mid_run_kills_the_tree(client: Client, marker: str) -> None:
    call = client.stub.Spawn(
        request(["sh", "-c", "setsid sleep 1000 & sleep 1000"], env={"TEST_MARKER": marker})
    )
    async for event in call:
        if event.WhichOneof("event") == "started":
            break
    await asyncio.sleep(0.2)
    assert processes_with(marker)
    call.cancel()
    assert wait_gone(marker, 2.0) == []


async def test_deadline_mid_run_kills_the_tree(client: Client, marker: str) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await client.stub.Run(request(["sleep", "1000"], env={"TEST_MARKER": marker}), timeout=0.5)
    assert caught.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    assert wait_gone(marker, 2.0) == []


async def test_spawn_failed_reports_the_step(client: Client, daemon) -> None:  # type: ignore[no-untyped-def]
    locked = daemon.root() / "locked"
    locked.mkdir(mode=0o700)  # owned by root: the run-as user cannot enter it
    result = await client.run("pwd", cwd="locked")
    assert outcome(result) == "SPAWN_FAILED"
    assert result.exited.failed_step == "chdir"
    assert result.exited.errno == 13


async def test_request_id_makes_a_spawn_idempotent(client: Client, daemon) -> None:  # type: ignore[no-untyped-def]
    first = await client.run("sh", "-c", "echo $$; date +%N", request_id="req-1")
    again = await client.run("sh", "-c", "echo $$; date +%N", request_id="req-1")
    assert again.started.spawn_id == first.started.spawn_id
    assert again.started.attached
    # The retry gets the same end, counts included; the output itself was
    # passed to the first caller and is kept by nobody in the root
    # (decision 0032).
    assert first.stdout and again.stdout == b""
    assert again.exited == first.exited
    assert again.exited.stdout.total_bytes == len(first.stdout)
    execs = [
        r
        for r in audit_records(daemon.audit_path)
        if r["event"] == "process.exec" and r.get("request_id") == "req-1"
    ]
    assert len(execs) == 1


async def test_dry_run_runs_nothing(client: Client, daemon) -> None:  # type: ignore[no-untyped-def]
    result = await client.run("touch", "created-by-dry-run", dry_run=True)
    assert result.started.dry_run and not result.HasField("exited")
    assert result.started.executable.path.endswith("/touch")
    assert not (daemon.root() / "created-by-dry-run").exists()


async def test_signal_and_list(client: Client, marker: str) -> None:
    call = client.stub.Spawn(request(["sleep", "1000"], env={"TEST_MARKER": marker}))
    started = None
    async for event in call:
        if event.WhichOneof("event") == "started":
            started = event.started
            break
    assert started is not None
    listed = await client.stub.List(process_pb2.ListRequest())
    assert [s.spawn_id for s in listed.spawns] == [started.spawn_id]
    await client.stub.Signal(
        process_pb2.SignalRequest(spawn_id=started.spawn_id, signal=signal.SIGKILL)
    )
    async for event in call:
        if event.WhichOneof("event") == "exited":
            assert common_pb2.Outcome.Name(event.exited.outcome) == "SIGNALED"
            assert event.exited.signal_name == "SIGKILL"
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await client.stub.Signal(process_pb2.SignalRequest(pid=1, signal=9))
    assert caught.value.code() == grpc.StatusCode.NOT_FOUND


async def test_fifty_concurrent_spawns_from_eight_clients_leak_nothing(daemon) -> None:  # type: ignore[no-untyped-def]
    clients = [Client(daemon.socket) for _ in range(8)]
    await clients[0].run("true")  # warm up the daemon's lazy state
    fds_before = open_fds(daemon.pid)

    async def one(i: int) -> process_pb2.RunResult:
        return await clients[i % 8].run("sh", "-c", f"echo {i}")

    results = await asyncio.gather(*(one(i) for i in range(50)))
    assert sorted(int(r.stdout) for r in results) == list(range(50))
    assert all(outcome(r) == "EXITED" for r in results)
    for c in clients:
        await c.close()
    # A spawn's fds are released a loop turn after its answer: wait for
    # that (a correctness deadline, 5 s; a leak stays, so it still fails).
    deadline = time.monotonic() + 5
    while True:
        zombies = zombies_under(daemon.pid)
        leaked = open_fds(daemon.pid) - fds_before
        stray = [f for f in leaked if "pipe" in f or "eventfd" in f or "socket" not in f]
        if (not zombies and not stray) or time.monotonic() > deadline:
            break
        await asyncio.sleep(0.1)
    assert zombies == []
    assert not stray, leaked
    # The files the cgroups made ahead (the pool's and the warm children's)
    # and the recycled ones (hostcapd.process.cgroup_pool) keep open are
    # held while they wait and closed with them: at most nine each (three
    # stat files, one cgroup.procs and one file recycling reads in each of
    # three hierarchies), for the two of each kind and the recycled.
    ahead = ahead_fds(daemon.pid)
    assert 0 < len(ahead) <= 9 * (4 + KEEP), ahead


async def test_quota_refuses_the_excess(start_daemon, marker: str) -> None:  # type: ignore[no-untyped-def]
    daemon = start_daemon({"dev": {"max_concurrent_spawns": 2}})
    client = Client(daemon.socket)
    calls = [
        client.stub.Spawn(request(["sleep", "1000"], env={"TEST_MARKER": marker})) for _ in range(2)
    ]
    for call in calls:
        async for _ in call:
            break
    assert await client.refusal("true") == "QUOTA_EXCEEDED"
    for call in calls:
        call.cancel()
    assert wait_gone(marker, 2.0) == []
    # The slots come back once the daemon has the trees' ends, which may be
    # a moment after the processes are gone (correctness deadline: 2 s).
    deadline = time.monotonic() + 2.0
    while True:
        try:
            result = await client.run("true")
            break
        except grpc.aio.AioRpcError as error:
            if error.code() != grpc.StatusCode.RESOURCE_EXHAUSTED or time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.02)
    assert outcome(result) == "EXITED"
    await client.close()


async def test_sigterm_ends_running_spawns_as_daemon_shutdown(daemon, marker: str) -> None:  # type: ignore[no-untyped-def]
    client = Client(daemon.socket)
    call = client.stub.Spawn(
        request(["sh", "-c", "trap '' TERM; sleep 1000"], env={"TEST_MARKER": marker})
    )
    async for _ in call:
        break
    daemon.proc.send_signal(signal.SIGTERM)
    last = None
    async for event in call:
        last = event
    assert last is not None and last.WhichOneof("event") == "exited"
    assert common_pb2.Outcome.Name(last.exited.outcome) == "DAEMON_SHUTDOWN"
    assert daemon.proc.wait(10) == 0
    assert wait_gone(marker, 1.0) == []
    assert not daemon.socket.exists()
    await client.close()


async def test_audit_has_exec_then_exit_for_every_spawn(client: Client, daemon) -> None:  # type: ignore[no-untyped-def]
    ids = set()
    for argv in (["true"], ["false"], ["sh", "-c", "exit 3"]):
        ids.add(
            (
                await client.run(*argv, labels={"session": "s1", "tool_call_id": "t1"})
            ).started.spawn_id
        )
    records = list(audit_records(daemon.audit_path))
    for spawn_id in ids:
        events = [r["event"] for r in records if r.get("spawn_id") == spawn_id]
        assert events == ["process.exec", "process.exit"], events
        exec_record = next(r for r in records if r.get("spawn_id") == spawn_id)
        assert exec_record["labels"] == {"session": "s1", "tool_call_id": "t1"}
        assert len(exec_record["executable"]["sha256"]) == 64


def test_hostcapctl_run_json_and_exit_codes(daemon) -> None:  # type: ignore[no-untyped-def]
    import json
    import subprocess
    import sys

    def ctl(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "hostcap.ctl.main", "--socket", str(daemon.socket), *args],
            capture_output=True,
            text=True,
            timeout=60,
        )

    done = ctl("run", "--json", "--", "sh", "-c", "echo hi; exit 4")
    assert done.returncode == 4
    data = json.loads(done.stdout)
    assert (data["outcome"], data["exit_code"], data["stdout"]) == ("EXITED", 4, "hi\n")
    assert "pid_namespace" in data["protections"]
    assert data["executable"]["path"] == os.path.realpath("/bin/sh")
    assert ctl("run", "--timeout", "0.5", "--", "sleep", "10").returncode == 124
    assert ctl("run", "--", "no-such-cmd").returncode == 127
    missing = ctl("run", "--json", "--", "no-such-cmd")
    assert json.loads(missing.stdout)["error"]["reason"] == "EXECUTABLE_NOT_FOUND"
    assert ctl("run", "--cwd", "/etc", "--", "true").returncode == 125
    # A real fault: 128 + SIGSEGV.
    assert ctl("run", "--", "python3", "-c", "import ctypes; ctypes.string_at(0)").returncode == 139
    streamed = ctl("run", "--", "sh", "-c", "echo live")
    assert streamed.stdout == "live\n" and "EXITED" in streamed.stderr


async def test_a_script_runs_by_path_and_says_exec_by_fd_was_not_applied(
    client: Client, daemon
) -> None:  # type: ignore[no-untyped-def]
    script = daemon.root() / "hello.sh"
    script.write_text('#!/bin/sh\necho from-script "$@"\n')
    script.chmod(0o755)
    result = await client.run(str(script), "x")
    assert (outcome(result), result.stdout) == ("EXITED", b"from-script x\n")
    by_fd = {p.name: p for p in result.started.protections}["exec_by_fd"]
    assert not by_fd.applied and "script" in by_fd.reason
    binary = await client.run("true")
    assert {p.name: p.applied for p in binary.started.protections}["exec_by_fd"]


async def test_a_shell_redirect_to_dev_null_works(client: Client) -> None:
    result = await client.run("sh", "-c", "echo hidden > /dev/null && echo shown 2>/dev/null")
    assert (outcome(result), result.stdout, result.stderr) == ("EXITED", b"shown\n", b"")
