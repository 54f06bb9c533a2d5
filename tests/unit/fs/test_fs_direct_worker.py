"""The fs worker's end of the front-end's read link (decision 0034):
`hostcapd.fs.direct_worker.DirectServer` over real SOCK_SEQPACKET pairs
and real file operations beneath temp roots, the test playing the
front-end (hostile, where it says) and the root.

The worker's confinement (identity, landlock) is the worker process's
tests'; here: what it takes from a front-end, and the order of a refusal's
report and its answer.
"""

from __future__ import annotations

import array
import os
import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass

import msgspec
import pytest
from fs_worker_support import Roots
from hostcapd.fs import direct
from hostcapd.fs.direct_worker import DirectServer
from hostcapd.fs.ops import FsOperations
from hostcapd.fs.policy import PathPolicy
from hostcapd.fs.scope import FsScope, RootSpec

CEILING = 1 << 20


@dataclass
class Ends:
    server: DirectServer
    frontend: socket.socket
    root: socket.socket

    def ask(self, datagram: bytes, fds: list[int] | None = None) -> None:
        fds = fds or []
        rights = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds).tobytes())]
        self.frontend.sendmsg([datagram], rights if fds else [])

    def answer(self) -> tuple[direct.Answer, bytes]:
        header, data = direct.split(self.frontend.recv(direct.MAX_ANSWER))
        return direct.ANSWERS.decode(header), bytes(data)

    def report(self) -> direct.Report:
        header, _ = direct.split(self.root.recv(1 << 16))
        return direct.REPORTS.decode(header)


@pytest.fixture
def ends(roots: Roots) -> Iterator[Ends]:
    (roots.ws / "a.txt").write_bytes(b"hello\n")
    (roots.ws / ".env").write_bytes(b"TOKEN=x\n")
    (roots.ws / "big.bin").write_bytes(os.urandom(300 << 10))
    fds = [os.open(p, os.O_PATH | os.O_DIRECTORY) for p in (roots.ws, roots.ref)]
    operations = FsOperations(
        FsScope((RootSpec(str(roots.ws), False), RootSpec(str(roots.ref), True))),
        fds,
        PathPolicy((".git/hooks/**",), ("**/.env",)),
        follow_symlinks=True,
        file_mode=0o644,
        dir_mode=0o755,
        umask=0o022,
    )
    front, worker = direct.pair()
    root, reports = direct.pair()
    for s in (front, root):
        s.settimeout(5)
    yield Ends(DirectServer(worker, reports, operations, CEILING, 1), front, root)
    for s in (front, worker, root, reports):
        s.close()
    for fd in fds:
        os.close(fd)


def _read(**fields: object) -> bytes:
    return direct.encode(msgspec.convert({"id": 7, **fields}, direct.Read))


def test_a_read_is_answered_with_its_content(ends: Ends) -> None:
    ends.ask(_read(path="a.txt"))
    ends.server.serve_one()
    answer, data = ends.answer()
    assert isinstance(answer, direct.Content) and answer.id == 7
    assert (data, answer.media_type) == (b"hello\n", "text/plain")
    assert answer.path.endswith("/ws/a.txt")
    ends.server.flush()
    assert ends.report() == direct.Counted(results={"OK": 1})


@pytest.mark.parametrize(
    ("fields", "reason"),
    [
        ({"path": "a.txt", "max_bytes": CEILING + 1}, "LIMIT_INVALID"),
        ({"path": "a.txt", "max_bytes": 0}, "LIMIT_INVALID"),
        ({"path": "a.txt", "offset": 1 << 63}, "INVALID_ARGUMENT"),
        ({"path": "../../../etc/passwd"}, "PATH_ESCAPES_ROOT"),
        ({"path": "/etc/passwd"}, "PATH_ESCAPES_ROOT"),
        ({"path": ".env"}, "SECRET_PATH"),
        ({"path": "missing.txt"}, "NOT_FOUND"),
    ],
)
def test_what_the_root_refused_the_worker_refuses(
    ends: Ends, fields: dict[str, object], reason: str
) -> None:
    ends.ask(_read(**fields))
    thread = threading.Thread(target=ends.server.serve_one)
    thread.start()
    if reason in direct.AUDITED_READ_REASONS:
        # The report comes first, and the answer only once it is acknowledged.
        denied = ends.report()
        assert isinstance(denied, direct.Denied) and denied.reason == reason
        assert denied.path == fields["path"]
        ends.frontend.settimeout(0.3)
        with pytest.raises(TimeoutError):
            ends.frontend.recv(direct.MAX_ANSWER)
        ends.frontend.settimeout(5)
        ends.root.send(direct.encode(direct.Acked(seq=denied.seq)))
    thread.join(10)
    answer, _ = ends.answer()
    assert isinstance(answer, direct.Refused) and answer.reason == reason


