"""hostcapctl's interactive spawns (issue 31): `run --tty` / `--stdin-open`,
`write`, `resize` and `attach`.

    hostcapctl run --tty -- python3            # an interactive REPL on the spawn's own terminal
    hostcapctl run --tty --detach -- sh        # prints the spawn id; the shell waits
    hostcapctl attach ID                       # join its terminal; Ctrl-] leaves it running
    hostcapctl run --detach --stdin-open -- cat
    printf 'one\\ntwo\\n' | hostcapctl write ID --close
    hostcapctl resize ID 50 132

When hostcapctl's own stdin is a terminal, `run --tty` and `attach` put it
in raw mode (the stdlib `tty`/`termios`; restored on every way out), so
each key reaches the spawn's terminal as typed: Ctrl-C is the spawn's
interrupt, not hostcapctl's. A change of hostcapctl's window size
(SIGWINCH) becomes a Resize of the spawn's terminal. `run --tty` streams
the output of its spawn (Spawn) and ends with it; Ctrl-] ends it early
(the daemon kills the tree). `attach` reads the output of a detached spawn
(ReadOutput, waiting for news) and leaves on Ctrl-], the spawn running; to
a spawn on pipes it sends this terminal's lines (line mode, not raw), and
Ctrl-D leaves too.
When hostcapctl's stdin is not a terminal, its bytes are written as they
come and the spawn's input is closed at their end.

Every write is at most 64 KiB (`hostcap.grpc_input.chunks`) and waits for
the daemon to have it in the pipe or the terminal, so a slow program slows
hostcapctl, not the daemon's memory.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import sys
import termios
import threading
import tty
from collections.abc import AsyncIterator, Coroutine, Iterator
from typing import Any

import grpc
from hostcap_proto.errors import WireError
from hostcap_proto.messages import MAX_REPLY_BYTES, MAX_REQUEST_BYTES
from hostcap_proto.v1 import common_pb2, process_pb2, process_pb2_grpc

from hostcap.ctl.common import (
    EXIT_REFUSED,
    channel,
    exit_status,
    refused,
    report_error,
    socket_of,
    wire_error,
)
from hostcap.grpc_input import write_requests
from hostcap.host import DEFAULT_TERMINAL, MAX_INPUT_CHUNK, MAX_TERMINAL_CELLS

#: The key that leaves `attach` (and ends `run --tty`): Ctrl-], as telnet's.
DETACH_KEY = b"\x1d"
#: What a stream's read() answers at its end.
_EOF: Any = grpc.aio.EOF  # type: ignore[attr-defined]
#: How long one ReadOutput of `attach` waits for news.
ATTACH_WAIT_MS = 1000


def register(sub: Any) -> None:
    write = sub.add_parser("write", help="write this command's stdin into a spawn's input")
    write.add_argument("spawn_id")
    write.add_argument("--close", action="store_true", help="close its input at the end (EOF)")
    write.add_argument("--json", action="store_true", help="print one JSON object")
    write.set_defaults(func=cmd_write)

    resize = sub.add_parser("resize", help="set a tty spawn's terminal size (it gets SIGWINCH)")
    resize.add_argument("spawn_id")
    resize.add_argument("rows", type=_cells)
    resize.add_argument("cols", type=_cells)
    resize.add_argument("--json", action="store_true", help="print one JSON object")
    resize.set_defaults(func=cmd_resize)

    attach = sub.add_parser(
        "attach", help="join a detached tty spawn's terminal (Ctrl-] leaves it running)"
    )
    attach.add_argument("spawn_id")
    attach.add_argument(
        "--no-replay", action="store_true", help="show only what it prints from now on"
    )
    attach.set_defaults(func=cmd_attach)


def add_run_options(run: Any) -> None:
    """`run`'s options for an interactive spawn."""
    run.add_argument(
        "--tty",
        action="store_true",
        help="run it on a terminal of its own (interactive when this stdin is a terminal)",
    )
    run.add_argument("--rows", type=_cells, help="the terminal's rows (default: this one's, or 24)")
    run.add_argument(
        "--cols", type=_cells, help="the terminal's columns (default: this one's, or 80)"
    )
    run.add_argument(
        "--stdin-open",
        action="store_true",
        help="keep its stdin open for `write` (with --detach), or feed it this stdin as it comes",
    )


def _cells(text: str) -> int:
    value = int(text)
    if not 1 <= value <= MAX_TERMINAL_CELLS:
        raise argparse.ArgumentTypeError(f"must be 1-{MAX_TERMINAL_CELLS}")
    return value


