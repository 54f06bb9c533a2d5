"""The pool maker: a process of the spawner's own that makes its pooled
network and mount namespaces, and tears down the ones reaped children held,
at nice 19.

Making a namespace is kernel work the spawner's one thread waited through
(a network namespace 0.6 ms of CPU and 1.2 ms of wall time, a mount
namespace's new root 1.4 ms, the teardown of a reaped child's two 0.8 ms):
an order that arrived meanwhile waited for it (a quarter of the orders back
to back, 1.5-2 ms each). The spawner now only asks; the maker does the
work and sends each namespace's fd back, and it runs at nice 19, so the
spawn's own processes and the daemon's come first for the CPU. Not at
SCHED_IDLE: that measured ~10 % slower spawns than nice 19 back to back
(bench/README.md, 2026-12-06): its work holds the kernel's namespace locks
(the network namespaces' and rtnl, the mount namespaces' semaphore) which a
spawn's own set-up also takes, and an idle-class holder waits longest for
a CPU. A namespace still serves one spawn only; where the
maker is gone (or was never started: the tests' spawners) the spawner makes
them itself, as before.

    maker = PoolMaker.start(close_in_child=[sock_fd])  # forked, before any child
    maker.release(fds)           # then close ours: the maker's are the last
    maker.ask([("n", "", ()), ("m", key, mounts)])  # one message
    for kind, key, fd, error, taken, template in maker.replies(): ...

What is asked at one time goes in one message (which may carry fds to
close as well), and the maker answers all of its asks in one reply: each
message is a wake-up of the other process (a spawn's refill was five
messages, a release and two asks and their two replies; now three). A
profile's mount steps are sent with its first ask only (and again if they
change).

A mount namespace is a copy of its profile's template (spawner/mntns.py),
made by the maker's one thread itself: the maker holds the templates and
sends each new one to the spawner with the first copy made of it (a spawn
that finds the pool empty copies it in its own set-up). The namespaces
handed back are closed once no ask waits: a mount namespace's teardown
waits 1-2 ms for RCU, which delayed the next one made.
"""

from __future__ import annotations

import array
import contextlib
import mmap
import os
import select
import signal
import socket
import time
from collections import deque
from collections.abc import Iterator, Sequence

import msgspec
import prctl

from hostcapd import childsetup, framing
from hostcapd.spawner import netns
from hostcapd.spawner.mntns import Templates

#: ("n" network | "m" mount, profile key, the mount steps: empty for a
#: key's steps as last sent)
_Ask = tuple[str, str, list[childsetup.Mount]]
#: (kind, profile key, why it failed: "" when the fd came with it, when the
#: host trees a mount namespace shows were taken: its template's making,
#: time.monotonic(), which the two processes share; whether the template it
#: was copied from came too, after it)
_Reply = tuple[str, str, str, float, bool]
#: One message: what is asked (the fds beside it: namespaces to close).
_asks = msgspec.msgpack.Decoder(list[_Ask])
#: One reply: each ask's, in the order asked (their fds beside it, in order).
_replies = msgspec.msgpack.Decoder(list[_Reply])
_MAX_MESSAGE = 1 << 20
#: A reply's largest size (its why-nots are short messages).
_MAX_REPLY = 1 << 16
#: A message hands over at most this many fds.
MAX_HANDED = _MAX_FDS = 64
#: At most this many asks go in one message (a reply's fds: two each).
MAX_ASKS = 8
#: Namespaces handed over are closed once no ask waits (their teardown, a
#: mount namespace's 1-2 ms of wall time waiting for RCU, would delay the
#: next namespace made), but no more than this many wait for it.
_MAX_CLOSING = 2 * _MAX_FDS
#: The maker's scheduling: (policy, nice); see above.
SCHEDULING = (os.SCHED_OTHER, 19)


