"""The front-end channel's framing and messages: what a hostile front-end
could send is refused with a ChannelError, and nothing else gets through."""

from __future__ import annotations

import asyncio
import fcntl
import os
import resource
import socket
import struct

import msgspec
import pytest
from hostcap_proto.v1 import process_pb2
from hostcapd import framing
from hostcapd.bridge import channel, messages
from hostcapd.frontend.convert import request_of, request_proto


def _roundtrip(model: messages.Message, payload: bytes = b"") -> tuple[object, bytes]:
    a, b = channel.socketpair()
    try:
        buffers, fds = channel.encode(model, payload)
        a.sendmsg(
            buffers,
            [(socket.SOL_SOCKET, socket.SCM_RIGHTS, struct.pack("i" * len(fds), *fds))]
            if fds
            else [],
        )
        for fd in fds:
            os.close(fd)
        data, ancdata, _, _ = b.recvmsg(channel.INLINE_PAYLOAD + 64, 64)
        got = [fd for _, _, d in ancdata for fd in struct.unpack("i" * (len(d) // 4), d)]
        return channel.decode(memoryview(data), got, messages.FROM_FRONTEND["tenant"])
    finally:
        a.close()
        b.close()


def _spawn(**fields: object) -> messages.Call:
    return messages.Call(call=1, request=messages.SpawnCall(argv=["echo", "hi"], **fields))  # type: ignore[arg-type]


def test_a_call_round_trips_with_inline_and_memfd_payloads() -> None:
    for size in (0, 10, channel.INLINE_PAYLOAD + 1):
        data = os.urandom(size)
        message, payload = _roundtrip(_spawn(payload=bool(size)), data)
        assert message == _spawn(payload=bool(size))
        assert payload == data


def test_the_largest_output_chunk_travels_inline() -> None:
    # A call's output is passed on in whole reads of the spawn's pipe: each
    # one in a memfd (create, write, read back) made row 3 take 1.7x the
    # in-process time, against 1.3x inline. Its bytes are the payload,
    # gathered by sendmsg after the header: never copied into it.
    from hostcapd.process.output import OUTPUT_CHUNK
    from hostcapd.process.spawn import READ_CHUNK

    data = b"x" * max(READ_CHUNK, OUTPUT_CHUNK)
    buffers, fds = channel.encode(messages.Chunk(call=2**31, stream=1, keep=2**40), data)
    assert fds == []
    assert buffers[-1] is data
    message, payload = channel.decode(
        memoryview(b"".join(bytes(b) for b in buffers)), [], messages.TO_FRONTEND
    )
    assert message == messages.Chunk(call=2**31, stream=1, keep=2**40)
    assert payload == data


def test_a_payload_in_pieces_arrives_whole_inline_and_in_a_memfd() -> None:
    for size in (10, channel.INLINE_PAYLOAD + 1):
        pieces: list[bytes | bytearray | memoryview] = [
            b"head",
            bytearray(size),
            memoryview(b"tail"),
        ]
        buffers, fds = channel.encode(messages.End(call=3), pieces)
        message, payload = channel.decode(
            memoryview(b"".join(bytes(b) for b in buffers)), fds, messages.TO_FRONTEND
        )
        assert message == messages.End(call=3)
        assert payload == b"head" + bytes(size) + b"tail"


def test_the_typed_call_carries_the_whole_request() -> None:
    wire = process_pb2.SpawnRequest(
        argv=["ls", "-l"], cwd="sub", env={"A": "1"}, stdin=b"in", request_id="r", labels={"k": "v"}
    )
    wire.limits.wall_seconds = 2.5
    wire.limits.pids = 7
    model, payload = request_of(messages.RunCall, wire)
    assert payload == b"in"
    assert request_proto(model, payload) == wire
    bare = process_pb2.SpawnRequest(argv=["true"])
    model, payload = request_of(messages.SpawnCall, bare)
    built = request_proto(model, payload)
    assert built == bare and not built.HasField("stdin") and not built.HasField("limits")


def test_infinity_and_nan_reach_the_root_side_as_such() -> None:
    """A limit of inf must arrive to be refused there, not turn into unset."""
    limits = messages.Limits(wall_seconds=float("inf"), cpu_seconds=float("nan"))
    message, _ = _roundtrip(_spawn(limits=limits))
    got = message.request.limits  # type: ignore[attr-defined]
    assert got.wall_seconds == float("inf") and got.cpu_seconds != got.cpu_seconds


def msgpack(value: object) -> bytes:
    return msgspec.msgpack.encode(value)


def _spawn_call(**request: object) -> bytes:
    """A Spawn call's header as a front-end could write it, with `request`'s
    fields beside the method and argv (which it may replace)."""
    return msgpack(
        {
            "op": "call",
            "call": 1,
            "request": {"method": "ProcessService.Spawn", "argv": ["id"], **request},
        }
    )


def _raw(header: bytes, payload: bytes = b"", fds: list[int] | None = None) -> None:
    data = struct.pack("=IQ", len(header), 0) + header + payload
    channel.decode(memoryview(data), fds or [], messages.FROM_FRONTEND["tenant"])


@pytest.mark.parametrize(
    ("header", "why"),
    [
        # fields a front-end has no say in: the root side derives them
        (_spawn_call(tenant="other"), "tenant"),
        (_spawn_call(uid=0), "uid"),
        (_spawn_call(roots=["/"]), "roots"),
        (_spawn_call(limits={"landlock": False}), "landlock"),
        # wrong types and ranges
        (_spawn_call(argv="id"), "argv"),
        (_spawn_call(limits={"pids": -1}), "pids"),
        (_spawn_call(limits={"memory_bytes": True}), "memory_bytes"),
        (msgpack({"op": "call", "call": 0, "request": {"method": "ProcessService.List"}}), "call"),
        # unknown methods and kinds
        (msgpack({"op": "call", "call": 1, "request": {"method": "AdminService.Kill"}}), "method"),
        (msgpack({"op": "exec", "argv": ["id"]}), "op"),
        (msgpack({"op": "hello", "tenant": "x"}), "op"),
        (b"\xc1", "not msgpack"),
        (
            msgpack(
                {
                    "op": "call",
                    "call": 1,
                    "request": {
                        "method": "ProcessService.Signal",
                        "spawn_id": "a",
                        "pid": 3,
                        "signal": 9,
                    },
                }
            ),
            "one target",
        ),
    ],
)
def test_a_message_no_front_end_sends_is_refused(header: bytes, why: str) -> None:
    with pytest.raises(channel.ChannelError):
        _raw(header)


def test_a_datagram_with_an_fd_it_has_no_use_for_is_refused_and_the_fd_closed() -> None:
    r, w = os.pipe()
    os.close(w)
    with pytest.raises(channel.ChannelError, match="fd"):
        _raw(
            msgpack({"op": "call", "call": 1, "request": {"method": "ProcessService.List"}}),
            fds=[r],
        )
    with pytest.raises(OSError):
        os.fstat(r)


def test_truncated_prefix_and_header_are_refused() -> None:
    with pytest.raises(channel.ChannelError):
        channel.decode(memoryview(b"\x01\x00"), [], messages.FROM_FRONTEND["tenant"])
    with pytest.raises(channel.ChannelError):
        channel.decode(
            memoryview(struct.pack("=IQ", 500, 0) + b"{}"), [], messages.FROM_FRONTEND["tenant"]
        )


@pytest.mark.parametrize("reads", [channel.BURST_READS, 1])
async def test_the_link_delivers_in_order_and_reports_errors_without_closing(reads: int) -> None:
    a, b = channel.socketpair()
    got: list[object] = []
    errors: list[str] = []
    closed = asyncio.Event()
    link = channel.Link(
        b,
        messages.FROM_FRONTEND["tenant"],
        lambda m, p: got.append((m, p)),
        lambda e: errors.append(str(e)),
        closed.set,
        reads=reads,
    )
    sender = channel.Link(a, messages.TO_FRONTEND, lambda m, p: None, lambda e: None, lambda: None)
    for n in range(1, 50):
        sender.send(messages.Ack(call=n), b"x" * n)
    a.send(struct.pack("=IQ", 1, 0) + b"\x80")  # a bad one (an empty map) between good ones
    sender.send(messages.Cancel(call=7))
    for _ in range(100):
        if len(got) == 50:
            break
        await asyncio.sleep(0.01)
    assert [m.call for m, _ in got] == [*range(1, 50), 7]  # type: ignore[attr-defined]
    assert got[3][1] == b"xxxx"
    assert len(errors) == 1 and not link.closed
    sender.close()
    await asyncio.wait_for(closed.wait(), 2)


async def test_a_link_reading_one_per_wake_up_reads_one_and_leaves_the_rest() -> None:
    """The one read finds its datagram: no read is spent finding nothing,
    and what is left waits for the next pass (the reader is level-triggered)."""
    a, b = channel.socketpair()
    got: list[int] = []
    link = channel.Link(
        b,
        messages.FROM_FRONTEND["tenant"],
        lambda m, p: got.append(m.call),
        lambda e: None,
        lambda: None,
        reads=1,
    )
    asyncio.get_running_loop().remove_reader(b.fileno())  # this test is the loop
    sender = channel.Link(a, messages.TO_FRONTEND, lambda m, p: None, lambda e: None, lambda: None)
    for n in (1, 2, 3):
        sender.send(messages.Ack(call=n))
    for expected in ([1], [1, 2], [1, 2, 3], [1, 2, 3]):
        link._readable()
        assert got == expected
    sender.close()
    link._readable()  # EOF
    assert link.closed


def test_a_header_too_large_for_a_datagram_travels_in_the_memfd() -> None:
    """10 MB of env is refused by the root side's rules, not by the framing."""
    big = _spawn(env={"HUGE": "x" * (10 << 20)}, payload=True)
    message, payload = _roundtrip(big, b"stdin")
    assert message == big and payload == b"stdin"


def test_a_uint64_limit_above_int64_reaches_the_root_side() -> None:
    """It is the root side's to refuse (LIMIT_INVALID), not a malformed call."""
    message, _ = _roundtrip(_spawn(limits=messages.Limits(memory_bytes=(1 << 64) - 1)))
    assert message.request.limits.memory_bytes == (1 << 64) - 1  # type: ignore[attr-defined]


# --- a memfd is checked before it is read ----------------------------------------------


def _memfd_message(fd: int, size: int, header: bytes, **options: object) -> tuple[object, object]:
    """Decode a memfd message announced as `size` bytes in `fd` (closed)."""
    prefix = struct.pack("=IQ", len(header), size)
    return channel.decode(  # type: ignore[call-overload, no-any-return]
        memoryview(prefix), [fd], messages.FROM_FRONTEND["tenant"], **options
    )


def _sealed(data: bytes, size: int | None = None) -> int:
    fd = os.memfd_create("test", os.MFD_ALLOW_SEALING)
    os.write(fd, data)
    if size is not None:
        os.ftruncate(fd, size)
    fcntl.fcntl(fd, fcntl.F_ADD_SEALS, framing.SEALS)
    return fd


_HEADER = _spawn_call()


def test_a_sparse_memfd_above_the_limit_is_refused_before_a_byte_is_read() -> None:
    fd = _sealed(_HEADER, 1 << 30)  # 1 GiB that costs its sender one page
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    with pytest.raises(channel.ChannelError, match="announces 1073741824 bytes, above its limit"):
        _memfd_message(fd, 1 << 30, _HEADER, limit=80 << 20)
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 64 << 10  # KiB
    with pytest.raises(OSError):
        os.fstat(fd)  # closed


@pytest.mark.parametrize("kind", ["pipe", "socket", "unsealed", "other size", "directory"])
def test_an_fd_that_is_not_a_sealed_memfd_of_its_size_is_a_channel_error(kind: str) -> None:
    """Not an OSError escaping (a pipe's pread is ESPIPE): a ChannelError,
    which the root side treats as a violation."""
    keep: list[object] = []
    if kind == "pipe":
        fd, w = os.pipe()
        os.write(w, _HEADER)
        keep.append(w)
    elif kind == "socket":
        a, b = socket.socketpair()
        b.send(_HEADER)
        keep.append(b)
        fd = a.detach()
    elif kind == "unsealed":
        fd = os.memfd_create("test")
        os.write(fd, _HEADER)
    elif kind == "directory":
        fd = os.open("/", os.O_RDONLY | os.O_DIRECTORY)
    else:
        fd = _sealed(_HEADER + b"more")
    with pytest.raises(channel.ChannelError, match="sealed memfd"):
        _memfd_message(fd, len(_HEADER), _HEADER)
    for w in keep:
        if isinstance(w, int):
            os.close(w)
        else:
            w.close()  # type: ignore[attr-defined]


def test_a_payload_not_admitted_is_never_read() -> None:
    payload = b"p" * 100
    fd = _sealed(_HEADER + payload)
    seen: list[int] = []

    def admit(message: object, size: int) -> bool:
        seen.append(size)
        return False

    message, got = _memfd_message(fd, len(_HEADER) + 100, _HEADER, admit=admit)
    assert got is None and seen == [100]
    assert message.request.argv == ["id"]  # type: ignore[attr-defined]


def test_the_memfd_a_sender_makes_is_sealed() -> None:
    _, fds = channel.encode(_spawn(payload=True), b"x" * channel.INLINE_PAYLOAD)
    (fd,) = fds
    try:
        assert fcntl.fcntl(fd, fcntl.F_GET_SEALS) & framing.SEALS == framing.SEALS
        with pytest.raises(PermissionError):
            os.pwrite(fd, b"y", 0)
    finally:
        os.close(fd)


def test_the_in_flight_budget_admits_up_to_its_bytes_and_takes_them_back() -> None:
    budget = channel.InFlight(100)
    assert budget.reserve(60) and budget.reserve(40)
    assert not budget.reserve(1)
    budget.release(40)
    assert not budget.reserve(41) and budget.reserve(40)
    assert budget.used == 100
