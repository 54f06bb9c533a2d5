"""Spawn's Output events are wire bytes encoded by the daemon itself (no
message built per chunk): a client decoding them with the generated code
must get exactly the event the protobuf runtime would have sent."""

from __future__ import annotations

import pytest
from hostcap_proto.v1 import common_pb2, process_pb2
from hostcapd.bridge import messages
from hostcapd.frontend.convert import output_event, to_proto, unary_reply
from hostcapd.process.output import OUTPUT_CHUNK

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

    wire = output_event(stream, data)

    assert wire == expected
    event = process_pb2.SpawnEvent.FromString(wire)
    assert event.WhichOneof("event") == "output"
    assert (event.output.stream, event.output.data) == (stream, data)


def test_a_slice_of_the_tail_encodes_like_its_bytes() -> None:
    tail = memoryview(b"0123456789" * 1000)
    assert output_event(common_pb2.STDERR, tail[10:5010]) == output_event(
        common_pb2.STDERR, bytes(tail[10:5010])
    )


@pytest.mark.parametrize(
    ("stdout", "stderr"), [(b"out", b""), (b"", b"err"), (b"o" * 200_000, b"e")]
)
def test_a_run_result_built_as_bytes_parses_as_the_message_would(
    stdout: bytes, stderr: bytes
) -> None:
    result = messages.RunResult(
        started=messages.Started(spawn_id="s1", pid=7),
        stdout=stdout,
        stderr=stderr,
        exited=messages.Exited(outcome="EXITED", exit_code=3, message="exited 3"),
    )
    wire = unary_reply(result)
    assert isinstance(wire, bytes)
    assert process_pb2.RunResult.FromString(wire) == to_proto(result)
