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

- `run_root`: a Run's reply on the daemon's side: 256 MiB of kept stdout
  (head, marker, tail) joined into the typed answer, to the bytes the
  channel writes into its memfd;
- `run_frontend`: the front-end's decoding of that message, to the wire
  bytes it gives gRPC (`convert.unary_reply`);
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


def _kept_stdout() -> Any:
    """A finished Run's StreamBuffer with RUN_OUTPUT kept (half head, half
    tail, 64 MiB dropped between)."""
    from hostcapd.process.output import StreamBuffer

    buf = StreamBuffer(RUN_OUTPUT)
    chunk = b"x" * EVENT
    for _ in range((RUN_OUTPUT + 64 * MiB) // EVENT):
        buf.feed(chunk)
    return buf


def measure() -> dict[str, float]:
    from hostcapd.bridge import channel, messages
    from hostcapd.frontend import convert

    figures: dict[str, float] = {}
    decoder = messages.TO_FRONTEND
    started = messages.Started(spawn_id="s", pid=2)
    exited = messages.Exited(outcome="EXITED", exit_code=0, message="exited 0")

    # ---- a Run's reply: the service's answer to the channel's datagram ----
    buf = _kept_stdout()

    def reply() -> tuple[list[Any], list[int]]:
        answer = messages.RunResult(started=started, stdout=buf.result(), exited=exited)
        return channel.encode(messages.Reply(call=1, answer=answer))

    held, (buffers, fds) = _held(reply)
    figures["run_root"] = held / RUN_OUTPUT
    datagram = b"".join(bytes(b) for b in buffers)
    del buffers

    def decode() -> bytes:
        message, _ = channel.decode(memoryview(datagram), [os.dup(fd) for fd in fds], decoder)
        wire = convert.unary_reply(message.answer)
        assert isinstance(wire, bytes)
        return wire

    held, wire = _held(decode)
    figures["run_frontend"] = held / RUN_OUTPUT
    assert len(wire) > RUN_OUTPUT
    del wire
    for fd in fds:
        os.close(fd)
    gc.collect()

    # ---- a stream's events, one at a time ----
    def event() -> None:
        data = bytes(EVENT)  # the pipe's read
        item = messages.SpawnEvent(output=messages.Output(stream="STDOUT", data=data))
        channel.encode(messages.Event(call=1, item=item))

    total = 0
    for _ in range(EVENTS):
        held, _ = _allocated(event)
        total += held
    figures["stream_root"] = total / (EVENTS * EVENT)
    item = messages.SpawnEvent(output=messages.Output(stream="STDOUT", data=bytes(EVENT)))
    parts, event_fds = channel.encode(messages.Event(call=1, item=item))
    assert not event_fds
    whole = b"".join(bytes(p) for p in parts)

    def received() -> Any:
        message, _ = channel.decode(memoryview(whole), [], decoder)
        return convert.streamed(message.item)

    total = 0
    for _ in range(EVENTS):
        held, wire = _allocated(received)
        total += held
        assert len(wire) > EVENT
        del wire
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
