"""Spawn's Output events and Run's result are wire bytes encoded by the
daemon itself, in pieces that reference the output (no message built per
chunk, the kept output not copied): a client decoding them with the
generated code must get exactly what the protobuf runtime would have sent."""

from __future__ import annotations

import pytest
from hostcap_proto.v1 import common_pb2, process_pb2
from hostcapd.frontend.process_service import OUTPUT_CHUNK, output_event, run_result
from hostcapd.process.output import StreamBuffer

# Either side of each size where the data's or the event's length prefix
# grows by a byte, and the largest event the daemon sends.
SIZES = [1, 123, 124, 127, 128, 16_378, 16_379, 16_383, 16_384, OUTPUT_CHUNK]
SIZES += [2_097_145, 2_097_146, 2_097_151, 2_097_152]


@pytest.mark.parametrize("stream", [common_pb2.STDOUT, common_pb2.STDERR])
@pytest.mark.parametrize("size", SIZES)
def test_an_output_event_is_the_bytes_protobuf_would_send(stream: int, size: int) -> None:
    data = bytes(range(256)) * (size // 256) + bytes(size % 256)
    expected = process_pb2.SpawnEvent(
        output=process_pb2.Output(stream=stream, data=data)  # type: ignore[arg-type]
    ).SerializeToString()

    wire = output_event(stream, data).SerializeToString()

    assert wire == expected
    event = process_pb2.SpawnEvent.FromString(wire)
    assert event.WhichOneof("event") == "output"
    assert (event.output.stream, event.output.data) == (stream, data)


def test_a_slice_of_the_tail_encodes_like_its_bytes() -> None:
    tail = memoryview(b"0123456789" * 1000)
    assert (
        output_event(common_pb2.STDERR, tail[10:5010]).SerializeToString()
        == output_event(common_pb2.STDERR, bytes(tail[10:5010])).SerializeToString()
    )


def test_an_output_event_passes_its_chunk_along_uncopied() -> None:
    data = bytes(OUTPUT_CHUNK)
    assert output_event(common_pb2.STDOUT, data)[-1] is data


@pytest.mark.parametrize("keep", [0, 10, 4096])
@pytest.mark.parametrize("sizes", [(0, 0), (5, 0), (0, 7), (3000, 9000), (200_000, 1)])
@pytest.mark.parametrize("dry", [False, True])
def test_a_run_result_is_the_bytes_protobuf_would_send(
    keep: int, sizes: tuple[int, int], dry: bool
) -> None:
    buffers = []
    for size in sizes:
        buf = StreamBuffer(keep)
        for start in range(0, size, 1000):
            buf.feed(bytes(range(256)) * 4 * (min(1000, size - start) // 1024 + 1))
        buffers.append(buf)
    started = process_pb2.Started(spawn_id="s1", pid=7)
    exited = None if dry else process_pb2.Exited(exit_code=3, message="exited 3")
    expected = process_pb2.RunResult(
        started=started,
        stdout=buffers[0].result(),
        stderr=buffers[1].result(),
        exited=exited,
    ).SerializeToString()

    wire = run_result(started, buffers[0], buffers[1], exited)

    assert wire.SerializeToString() == expected
    parsed = process_pb2.RunResult.FromString(wire.SerializeToString())
    assert (parsed.stdout, parsed.stderr) == (buffers[0].result(), buffers[1].result())
