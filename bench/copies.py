"""python -m bench.copies: how many whole copies of a spawn's output the
daemon holds at once on its way from the child's pipe to the front-end's
reply (issue 29, item 2: "passed along rather than copied whole several
times").

Each figure is a ratio to the output itself, measured in the same process:
the rise of the process's resident high-water mark (VmHWM, reset through
/proc/self/clear_refs, so protobuf's C allocations count too) while one
step runs, over the bytes of output the step carries. 1.0 is one copy held
at once; the kept output itself is not counted (it is resident before the
step begins).

- `run_root`: a Run's reply on the root side: 256 MiB of kept stdout
  (head, marker, tail) to the bytes the channel writes into its memfd;
- `run_frontend`: the front-end's decoding of that message, to the bytes
  it gives gRPC;
- `stream_root`: one 1 MiB output event on the root side, from the pipe's
  read to the datagram (an average over 64; Python's allocations, by
  tracemalloc, the read itself included: it is one copy);
- `stream_frontend`: the front-end's decoding of that datagram.

Needs root (clear_refs). Runs in about ten seconds; no daemon.
"""

from __future__ import annotations

import gc
import json
import os
import sys
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

MiB = 1024 * 1024
RUN_OUTPUT = 256 * MiB
EVENT = 1024 * 1024
EVENTS = 64


def _hwm() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no VmHWM")


def _rss() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS")


def _held(step: Callable[[], Any]) -> tuple[int, Any]:
    """Bytes the step held at its peak above what was resident before it."""
    gc.collect()
    Path("/proc/self/clear_refs").write_text("5")
    before = _rss()
    result = step()
    return _hwm() - before, result


def _allocated(step: Callable[[], Any]) -> tuple[int, Any]:
    """Bytes of Python objects the step held at its peak (tracemalloc: the
    high-water mark moves by pages, too coarse for one 1 MiB event)."""
    gc.collect()
    tracemalloc.start()
    try:
        result = step()
        return tracemalloc.get_traced_memory()[1], result
    finally:
        tracemalloc.stop()


def _run_result() -> tuple[Any, Any]:
    """A finished Run's StreamBuffer with RUN_OUTPUT kept (half head, half
    tail, 64 MiB dropped between), and its reply's other fields."""
    from hostcap_proto.v1 import process_pb2
    from hostcapd.process.output import StreamBuffer

    buf = StreamBuffer(RUN_OUTPUT)
    chunk = b"x" * EVENT
    for _ in range((RUN_OUTPUT + 64 * MiB) // EVENT):
        buf.feed(chunk)
    started = process_pb2.Started(spawn_id="s", pid=2)
    exited = process_pb2.Exited(exit_code=0, message="exited 0")
    return buf, (started, exited)


def _reply_wire(started: Any, stdout: Any, stderr: Any, exited: Any) -> Any:
    """The Run reply the servicer gives the bridge (before: a RunResult)."""
    from hostcapd.frontend import process_service

    if hasattr(process_service, "run_result"):
        return process_service.run_result(started, stdout, stderr, exited)
    from hostcap_proto.v1 import process_pb2

    reply = process_pb2.RunResult(
        started=started, stdout=stdout.result(), stderr=stderr.result(), exited=exited
    )
    return reply.SerializeToString()


def measure() -> dict[str, float]:
    from hostcapd.bridge import channel, messages
    from hostcapd.frontend.process_service import output_event
    from hostcapd.process.output import StreamBuffer

    figures: dict[str, float] = {}
    decoder = messages.TO_FRONTEND

    # ---- a Run's reply ----
    buf, (started, exited) = _run_result()
    empty = StreamBuffer(0)

    def reply() -> tuple[list[Any], list[int]]:
        return channel.encode(messages.Reply(call=1), _reply_wire(started, buf, empty, exited))

    held, (buffers, fds) = _held(reply)
    figures["run_root"] = held / RUN_OUTPUT
    datagram = b"".join(buffers)

    def decode() -> tuple[Any, bytes]:
        return channel.decode(memoryview(datagram), [os.dup(fds[0])], decoder)  # type: ignore[no-any-return]

    held, (_, payload) = _held(decode)
    figures["run_frontend"] = held / RUN_OUTPUT
    assert len(payload) > RUN_OUTPUT
    del payload
    for fd in fds:
        os.close(fd)
    gc.collect()

    # ---- a stream's events, one at a time ----
    stream = StreamBuffer(EVENTS * 4 * EVENT, retain_head=False)
    datagrams: list[bytes] = []

    def event() -> None:
        data = bytes(EVENT)  # the pipe's read
        wire = output_event(1, stream.feed(data))
        parts, _ = channel.encode(messages.Event(call=1), wire)
        datagrams.append(b"".join(bytes(p) for p in parts[:2]))  # the prefix and header

    total = 0
    for _ in range(EVENTS):
        held, _ = _allocated(event)
        total += held
    figures["stream_root"] = total / (EVENTS * EVENT)
    whole = b"".join(
        bytes(p) for p in channel.encode(messages.Event(call=1), output_event(1, bytes(EVENT)))[0]
    )

    def received() -> bytes:
        return channel.decode(memoryview(whole), [], decoder)[1]  # type: ignore[no-any-return]

    total = 0
    for _ in range(EVENTS):
        held, payload = _allocated(received)
        total += held
        assert len(payload) > EVENT
        del payload
    figures["stream_frontend"] = total / (EVENTS * EVENT)
    return figures


def main() -> int:
    if os.geteuid() != 0:
        print("bench.copies: needs root (/proc/self/clear_refs)", file=sys.stderr)
        return 2
    figures = measure()
    for name, value in figures.items():
        print(f"{name:16s} {value:5.2f} copies of the output held at once")
    print(json.dumps(figures))
    return 0


if __name__ == "__main__":
    sys.exit(main())
