"""The fs worker's messages: each crosses as itself, and a message that is
not one of ours (an unknown op, a field missing, extra or of the wrong type)
is a ProtocolError on receipt: the link is lost, nothing is acted on."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest
from hostcapd.applied import Applied
from hostcapd.fs import messages
from hostcapd.fs.messages import ProtocolError

REQUESTS: list[messages.Request] = [
    messages.OpenRead("a.txt"),
    messages.WritePrepare("a.txt", create_parents=True, exclusive=False, expected_sha256="0" * 64),
    messages.WritePrepare("b.txt", create_parents=False, exclusive=True),
    messages.WriteCommit(),
    messages.WriteAbort(),
    messages.ListDirectory("src", max_entries=100, depth=2, include_hidden=False),
    messages.Stat("a.txt"),
]
ANSWERS: list[messages.Answer] = [
    messages.Refused("PATH_ESCAPES_ROOT", "outside"),
    messages.Ready(42, [Applied("uid_drop", True, "uid 1000", True)]),
    messages.Opened("/srv/ws/a.txt", "a.txt", 6),
    messages.Prepared("/srv/ws/a.txt", 6, "1" * 64, "", created=False),
    messages.Done(),
    messages.Listing("/srv/ws", [messages.Entry("a.txt", "file", 6, 1.5, "")], truncated=False),
    messages.Statted("/srv/ws/a.txt", "file", 6, 0o644, 1.5, writable=True),
]


@pytest.mark.parametrize("request_", REQUESTS, ids=lambda r: type(r).__name__)
def test_every_request_crosses_as_itself(request_: messages.Request) -> None:
    assert messages.decode_request(messages.encode(request_)) == request_
    fields = msgspec.to_builtins(request_)
    assert messages.request_of(fields) == request_  # the fs service's dicts


@pytest.mark.parametrize("answer", ANSWERS, ids=lambda a: type(a).__name__)
def test_every_answer_crosses_as_itself(answer: messages.Answer) -> None:
    assert messages.decode_answer(messages.encode(answer)) == answer


def _raw(value: Any) -> bytes:
    return msgspec.msgpack.encode(value)


@pytest.mark.parametrize(
    "wire",
    [
        _raw({"op": "exec", "argv": ["sh"]}),
        _raw({"op": "stat"}),
        _raw({"op": "stat", "path": b"a.txt"}),
        _raw({"op": "stat", "path": "a.txt", "follow": True}),
        _raw({"op": "list", "path": ".", "max_entries": "9", "depth": 1, "include_hidden": False}),
        _raw({"op": "write_prepare", "path": "a", "create_parents": 1, "exclusive": False}),
        _raw({"path": "a.txt"}),
        b"\xc1",
        b'{"op": "stat", "path": "a.txt"}',  # the old JSON frames
    ],
    ids=[
        "unknown op",
        "missing path",
        "bytes path",
        "a field too many",
        "str count",
        "int flag",
        "no op",
        "not msgpack",
        "json",
    ],
)
def test_a_request_that_is_not_one_of_ours_is_a_protocol_error(wire: bytes) -> None:
    with pytest.raises(ProtocolError):
        messages.decode_request(wire)


@pytest.mark.parametrize(
    "wire",
    [
        _raw({"op": "refused", "reason": "ROOT_PLEASE", "message": "x"}),
        _raw({"op": "opened", "path": "/a", "name": "a", "size": 1, "fd": 3}),
        _raw(
            {
                "op": "ready",
                "pid": 1,
                "protections": [
                    {"name": "no_seccomp", "applied": True, "reason": "", "required": True}
                ],
            }
        ),
        _raw({"op": "stat", "path": "a.txt"}),  # a request, not an answer
    ],
    ids=["unknown reason", "a field too many", "unknown protection", "a request"],
)
def test_an_answer_that_is_not_one_of_ours_is_a_protocol_error(wire: bytes) -> None:
    with pytest.raises(ProtocolError):
        messages.decode_answer(wire)


def test_the_fs_services_request_must_be_one_of_ours() -> None:
    with pytest.raises(ProtocolError):
        messages.request_of({"op": "stat", "path": "a", "uid": 0})


def test_an_answer_with_its_fd_comes_whole_in_the_daemons_first_read() -> None:
    """A read's `Opened` and its fd are one sendmsg: the daemon's first
    recvmsg (of HEAD_READ bytes) holds the whole frame and the fd, so it
    does not wake once for the head and again for the header."""
    import os
    import socket

    from hostcapd import framing
    from hostcapd.fs.protocol import HEAD_READ, make_link, write_frame

    daemon, worker = make_link()
    read_end, write_end = os.pipe()
    try:
        answer = messages.Opened("/srv/ws/" + "d/" * 200 + "a.txt", "a.txt", 6)
        write_frame(worker, answer, fd=read_end)
        chunk, ancillary, flags, _ = daemon.recvmsg(HEAD_READ, framing.ancillary_space(1))
        fds = framing.received_fds(ancillary)
        assert not flags & socket.MSG_CTRUNC
        assert len(fds) == 1
        os.close(fds[0])
        header_len, data_len = int.from_bytes(chunk[:4], "big"), int.from_bytes(chunk[4:8], "big")
        assert (len(chunk), data_len) == (8 + header_len, 0)
        assert messages.decode_answer(chunk[8:]) == answer
    finally:
        for fd in (read_end, write_end):
            os.close(fd)
        daemon.close()
        worker.close()