def _receive(
    sock: socket.socket, buffer: mmap.mmap | bytearray, max_fds: int
) -> tuple[memoryview, list[int], bool]:
    """One message into `buffer`, kept for the next (socket.recv_fds takes a
    new one of its full size each time: an mmap and munmap of 1 MiB per
    message): (its bytes, the fds that came with it, whether it was cut)."""
    size, ancillary, flags, _ = sock.recvmsg_into([buffer], socket.CMSG_SPACE(max_fds * 4))
    fds = array.array("i")
    for level, kind, data in ancillary:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(data[: len(data) - len(data) % fds.itemsize])
    return memoryview(buffer)[:size], list(fds), bool(flags & framing.MSG_TRUNC)


class PoolMaker:
    """The spawner's end of its pool maker."""

    def __init__(self, sock: socket.socket, pid: int) -> None:
        self.sock = sock
        self.pid = pid
        self._buffer = bytearray(_MAX_REPLY)
        #: profile key -> the mount steps last sent for it (the maker keeps them)
        self._told: dict[str, tuple[childsetup.Mount, ...]] = {}

    @classmethod
    def start(cls, close_in_child: Sequence[int] = ()) -> PoolMaker | None:
        """Fork the maker (the caller is single-threaded and has no children
        yet); None if it cannot be. `close_in_child`: fds the maker must not
        hold (the daemon's channel)."""
        try:
            ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        except OSError:
            return None
        parent = os.getpid()
        try:
            pid = os.fork()
        except OSError:
            ours.close()
            theirs.close()
            return None
        if pid == 0:  # pragma: no cover (the maker's own process)
            code = 1
            try:
                ours.close()
                for fd in close_in_child:
                    os.close(fd)
                code = _serve(theirs, parent)
            finally:
                os._exit(code)
        theirs.close()
        ours.setblocking(False)
        return cls(ours, pid)

    def ask(
        self,
        asks: Sequence[tuple[str, str, Sequence[childsetup.Mount]]],
        release: Sequence[int] = (),
    ) -> bool:
        """Ask for namespaces, one message: ("n", "", ()) a network namespace,
        loopback up; ("m", key, mounts) a mount namespace with `key`'s new
        root. `release`: references to hand over with it (see `release`).
        False if it could not be sent (the maker is starved or gone): the
        caller makes them itself, and the fds stay its last."""
        wire: list[_Ask] = []
        told: dict[str, tuple[childsetup.Mount, ...]] = {}
        for kind, key, mounts in asks:
            steps = tuple(mounts)
            known = self._told.get(key) == steps or told.get(key) == steps
            wire.append((kind, key, [] if kind != "m" or known else list(steps)))
            if kind == "m":
                told[key] = steps
        try:
            data = msgspec.msgpack.encode(wire)
            if release:
                socket.send_fds(self.sock, [data], list(release))
            else:
                self.sock.send(data)
        except OSError:
            return False  # full (it is starved) or gone: the caller does it itself
        self._told.update(told)
        return True

    def release(self, fds: Sequence[int]) -> None:
        """Hand over references to `fds`: the maker closes them, so once the
        caller has closed its own, the namespaces' teardown is the maker's
        work. Those that could not be sent stay the caller's last."""
        for at in range(0, len(fds), _MAX_FDS):
            if not self.ask([], fds[at : at + _MAX_FDS]):
                return

    def replies(self) -> Iterator[tuple[str, str, int, str, float, int]]:
        """What the maker made since: (kind, key, fd or -1, why not, when
        its host trees were taken, the template a mount namespace was copied
        from or -1: sent with the first copy of each). Ends when there is
        nothing more to read now; raises EOFError once the maker is gone."""
        while True:
            try:
                data, fds, cut = _receive(self.sock, self._buffer, 2 * MAX_ASKS)
            except BlockingIOError:
                return
            except OSError as gone:
                raise EOFError(str(gone)) from None
            if not data:
                for fd in fds:
                    os.close(fd)
                raise EOFError("the pool maker is gone")
            try:
                if cut:
                    raise msgspec.DecodeError("cut")
                replies = _replies.decode(data)
            except msgspec.DecodeError:
                replies = [("?", "", "a malformed reply", 0.0, False)]
            for kind, key, why, taken, with_template in replies:
                fd = fds.pop(0) if fds and not why else -1
                template = fds.pop(0) if fds and with_template else -1
                yield kind, key, fd, why, taken, template
            for extra in fds:
                os.close(extra)

    def close(self) -> None:
        self.sock.close()
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, signal.SIGKILL)