def interactive(args: argparse.Namespace) -> bool:
    """Whether `run` asks for an interactive spawn (this module runs it)."""
    return bool(getattr(args, "tty", False) or getattr(args, "stdin_open", False))


def own_size() -> tuple[int, int] | None:
    """This terminal's size, when stdin or stdout is one."""
    for fd in (0, 1):
        try:
            size = os.get_terminal_size(fd)
        except OSError:
            continue
        if size.lines and size.columns:
            return (min(size.lines, MAX_TERMINAL_CELLS), min(size.columns, MAX_TERMINAL_CELLS))
    return None


def apply_interactive(request: process_pb2.SpawnRequest, args: argparse.Namespace) -> None:
    """Set the request's terminal or open input from `run`'s options."""
    if (args.rows or args.cols) and not args.tty:
        raise SystemExit("hostcapctl run: --rows and --cols need --tty")
    if args.tty:
        rows, cols = own_size() or (DEFAULT_TERMINAL.rows, DEFAULT_TERMINAL.cols)
        request.tty.rows = args.rows or rows
        request.tty.cols = args.cols or cols
    # With --stdin-file, the file is written first and the input stays open after it.
    request.stdin_open = True


# --------------------------------------------------------------- the plumbing


def _aio_channel(args: argparse.Namespace) -> grpc.aio.Channel:
    return grpc.aio.insecure_channel(
        f"unix:{socket_of(args)}",
        options=[
            ("grpc.max_receive_message_length", MAX_REPLY_BYTES),
            ("grpc.max_send_message_length", MAX_REQUEST_BYTES),
        ],
    )


@contextlib.contextmanager
def raw_terminal(fd: int) -> Iterator[bool]:
    """`fd` in raw mode while inside, restored on every way out; yields
    whether it is a terminal (a pipe or a file is left alone)."""
    if not os.isatty(fd):
        yield False
        return
    saved = termios.tcgetattr(fd)
    try:
        tty.setraw(fd, termios.TCSANOW)
        yield True
    finally:
        termios.tcsetattr(fd, termios.TCSADRAIN, saved)


async def _stdin_chunks(fd: int) -> AsyncIterator[bytes]:
    """What arrives on `fd`, as it comes, until its end. At most a few
    pieces wait here: past them `fd` is not read until the writer catches up."""
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[bytes] = asyncio.Queue(maxsize=4)
    paused = False

    def readable() -> None:
        nonlocal paused
        try:
            data = os.read(fd, MAX_INPUT_CHUNK)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        queue.put_nowait(data)
        if not data or queue.full():
            loop.remove_reader(fd)
            paused = bool(data)

    try:
        loop.add_reader(fd, readable)
    except PermissionError:  # a regular file: epoll cannot watch it
        thread_reader(fd, loop, queue)
        while data := await queue.get():
            yield data
        return
    try:
        while data := await queue.get():
            if paused and queue.empty():
                paused = False
                loop.add_reader(fd, readable)
            yield data
    finally:
        loop.remove_reader(fd)


def thread_reader(fd: int, loop: asyncio.AbstractEventLoop, queue: asyncio.Queue[bytes]) -> None:
    """Read `fd` on a daemon thread into `queue` (for a file epoll cannot watch)."""

    def run() -> None:
        while True:
            data = os.read(fd, MAX_INPUT_CHUNK)
            asyncio.run_coroutine_threadsafe(queue.put(data), loop).result()
            if not data:
                return

    threading.Thread(target=run, daemon=True, name="hostcapctl-stdin").start()


class Session:
    """One interactive spawn: keys in (WriteStdin, in order), window size
    changes (Resize), and the detach key."""

    def __init__(self, stub: Any, spawn_id: str, *, raw: bool, close_at_end: bool) -> None:
        self.stub, self.spawn_id = stub, spawn_id
        #: This stdin is a keyboard (raw, or in line mode), and is it raw.
        self.keyboard, self.raw = os.isatty(0), raw
        self.close_at_end = close_at_end
        self.detached = asyncio.Event()
        self.refused: WireError | None = None

    async def pump_input(self) -> None:
        """Forward stdin until its end (then close the spawn's input when
        `close_at_end`, else leave: Ctrl-D in line mode) or the detach key
        typed on a keyboard."""
        async for data in _stdin_chunks(0):
            if self.keyboard and DETACH_KEY in data:
                before = data.split(DETACH_KEY, 1)[0]
                if before:
                    await self._write(before, close=False)
                self.detached.set()
                return
            if not await self._write(data, close=False):
                return
        if self.close_at_end:
            await self._write(b"", close=True)
        elif self.keyboard:
            self.detached.set()  # Ctrl-D on a keyboard in line mode leaves too

    async def _write(self, data: bytes, *, close: bool) -> bool:
        try:
            for request in write_requests(self.spawn_id, data, close):
                await self.stub.WriteStdin(request)
        except grpc.RpcError as error:
            wire = wire_error(error)
            if wire.reason not in ("SPAWN_ENDED", "STDIN_NOT_OPEN"):
                self.refused = wire
            return False  # its end is reported by the output side
        return True

    def follow_window(self) -> None:
        """Resize the spawn's terminal whenever this one's changes."""
        if not self.raw:
            return
        loop = asyncio.get_running_loop()
        loop.add_signal_handler(signal.SIGWINCH, lambda: loop.create_task(self.resize()))

    async def resize(self) -> None:
        size = own_size()
        if size is None:
            return
        # Ended meanwhile, or no terminal: the output side says what matters.
        with contextlib.suppress(grpc.RpcError):
            await self.stub.Resize(
                process_pb2.ResizeRequest(spawn_id=self.spawn_id, rows=size[0], cols=size[1])
            )


