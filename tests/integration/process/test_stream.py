"""Streaming Spawn of a large output to a client with gRPC's default 4 MiB
receive limit: every byte of the kept window arrives in order, in Output
events of at most 1 MiB, and the Exited counts are exact."""

from __future__ import annotations

import subprocess

from hostcap_proto.v1 import common_pb2, process_pb2
from support.process import Client, request

MiB = 1024 * 1024
LINES = ["seq", "1", "5000000"]  # about 37 MiB, every line different


def expected_output() -> bytes:
    return subprocess.run(LINES, capture_output=True, check=True).stdout


async def stream(client: Client, output_bytes: int) -> tuple[list[process_pb2.SpawnEvent], bytes]:
    events = [
        e async for e in client.stub.Spawn(request(LINES, limits={"output_bytes": output_bytes}))
    ]
    outputs = [e.output for e in events if e.WhichOneof("event") == "output"]
    assert {o.stream for o in outputs} == {common_pb2.STDOUT}
    assert max(len(o.data) for o in outputs) <= MiB
    return events, b"".join(o.data for o in outputs)


async def test_a_large_output_within_the_window_arrives_whole(client: Client) -> None:
    expected = expected_output()
    assert len(expected) > 32 * MiB  # more than the live head: the tail is sent at the end

    events, data = await stream(client, 64 * MiB)

    assert data == expected
    exited = events[-1].exited
    assert common_pb2.Outcome.Name(exited.outcome) == "EXITED"
    assert (exited.stdout.total_bytes, exited.stdout.kept_bytes) == (len(expected), len(expected))
    assert exited.stdout.dropped_bytes == 0


async def test_a_large_output_beyond_the_window_keeps_head_and_tail(client: Client) -> None:
    expected = expected_output()
    window = 8 * MiB
    dropped = len(expected) - window

    events, data = await stream(client, window)

    marker = f"\n[... {dropped} bytes dropped by hostcapd ...]\n".encode()
    assert data == expected[: window // 2] + marker + expected[-window // 2 :]
    exited = events[-1].exited
    assert common_pb2.Outcome.Name(exited.outcome) == "EXITED"
    assert (exited.stdout.total_bytes, exited.stdout.kept_bytes) == (len(expected), window)
    assert exited.stdout.dropped_bytes == dropped
