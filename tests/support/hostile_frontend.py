"""A hostile tenant front-end, for the attack tests.

    python -I hostile_frontend.py ATTACK TARGETS_JSON FD

The daemon starts it in place of `hostcapd.frontend.server` (a test sets
`FrontendProcess.command` and `FrontendProcess.stdout`, then kills the tenant's real
front-end, so the daemon's restart runs this one): the same user, the same
fds, the same channel bound to the same tenant. It takes the real
front-end's first steps (`hostcapd.frontend.server.confined`: the hello,
then the very confinement), binds and says Ready as a front-end does, then
runs one attack and writes what happened as one JSON line to stdout (the
test's pipe). It then waits for its channel to close.
"""

from __future__ import annotations

import array
import ctypes
import errno
import fcntl
import json
import os
import socket
import sys
from collections.abc import Callable
from typing import Any

import msgspec
from hostcapd import framing
from hostcapd.bridge import channel, messages
from hostcapd.frontend import convert
from hostcapd.frontend.server import confined
from hostcapd.process.output import StreamBuffer

libc = ctypes.CDLL(None, use_errno=True)
PTRACE_ATTACH = 16
CLONE_NEWUSER = 0x10000000
Result = dict[str, Any]


def _errno_of(action: Callable[[], object]) -> str:
    try:
        action()
    except OSError as error:
        return errno.errorcode.get(error.errno or 0, str(error.errno))
    return "OK"


def _libc(call: Callable[[], int]) -> str:
    if call() == 0:
        return "OK"
    return errno.errorcode.get(ctypes.get_errno(), "?")