def _serve(sock: socket.socket, parent: int) -> int:  # pragma: no cover (in the maker)
    """The maker's loop: make what is asked, send it back, until the spawner
    hangs up (or dies: PR_SET_PDEATHSIG)."""
    prctl.set_pdeathsig(signal.SIGKILL)
    if os.getppid() != parent:
        return 1
    prctl.set_name("hostcapd-pools")
    with contextlib.suppress(OSError):
        policy, nice = SCHEDULING
        os.sched_setscheduler(0, policy, os.sched_param(0))
        os.setpriority(os.PRIO_PROCESS, 0, nice)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    pool = netns.NetnsPool(size=1)
    templates = Templates(here=True)
    sent: dict[str, float] = {}  # key -> the making of the template last sent
    known: dict[str, list[childsetup.Mount]] = {}  # key -> its mount steps, as last sent
    sock.setblocking(True)
    asks = select.poll()
    asks.register(sock, select.POLLIN)
    buffer = mmap.mmap(-1, _MAX_MESSAGE)  # its pages taken as written
    #: Namespaces handed over, to close (their teardown) when no ask waits.
    closing: deque[int] = deque()
    while True:
        if closing and (len(closing) > _MAX_CLOSING or not asks.poll(0)):
            os.close(closing.popleft())  # the last reference: the teardown runs here
            continue
        wait = templates.next_expiry()
        if wait is not None and not asks.poll(wait * 1000 + 1):
            templates.expire()  # unused since: the host trees it held are let go
            continue
        data, fds, cut = _receive(sock, buffer, _MAX_FDS)
        if not data:
            return 0
        closing.extend(fds)  # handed over: closed when no ask waits
        try:
            if cut:
                raise msgspec.DecodeError("cut")
            wanted = _asks.decode(data)[:MAX_ASKS]
        except msgspec.DecodeError:
            wanted = [("?", "", [])]
        replies: list[_Reply] = []
        out: list[int] = []  # the reply's fds, in order
        made_here: list[int] = []  # those of them closed once sent (not templates)
        try:
            for kind, key, steps in wanted:
                made, template, reply = _make(kind, key, steps, pool, templates, known, sent)
                replies.append(reply)
                out.extend(fd for fd in (made, template) if fd >= 0)
                if made >= 0:
                    made_here.append(made)
            if replies:
                answer = msgspec.msgpack.encode(replies)
                if out:
                    socket.send_fds(sock, [answer], out)
                else:
                    sock.send(answer)
        except OSError:
            return 0
        finally:
            for fd in made_here:
                os.close(fd)


def _make(  # pragma: no cover (in the maker)
    kind: str,
    key: str,
    steps: list[childsetup.Mount],
    pool: netns.NetnsPool,
    templates: Templates,
    known: dict[str, list[childsetup.Mount]],
    sent: dict[str, float],
) -> tuple[int, int, _Reply]:
    """One ask: (the namespace made or -1, the template to send with it or
    -1, the reply)."""
    made, error, taken, template = -1, "", time.monotonic(), -1
    if kind == "n":
        pool.fill_one()
        made = pool.take()
        error = pool.failed or ("" if made >= 0 else "no namespace")
        pool.failed = ""
    elif kind == "m":
        if steps:
            known[key] = steps
        mounts = known.get(key)
        try:
            if mounts is None:
                raise ValueError(f"no mount steps known for {key!r}")
            made, taken = templates.make(key, mounts)
        except (childsetup.SetupError, OSError, ValueError, TypeError) as failure:
            error = str(failure) or type(failure).__name__
        held = (
            templates.current(key, mounts or ()) if made >= 0 and sent.get(key) != taken else None
        )
        if held is not None:
            template, sent[key] = held[0], taken  # the spawner's to copy too
    else:
        error = f"unknown ask {kind!r}"
    return made, template, (kind, key, error, taken, template >= 0)
