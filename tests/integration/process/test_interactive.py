"""Interactive spawns (issue 31), against a real daemon: input written while
a command runs (WriteStdin) on a pipe and on a terminal of its own, Resize,
EOF, and the refusals a client gets."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable

import pytest
from hostcap_proto.v1 import common_pb2, process_pb2
from support.daemon import Daemon, audit_records
from support.interactive import Output, refusal, resize, start, write
from support.process import Client, request


async def test_a_line_written_reaches_read_on_a_pipe(client: Client) -> None:
    spawn_id = await start(client, "sh", "-c", "read a; echo got:$a")
    answer = await write(client, spawn_id, b"hello\n")
    assert (answer.bytes_written, answer.total_bytes, answer.writes) == (6, 6, 1)
    out = Output(client, spawn_id)
    await out.until(b"got:hello\n")
    last = await out.ended()
    assert common_pb2.Outcome.Name(last.exited.outcome) == "EXITED"
    assert (last.exited.input_writes, last.exited.input_bytes) == (1, 6)
    assert not last.exited.HasField("tty")


async def test_close_gives_eof_and_cat_ends_with_its_exit_record(
    daemon: Daemon, client: Client
) -> None:
    spawn_id = await start(client, "cat")
    await write(client, spawn_id, b"one\n")
    await write(client, spawn_id, b"two\n", close=True)
    out = Output(client, spawn_id)
    last = await out.ended()
    assert out.data == b"one\ntwo\n"
    assert last.exited.exit_code == 0
    assert (last.exited.input_writes, last.exited.input_bytes) == (2, 8)
    exits = [
        r
        for r in audit_records(daemon.audit_path)
        if r["event"] == "process.exit" and r["spawn_id"] == spawn_id
    ]
    assert len(exits) == 1 and exits[0]["input_writes"] == 2 and exits[0]["input_bytes"] == 8


async def test_the_requests_stdin_comes_first_and_the_input_stays_open(client: Client) -> None:
    spawn_id = await start(client, "cat", stdin=b"given\n")
    answer = await write(client, spawn_id, b"written\n", close=True)
    assert (answer.writes, answer.total_bytes) == (1, 8)  # the request's stdin is not a write
    out = Output(client, spawn_id)
    last = await out.ended()
    assert out.data == b"given\nwritten\n" and last.exited.exit_code == 0


async def test_a_full_pipe_makes_the_writer_wait(daemon: Daemon, client: Client) -> None:
    """The pipe's back-pressure reaches the caller: a write that does not fit
    returns only once the command has read, never buffered in the daemon."""
    go = daemon.root() / "go"
    script = "while [ ! -e go ]; do sleep 0.05; done; cat >/dev/null"
    spawn_id = await start(client, "sh", "-c", script)
    chunk = b"y" * (64 * 1024)
    await write(client, spawn_id, chunk)  # the pipe's 64 KiB
    blocked = asyncio.ensure_future(write(client, spawn_id, chunk))
    await asyncio.sleep(1.0)
    assert not blocked.done()  # the pipe is full: the call waits
    go.touch()
    answer = await blocked
    assert (answer.bytes_written, answer.total_bytes, answer.writes) == (
        len(chunk),
        2 * len(chunk),
        2,
    )
    await write(client, spawn_id, b"", close=True)
    last = await Output(client, spawn_id).ended()
    assert last.exited.exit_code == 0 and last.exited.input_bytes == 2 * len(chunk)


async def test_refusals_say_why(client: Client) -> None:
    plain = await client.stub.Run(request(["sleep", "30"], detached=True))
    plain_id = plain.started.spawn_id
    assert not plain.started.stdin_open
    assert await refusal(write(client, plain_id, b"x")) == "STDIN_NOT_OPEN"
    assert await refusal(resize(client, plain_id, 10, 10)) == "NOT_A_TERMINAL"
    assert await refusal(write(client, "no-such-spawn", b"x")) == "NOT_FOUND"
    opened = await start(client, "sh", "-c", "cat; sleep 30")
    assert await refusal(write(client, opened, b"x" * (64 * 1024 + 1))) == "TOO_LARGE"
    await write(client, opened, b"", close=True)
    assert await refusal(write(client, opened, b"x")) == "STDIN_NOT_OPEN"
    await client.stub.Signal(process_pb2.SignalRequest(spawn_id=opened, signal=9))
    await Output(client, opened).ended()
    assert await refusal(write(client, opened, b"x")) == "SPAWN_ENDED"
    # A Run that waits cannot be written to.
    assert await client.refusal("cat", stdin_open=True) == "INVALID_ARGUMENT"
    tty = process_pb2.TerminalSize(rows=0, cols=80)
    assert await client.refusal("cat", detached=True, tty=tty) == "LIMIT_INVALID"
    await client.stub.Signal(process_pb2.SignalRequest(spawn_id=plain_id, signal=9))


async def test_a_streamed_spawn_takes_input_while_its_call_streams(client: Client) -> None:
    call = client.stub.Spawn(request(["sh", "-c", "read a; echo got:$a"], stdin_open=True))
    events = call.__aiter__()
    first = await events.__anext__()
    assert first.started.stdin_open
    await write(client, first.started.spawn_id, b"streamed\n")
    out = b""
    async for event in events:
        out += event.output.data
        if event.HasField("exited"):
            assert event.exited.input_writes == 1
    assert out == b"got:streamed\n"


@pytest.mark.parametrize("tty", [False, True])
async def test_isatty_is_what_was_asked(client: Client, tty: bool) -> None:
    probe = (
        "import os,sys; print('isatty', os.isatty(0), os.isatty(1), os.isatty(2),"
        " os.environ.get('TERM')); sys.stdout.flush(); input()"
    )
    spawn_id = await start(client, "python3", "-c", probe, tty=(24, 80) if tty else None)
    out = Output(client, spawn_id)
    await out.until(rb"isatty (True|False) (True|False) (True|False)")
    term = "xterm-256color" if tty else "None"  # the tenant's allowlist has no TERM
    assert f"isatty {tty} {tty} {tty} {term}".encode() in out.data
    await write(client, spawn_id, b"\n")
    await out.ended()


async def test_python_repl_on_a_tty_answers_is_interrupted_and_answers_again(
    client: Client,
) -> None:
    spawn_id = await start(client, "python3", "-q", tty=(24, 80))
    out = Output(client, spawn_id)
    await out.until(rb">>> ")
    mark = len(out.data)
    await write(client, spawn_id, b"print(6*7)\n")
    await out.until(rb"\r\n42\r\n>>> ", start=mark)
    mark = len(out.data)
    await write(client, spawn_id, b"import time; time.sleep(30)\n")
    await out.until(rb"time\.sleep\(30\)\r\n", start=mark)
    await write(client, spawn_id, b"\x03")
    await out.until(rb"(?s)KeyboardInterrupt.*>>> ", start=mark, timeout=10)
    mark = len(out.data)
    await write(client, spawn_id, b"print('still', 6*7)\n")
    await out.until(rb"still 42\r\n>>> ", start=mark)
    await write(client, spawn_id, b"", close=True)  # ^D at a line's start: the REPL ends
    last = await out.ended()
    assert last.exited.exit_code == 0
    assert (last.exited.tty.rows, last.exited.tty.cols) == (24, 80)
    assert last.exited.input_writes == 4  # the close (its ^D) is not data


async def test_stty_size_is_the_size_given_and_follows_resize(client: Client) -> None:
    # SIGWINCH makes the shell print the new size: the kernel sent it.
    script = "trap 'stty size' WINCH; stty size; echo ready; while :; do sleep 0.1; done"
    spawn_id = await start(client, "sh", "-c", script, tty=(30, 100))
    out = Output(client, spawn_id)
    await out.until(rb"30 100\r\nready")
    listed = await client.stub.List(process_pb2.ListRequest())
    (info,) = [s for s in listed.spawns if s.spawn_id == spawn_id]
    assert info.stdin_open and (info.tty.rows, info.tty.cols) == (30, 100)
    await resize(client, spawn_id, 50, 132)
    await out.until(rb"50 132\r\n")
    await client.stub.Signal(process_pb2.SignalRequest(spawn_id=spawn_id, signal=9))
    last = await out.ended()
    assert (last.exited.tty.rows, last.exited.tty.cols) == (50, 132)


async def test_read_gets_its_line_through_the_terminal(client: Client) -> None:
    spawn_id = await start(client, "sh", "-c", "read a; echo got:$a", tty=(24, 80))
    await write(client, spawn_id, b"typed\r")  # Enter, as a keyboard sends it
    out = Output(client, spawn_id)
    await out.until(rb"got:typed\r\n")
    assert (await out.ended()).exited.exit_code == 0
    assert out.data.startswith(b"typed\r\n")  # the terminal's echo


async def test_terminals_in_one_environment_are_each_their_own(client: Client) -> None:
    env = await client.stub.OpenEnvironment(process_pb2.OpenEnvironmentRequest())
    # Its pts 0's device at its start, and again once the other one runs: a
    # mount propagated between the spawns would change the second.
    script = "echo $(tty) dev=$(stat -c %d /dev/pts/0); read a; echo again=$(stat -c %d /dev/pts/0)"
    try:
        ids = [
            await start(client, "sh", "-c", script, tty=(24, 80), environment_id=env.environment_id)
            for _ in range(2)
        ]
        devices = []
        for spawn_id in ids:
            out = Output(client, spawn_id)
            await out.until(rb"dev=\d+")
            # Both are pts 0, at once: a devpts instance of each spawn's own.
            name, device = out.data.split()[:2]
            assert name == b"/dev/pts/0", out.data
            devices.append(device.removeprefix(b"dev="))
        host = os.stat("/dev/pts").st_dev if os.path.isdir("/dev/pts") else -1
        assert len(set(devices)) == 2 and str(host).encode() not in devices
        for spawn_id, device in zip(ids, devices, strict=True):
            await write(client, spawn_id, b"\r")
            out = Output(client, spawn_id)
            await out.until(rb"again=\d+")
            assert b"again=" + device + b"\r\n" in out.data
            await out.ended()
    finally:
        await client.stub.CloseEnvironment(
            process_pb2.CloseEnvironmentRequest(environment_id=env.environment_id)
        )


async def test_term_is_the_requests_when_the_tenant_allows_it(
    start_daemon: Callable[..., Daemon],
) -> None:
    allow = ["LANG", "TZ", "GREETING", "TEST_MARKER", "TERM"]
    daemon = start_daemon(tenants={"dev": {"env_allowlist": allow}})
    client = Client(daemon.socket)
    try:
        for env, term in (({"TERM": "vt100"}, b"vt100"), ({}, b"xterm-256color")):
            spawn_id = await start(client, "sh", "-c", "echo TERM=$TERM", tty=(24, 80), env=env)
            out = Output(client, spawn_id)
            await out.until(rb"TERM=\S+\r\n")
            assert f"TERM={term.decode()}\r\n".encode() in out.data
            await out.ended()
    finally:
        await client.close()


async def test_ctrl_c_ends_a_shells_foreground_command_and_the_shell_goes_on(
    client: Client,
) -> None:
    spawn_id = await start(client, "sh", tty=(24, 80))
    out = Output(client, spawn_id)
    # The foreground job says it runs (the typed line's echo reads `ru""ns`,
    # its output `runs`): a job control shell makes it the terminal's
    # foreground group in the forked child, before that child runs anything,
    # so the Ctrl-C cannot land between the fork and that. (Sent once the
    # line's echo came, it could: the SIGINT then goes to the shell's group,
    # and the sleep outlives the 10 s below. Two failures of this test under
    # load 6-8.5 fit that; not reproduced.)
    await write(client, spawn_id, b"sh -c 'echo ru\"\"ns; exec sleep 30'; echo not-reached\r")
    await out.until(rb"\nruns\r\n")
    mark = len(out.data)
    await write(client, spawn_id, b"\x03")
    await write(client, spawn_id, b"echo alive-$((6*7))\r")
    await out.until(rb"alive-42\r\n", start=mark, timeout=10)
    await write(client, spawn_id, b"exit\r")
    last = await out.ended()
    assert b"not-reached\r\n" not in out.data[mark:]
    assert last.exited.exit_code == 0