class Channel:
    """The hostile end of the real channel, used blocking."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        sock.setblocking(True)
        sock.settimeout(20)

    def send(self, message: messages.Message, payload: bytes = b"") -> None:
        buffers, fds = channel.encode(message, payload)
        self.sock.sendmsg(buffers, framing.rights(fds))
        for fd in fds:
            os.close(fd)

    def send_fd(self, header: bytes, size: int, fd: int) -> None:
        """A message said to be in `fd` (a memfd of `size` bytes, the
        header its first `len(header)`), whatever `fd` really is."""
        prefix = len(header).to_bytes(4, "little") + size.to_bytes(8, "little")
        self.sock.sendmsg(
            [prefix], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [fd]).tobytes())]
        )

    def send_raw(self, header: bytes) -> None:
        self.sock.send(len(header).to_bytes(4, "little") + bytes(8) + header)

    def receive(self) -> tuple[Any, bytes] | None:
        """The next message, or None once the root side closed the channel."""
        try:
            data = self.sock.recv(channel.INLINE_PAYLOAD + 64)
        except (ConnectionError, TimeoutError):
            return None
        if not data:
            return None
        return channel.decode(memoryview(data), [], messages.TO_FRONTEND)

    def answer(self, call: int) -> list[Result]:
        """Everything the root side sent for `call` until its end (its
        output chunks kept, as the real front-end keeps them, and in the
        reply's wire bytes)."""
        seen: list[Result] = []
        kept: dict[int, StreamBuffer] = {}
        while True:
            got = self.receive()
            if got is None:
                seen.append({"op": "closed"})
                return seen
            message, payload = got
            if getattr(message, "call", None) != call:
                continue
            if isinstance(message, messages.Chunk):
                buf = kept.setdefault(message.stream, StreamBuffer(message.keep))
                buf.feed(payload or b"")
                self.send(messages.Ack(call=call))
                continue
            if isinstance(message, messages.Reply):
                # As the real front-end answers its client: the wire bytes.
                pieces = {stream: buf.parts() for stream, buf in kept.items()}
                payload = convert.serialize(convert.unary_reply(message.answer, pieces or None))
            seen.append({**msgspec.to_builtins(message), "payload": payload.hex()})
            if isinstance(message, messages.Event):
                self.send(messages.Ack(call=call))
                continue
            return seen


def report(result: Result) -> None:
    """One line for the test, naming this process (the root side may have
    killed and replaced it by the time the test reads the tenant's pid)."""
    print(json.dumps({**result, "pid": os.getpid()}), flush=True)


# --- the attacks ------------------------------------------------------------------


def forged_fields(link: Channel, targets: Result) -> Result:
    """A spawn order naming what only the root side decides. The root side
    cuts the channel and kills the sender: what it sent is reported first."""
    request = {"method": "ProcessService.Run", "argv": ["/usr/bin/id", "-u"], **targets["extra"]}
    link.send_raw(msgspec.msgpack.encode({"op": "call", "call": 1, "request": request}))
    report({"sent": request})
    return {"answer": link.answer(1)}


def spawn(link: Channel, targets: Result) -> Result:
    """A well-formed order, with whatever the test puts in it."""
    request = msgspec.convert(targets["request"], messages.RunCall)
    link.send(messages.Call(call=1, request=request))
    return {"answer": link.answer(1)}


def kernel(link: Channel, targets: Result) -> Result:
    """What the kernel refuses a confined front-end."""
    out: Result = {}
    out["read_audit"] = _errno_of(lambda: open(targets["audit"], "rb").close())
    out["append_audit"] = _errno_of(lambda: open(targets["audit"], "ab").close())
    out["read_config"] = _errno_of(lambda: open(targets["config"], "rb").close())
    for name, path in targets["sockets"].items():
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        out[f"connect_{name}"] = _errno_of(lambda s=s, path=path: s.connect(path))
        s.close()
    out["tcp_socket"] = _errno_of(lambda: socket.socket(socket.AF_INET, socket.SOCK_STREAM))
    for name, pid in targets["pids"].items():
        out[f"signal_{name}"] = _errno_of(lambda pid=pid: os.kill(pid, 0))
        out[f"ptrace_{name}"] = _libc(lambda pid=pid: libc.ptrace(PTRACE_ATTACH, pid, 0, 0))
        out[f"mem_{name}"] = _errno_of(lambda pid=pid: open(f"/proc/{pid}/mem", "rb").close())
    out["setuid_root"] = _errno_of(lambda: os.setuid(0))
    out["exec"] = _errno_of(lambda: os.execv("/usr/bin/true", ["true"]))
    out["userns"] = _libc(lambda: libc.unshare(CLONE_NEWUSER))
    # The fds it holds: its channel and its stdio, and nothing of the root side.
    sockets = []
    for fd in range(3, 1024):
        try:
            st = os.fstat(fd)
        except OSError:
            continue
        sockets.append([fd, oct(st.st_mode)])
    out["fds"] = sockets
    out["channel_fd"] = link.sock.fileno()
    out["read_link_fd"] = READ_LINK[0]
    return out


def inner(link: Channel, targets: Result) -> Result:
    """Another front-end's inner gRPC socket (decision 0033): by its abstract
    name (here, in this front-end's own network namespace), through the
    other's namespace, and a pathname padded to the one address length the
    filter allows connect() with. The control: an abstract socket of its own
    under that name, which it may reach."""
    out: Result = {}
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    out["abstract"] = _errno_of(lambda: s.connect("\0h"))
    s.close()
    victim = targets["victim_frontend"]
    out["open_netns"] = _errno_of(lambda: os.close(os.open(f"/proc/{victim}/ns/net", os.O_RDONLY)))
    out["setns"] = _libc(lambda: libc.setns(-1, 0x40000000))
    # sockaddr_un of the victim's socket path, with the allowed length (4):
    # the kernel reads two characters of it.
    path = targets["victim_socket"].encode()
    address = (1).to_bytes(2, "little") + path + bytes(108 - len(path))
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    out["padded_path"] = _libc(lambda: libc.connect(s.fileno(), address, 4))
    out["long_path"] = _errno_of(lambda: s.connect(targets["victim_socket"]))
    s.close()
    own = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    own.bind("\0h")
    own.listen()
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    out["own_abstract"] = _errno_of(lambda: s.connect("\0h"))
    s.close()
    own.close()
    return out


def _run_call(call: int) -> bytes:
    request = msgspec.msgpack.encode(
        {"op": "call", "call": call, "request": {"method": "ProcessService.Run", "argv": ["true"]}}
    )
    return request


def sparse_memfd(link: Channel, targets: Result) -> Result:
    """A Run call announced in a 1 GiB memfd that costs the sender nothing
    (sparse: one page written). The root side must refuse it by its size,
    without reading it: the test watches the root's RSS."""
    header = _run_call(1)
    fd = os.memfd_create("hostile", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    os.pwrite(fd, header, 0)
    os.ftruncate(fd, targets["size"])
    seals = fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_WRITE | fcntl.F_SEAL_SEAL
    fcntl.fcntl(fd, fcntl.F_ADD_SEALS, seals)
    link.send_fd(header, targets["size"], fd)
    os.close(fd)
    report({"sent": "sparse memfd"})
    return {"answer": link.answer(1)}


def not_a_memfd(link: Channel, targets: Result) -> Result:
    """A Run call whose memfd is a pipe (or a socket, or an unsealed memfd)
    of the announced size: reading it would block, or fail with ESPIPE, or
    change under the reader."""
    header = _run_call(1)
    kind = targets["kind"]
    keep: list[Any] = []
    if kind == "pipe":
        r, w = os.pipe()
        os.write(w, header)
        keep.append(w)
        fd = r
    elif kind == "socket":
        a, b = socket.socketpair()
        b.send(header)
        keep.append(b)
        fd = a.detach()
    else:  # unsealed: the sender may rewrite it after the root side checked it
        fd = os.memfd_create("hostile", os.MFD_CLOEXEC)
        os.write(fd, header)
    link.send_fd(header, len(header), fd)
    os.close(fd)
    report({"sent": kind})
    return {"answer": link.answer(1)}


def over_budget(link: Channel, targets: Result) -> Result:
    """Two Run calls with a large stdin at once: the second passes the
    tenant's in-flight budget while the first is running."""
    for call in (1, 2):
        request = messages.RunCall(argv=targets["argv"], payload=True)
        link.send(messages.Call(call=call, request=request), b"x" * targets["stdin"])
    second = link.answer(2)
    return {"first": link.answer(1), "second": second}


def _answers(link: socket.socket, wanted: set[int]) -> dict[int, Any]:
    """The worker's answers to the reads `wanted` (others skipped)."""
    from hostcapd.fs import direct

    got: dict[int, Any] = {}
    link.settimeout(20)
    while wanted - set(got):
        header, data = direct.split(link.recv(direct.MAX_ANSWER))
        answer = direct.ANSWERS.decode(header)
        if getattr(answer, "id", None) in wanted:
            got[answer.id] = {**msgspec.to_builtins(answer), "data": bytes(data).hex()}
    return got


def direct_reads(link: Channel, targets: Result) -> Result:
    """Reads sent to the tenant's fs worker on the front-end's read link
    (decision 0034), crafted: a path outside the roots and another tenant's
    file with a forged caller, a max_bytes past the tenant's ceiling, and a
    read of its own file (the control); then a datagram with an unknown
    field, which must be reported to the root as a violation."""
    from hostcapd.fs import direct

    read_link = socket.socket(fileno=READ_LINK[0])
    forged = {"uid": 0, "gid": 0, "pid": 1}
    reads = {
        1: {"path": "../../../../etc/shadow", "caller": forged},
        2: {"path": targets["victim_file"], "caller": forged},
        3: {"path": "own.txt", "max_bytes": 1 << 40},
        4: {"path": "own.txt", "offset": 1 << 63},
        5: {"path": "own.txt"},
    }
    for ident, fields in reads.items():
        read_link.send(direct.encode(msgspec.convert({"id": ident, **fields}, direct.Read)))
    out: Result = {"answers": _answers(read_link, set(reads))}
    report(out)
    # None of ours: an unknown field.
    body = msgspec.msgpack.encode({"op": "read", "id": 9, "path": "own.txt", "tenant": "victim"})
    read_link.send(len(body).to_bytes(4, "big") + body)
    return out


#: The read link's fd, when the daemon gave one (its second argument).
READ_LINK: list[int] = [-1]

ATTACKS: dict[str, Callable[[Channel, Result], Result]] = {
    "direct_reads": direct_reads,
    "over_budget": over_budget,
    "sparse_memfd": sparse_memfd,
    "not_a_memfd": not_a_memfd,
    "forged_fields": forged_fields,
    "spawn": spawn,
    "kernel": kernel,
    "inner": inner,
}


def main() -> int:
    attack, targets_json, fd = sys.argv[1], sys.argv[2], int(sys.argv[3])
    if len(sys.argv) > 4:
        READ_LINK[0] = int(sys.argv[4])
    targets = json.loads(targets_json)
    sock = socket.socket(fileno=fd)
    hello, protections, _ = confined(sock)  # exactly the front-end's confinement
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    os.umask(0o777 & ~hello.socket_mode)
    listener.bind(hello.bind_path)
    listener.listen()
    link = Channel(sock)
    link.send(messages.Ready(pid=os.getpid(), protections=protections))
    result = ATTACKS[attack](link, targets)
    result["protections"] = {p.name: p.applied for p in protections}
    report(result)
    sock.settimeout(None)
    while link.receive() is not None:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