def _out(data: bytes) -> None:
    if data:
        sys.stdout.buffer.write(data)
        sys.stdout.buffer.flush()


def _note(text: str, raw: bool) -> None:
    # In raw mode a newline does not return the carriage.
    end = "\r\n" if raw else "\n"
    sys.stderr.write(f"{end if raw else ''}hostcapctl: {text}{end}")
    sys.stderr.flush()


async def _first(tasks: list[asyncio.Task[Any]]) -> None:
    await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)


# ------------------------------------------------------------------ commands


def run_interactive(args: argparse.Namespace, request: process_pb2.SpawnRequest) -> int:
    """`run --tty` / `run --stdin-open` without --detach: stream its output, feed it our input."""
    # Raw for a terminal of its own (keys as typed); for pipes this terminal
    # stays in line mode (edited and echoed here), Ctrl-D ending its input.
    with raw_terminal(0) if request.HasField("tty") else contextlib.nullcontext(False) as raw:
        return _until_signalled(_run(args, request, raw))


def _until_signalled(work: Coroutine[Any, Any, int]) -> int:
    """Run `work`; SIGTERM or SIGHUP cancels it, so every `finally` runs (the
    terminal is restored, a streamed spawn's call cancelled) and the status
    says which signal."""
    got: list[int] = []

    async def main() -> int:
        loop = asyncio.get_running_loop()
        task = asyncio.current_task()
        assert task is not None

        def stop(signum: int) -> None:
            got.append(signum)
            task.cancel()

        for signum in (signal.SIGTERM, signal.SIGHUP):
            loop.add_signal_handler(signum, stop, signum)
        return await work

    try:
        return asyncio.run(main())
    except asyncio.CancelledError:
        return 128 + (got[0] if got else signal.SIGTERM)


async def _run(args: argparse.Namespace, request: process_pb2.SpawnRequest, raw: bool) -> int:
    async with _aio_channel(args) as ch:
        stub = process_pb2_grpc.ProcessServiceStub(ch)  # type: ignore[no-untyped-call]
        call = stub.Spawn(request)
        try:
            first: Any = await call.read()
        except grpc.RpcError as error:
            report_error(wire_error(error), as_json=False)
            return EXIT_REFUSED
        if first is _EOF or first.WhichOneof("event") != "started":
            _note("the spawn stream did not start", raw)
            return EXIT_REFUSED
        session = Session(stub, first.started.spawn_id, raw=raw, close_at_end=True)
        session.follow_window()
        tasks = [
            asyncio.create_task(_drain(call)),
            asyncio.create_task(session.pump_input()),
            asyncio.create_task(session.detached.wait()),
        ]
        try:
            await _first([tasks[0], tasks[2]])
            if not tasks[0].done():
                call.cancel()  # the daemon kills the tree
                _note("ended on Ctrl-]", raw)
                return 130
            exited = tasks[0].result()
        except grpc.RpcError as error:
            report_error(wire_error(error), as_json=False)
            return EXIT_REFUSED
        finally:
            for task in tasks:
                task.cancel()
        if exited is None:
            _note("the stream ended without an exit report", raw)
            return EXIT_REFUSED
        _note(f"{common_pb2.Outcome.Name(exited.outcome)}: {exited.message}", raw)
        return exit_status(exited)


async def _drain(call: Any) -> Any:
    """Write a Spawn stream's output as it comes: its Exited, or None."""
    while (event := await call.read()) is not _EOF:
        kind = event.WhichOneof("event")
        if kind == "output":
            target = sys.stdout if event.output.stream == common_pb2.STDOUT else sys.stderr
            target.buffer.write(event.output.data)
            target.buffer.flush()
        elif kind == "exited":
            return event.exited
    return None


