"""python -m bench.copies: how many whole copies of a spawn's output the
daemon holds at once on its way from the child's pipe to the front-end's
reply (issue 29, item 2: "passed along rather than copied whole several
times"; decision 0032).

Each figure is a ratio to the output itself, measured in the same process:
the rise of the process's resident high-water mark (VmHWM, reset through
/proc/self/clear_refs, so protobuf's C allocations count too) while one
step runs, over the bytes of output the step carries. 1.0 is one copy held
at once.

- `run_root`: a Run of 256 MiB of stdout on the root side: each 1 MiB read
  of the pipe counted and passed on as a `Chunk` datagram, then the reply
  (which carries no output). The root keeps none of it: the figure is about
  one read over the whole output;
- `run_frontend`: the front-end's side of the same Run: each chunk decoded
  and kept (head and tail, the tenant's cost now), then the wire bytes it
  gives gRPC (`convert.unary_reply`): the kept output and the reply;
- `stream_root`: one 1 MiB read on the root side, from the pipe's read to
  the datagram (an average over 64; Python's allocations, by tracemalloc,
  the read itself included: it is one copy);
- `stream_frontend`: the front-end's decoding of that datagram to the
  Spawn's Output event.

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


def measure() -> dict[str, float]:
    from hostcapd.bridge import channel, messages
    from hostcapd.frontend import convert
    from hostcapd.process.output import StreamBuffer, StreamTally

    figures: dict[str, float] = {}
    decoder = messages.TO_FRONTEND
    started = messages.Started(spawn_id="s", pid=2)
    exited = messages.Exited(outcome="EXITED", exit_code=0, message="exited 0")
    chunk = messages.Chunk(call=1, stream=1, keep=RUN_OUTPUT)

    # ---- a Run: the root passes each read on, and replies without output ----
    def root_run() -> list[bytes]:
        tally = StreamTally(RUN_OUTPUT)
        sent: list[bytes] = []
        for i in range(RUN_OUTPUT // EVENT):
            data = bytes([i % 251]) * EVENT  # the pipe's read
            tally.feed(len(data))
            buffers, fds = channel.encode(chunk, data)
            assert not fds
            if i < 2:
                sent.append(b"".join(bytes(b) for b in buffers))
            del data, buffers  # the socket has it: sendmsg copied it out
        answer = messages.RunResult(started=started, exited=exited)
        buffers, _ = channel.encode(messages.Reply(call=1, answer=answer))
        sent.append(b"".join(bytes(b) for b in buffers))
        return sent

    held, datagrams = _held(root_run)
    figures["run_root"] = held / RUN_OUTPUT
    reply = datagrams.pop()

    def frontend_run() -> bytes:
        kept = StreamBuffer(RUN_OUTPUT)
        for i in range(RUN_OUTPUT // EVENT):
            message, payload = channel.decode(
                memoryview(datagrams[i % len(datagrams)]), [], decoder
            )
            assert isinstance(message, messages.Chunk) and payload is not None
            kept.feed(payload)
            del payload
        message, _ = channel.decode(memoryview(reply), [], decoder)
        wire = convert.unary_reply(message.answer, {1: kept.parts()})
        assert isinstance(wire, bytes)
        return wire

    held, wire = _held(frontend_run)
    figures["run_frontend"] = held / RUN_OUTPUT
    assert len(wire) > RUN_OUTPUT
    del wire
    gc.collect()

    # ---- a stream's reads, one at a time ----
    def event() -> None:
        data = bytes(EVENT)  # the pipe's read
        channel.encode(chunk, data)

    total = 0
    for _ in range(EVENTS):
        held, _ = _allocated(event)
        total += held
    figures["stream_root"] = total / (EVENTS * EVENT)
    parts, event_fds = channel.encode(chunk, bytes(EVENT))
    assert not event_fds
    whole = b"".join(bytes(p) for p in parts)

    def received() -> Any:
        message, payload = channel.decode(memoryview(whole), [], decoder)
        head = StreamBuffer(RUN_OUTPUT, retain_head=False).feed(payload or b"")
        return convert.output_event(message.stream, head)

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