@pytest.mark.parametrize(
    "datagram",
    [
        direct.encode(direct.Read(id=1, path="a.txt"))[:-2],  # cut
        b"\x00\x00\x00\x02\x81\xa1",  # a header that is no struct of ours
        direct.encode(direct.Read(id=1, path="a.txt")) + b"data",  # bytes after it
        (lambda body: len(body).to_bytes(4, "big") + body)(
            msgspec.msgpack.encode({"op": "read", "id": 1, "path": "a.txt", "uid": 0})
        ),
        (lambda body: len(body).to_bytes(4, "big") + body)(
            msgspec.msgpack.encode({"op": "read", "id": 0, "path": "a.txt"})
        ),
        (lambda body: len(body).to_bytes(4, "big") + body)(
            msgspec.msgpack.encode({"op": "read", "id": 1, "path": "a" * (direct.MAX_PATH + 1)})
        ),
        b"x" * (direct.MAX_REQUEST + 1),  # longer than a request may be
        b"",  # empty (not the end of the link)
    ],
    ids=["cut", "not-ours", "data", "unknown-field", "id-0", "long-path", "too-long", "empty"],
)
def test_a_datagram_that_is_none_of_ours_is_reported_and_ends_the_link(
    ends: Ends, datagram: bytes
) -> None:
    ends.ask(datagram)
    ends.ask(_read(path="a.txt"))  # queued behind it: never answered
    ends.server.serve_one()
    report = ends.report()
    assert isinstance(report, direct.Malformed) and report.generation == 1
    assert not ends.server.open


def test_an_fd_passed_with_a_read_is_refused_and_never_kept(ends: Ends) -> None:
    r, w = os.pipe()
    before = set(os.listdir("/proc/self/fd"))
    ends.ask(_read(path="a.txt"), [r])
    os.close(r)
    os.close(w)
    ends.server.serve_one()
    assert isinstance(ends.report(), direct.Malformed)
    assert set(os.listdir("/proc/self/fd")) <= before


def test_a_read_larger_than_the_link_carries_is_answered_relay(ends: Ends) -> None:
    ends.server.max_data = 256 << 10  # as with a small send buffer
    ends.ask(_read(path="big.bin"))
    ends.server.serve_one()
    answer, data = ends.answer()
    assert answer == direct.Relay(id=7) and not data
    ends.ask(_read(path="big.bin", max_bytes=100))  # a part of it fits
    ends.server.serve_one()
    answer, data = ends.answer()
    assert isinstance(answer, direct.Content) and len(data) == 100


def test_an_answer_the_socket_cannot_carry_becomes_relay(roots: Roots, ends: Ends) -> None:
    small, worker = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    worker.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 64 << 10)
    server = DirectServer(worker, ends.server.reports, ends.server.operations, CEILING, 1)
    server.max_data = CEILING  # as if the bound were wrong: the send says EMSGSIZE
    small.send(_read(path="big.bin"))
    server.serve_one()
    header, _ = direct.split(small.recv(direct.MAX_ANSWER))
    assert direct.ANSWERS.decode(header) == direct.Relay(id=7)
    small.close()
    worker.close()


def test_a_probe_is_answered_in_order(ends: Ends) -> None:
    ends.ask(_read(path="a.txt"))
    ends.ask(direct.encode(direct.Sync(nonce=99)))
    ends.server.serve_one()
    ends.server.serve_one()
    assert isinstance(ends.answer()[0], direct.Content)
    assert ends.answer()[0] == direct.Synced(nonce=99)


def test_the_front_ends_end_closed_ends_the_link_without_a_report(ends: Ends) -> None:
    ends.frontend.close()
    ends.server.serve_one()
    assert not ends.server.open
    ends.root.settimeout(0.2)
    with pytest.raises(TimeoutError):
        ends.root.recv(1 << 16)


def test_a_forked_child_looks_its_fds_up_in_its_own_table() -> None:
    """The /proc/self/fd the lookups hold (`beneath._proc_fd_dir`) is the
    opener's: a child forked after it was opened opens its own, so an fd
    only the child has is found (in the parent's table it is not)."""
    from hostcapd.fs import beneath

    beneath._proc_fd_dir()  # held by this process now
    done, told = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: an fd number the parent has free
        try:
            fd = os.open("/", os.O_PATH)
            os.write(
                told, b"1" if os.readlink(str(fd), dir_fd=beneath._proc_fd_dir()) == "/" else b"0"
            )
        finally:
            os._exit(0)
    os.close(told)
    try:
        assert os.read(done, 1) == b"1"
    finally:
        os.close(done)
        os.waitpid(pid, 0)