def cmd_attach(args: argparse.Namespace) -> int:
    return _until_signalled(_attach(args))


async def _attach(args: argparse.Namespace) -> int:
    async with _aio_channel(args) as ch:
        stub = process_pb2_grpc.ProcessServiceStub(ch)  # type: ignore[no-untyped-call]
        try:
            answer: Any = await stub.ReadOutput(
                process_pb2.ReadOutputRequest(spawn_id=args.spawn_id, offset=0, wait_ms=0)
            )
            listed: Any = await stub.List(process_pb2.ListRequest())
        except grpc.RpcError as error:
            return refused(error, as_json=False)
        info = next((i for i in listed.spawns if i.spawn_id == args.spawn_id), None)
        on_tty = info is not None and info.HasField("tty") and info.tty.rows > 0
        # A terminal spawn takes keys as typed (raw); a pipe takes this
        # terminal's lines, edited and echoed here (Ctrl-] then Enter, or
        # Ctrl-D, leaves).
        with raw_terminal(0) if on_tty else contextlib.nullcontext(False) as raw:
            return await _attached(args, stub, answer, raw=raw)


async def _attached(args: argparse.Namespace, stub: Any, answer: Any, *, raw: bool) -> int:
    if not args.no_replay:
        _out(answer.stdout + answer.stderr)
    offset = answer.next_offset
    # Attaching does not own the spawn: the end of this stdin does not close its input.
    session = Session(stub, args.spawn_id, raw=raw, close_at_end=False)
    if answer.running and session.keyboard:
        leave = "Ctrl-]" if raw else "Ctrl-] then Enter, or Ctrl-D,"
        _note(f"attached to {args.spawn_id}; {leave} leaves it running", raw)
    if answer.running and raw:
        session.follow_window()
        await session.resize()
    pump = asyncio.create_task(session.pump_input())
    detach = asyncio.create_task(session.detached.wait())
    try:
        while answer.running:
            read = asyncio.ensure_future(
                stub.ReadOutput(process_pb2.ReadOutputRequest(
                    spawn_id=args.spawn_id, offset=offset, wait_ms=ATTACH_WAIT_MS))
            )  # fmt: skip
            await _first([read, detach])
            if detach.done():
                read.cancel()
                _note(f"detached; `hostcapctl attach {args.spawn_id}` to come back", raw)
                return 0
            answer = read.result()
            _out(answer.stdout + answer.stderr)
            offset = answer.next_offset
    except grpc.RpcError as error:
        report_error(wire_error(error), as_json=False)
        return EXIT_REFUSED
    finally:
        for task in (pump, detach):
            task.cancel()
    if session.refused is not None:
        report_error(session.refused, as_json=False)
    _note(f"{common_pb2.Outcome.Name(answer.exited.outcome)}: {answer.exited.message}", raw)
    return exit_status(answer.exited)


def cmd_write(args: argparse.Namespace) -> int:
    return asyncio.run(_write(args))


async def _write(args: argparse.Namespace) -> int:
    async with _aio_channel(args) as ch:
        stub = process_pb2_grpc.ProcessServiceStub(ch)  # type: ignore[no-untyped-call]
        written, answer = 0, None
        try:
            async for data in _stdin_chunks(0):
                for request in write_requests(args.spawn_id, data, close=False):
                    answer = await stub.WriteStdin(request)
                    written += answer.bytes_written
            if args.close or answer is None:
                # Nothing read and no close: the daemon's answer says what that is
                # (NOT_FOUND for an id it does not know, else nothing to write).
                answer = await stub.WriteStdin(
                    process_pb2.WriteStdinRequest(spawn_id=args.spawn_id, close=args.close)
                )
        except grpc.RpcError as error:
            return refused(error, as_json=args.json)
    if args.json:
        print(json.dumps({
            "spawn_id": args.spawn_id, "bytes_written": written, "closed": args.close,
            "total_bytes": answer.total_bytes if answer else None,
            "writes": answer.writes if answer else None,
        }))  # fmt: skip
    return 0


def cmd_resize(args: argparse.Namespace) -> int:
    request = process_pb2.ResizeRequest(spawn_id=args.spawn_id, rows=args.rows, cols=args.cols)
    with channel(socket_of(args)) as ch:
        stub = process_pb2_grpc.ProcessServiceStub(ch)  # type: ignore[no-untyped-call]
        try:
            stub.Resize(request)
        except grpc.RpcError as error:
            return refused(error, as_json=args.json)
    if args.json:
        print(json.dumps({"spawn_id": args.spawn_id, "rows": args.rows, "cols": args.cols}))
    return 0
