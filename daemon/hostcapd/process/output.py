"""Output of one stream: keep head and tail within a budget, count the rest.

`StreamBuffer` keeps them: bytes past the head go into a bounded tail ring
and the middle is only counted. `feed()` returns the part of a chunk that
belongs to the head, so a streaming caller can forward it at once. The
front-end keeps a call's output in one (it is the tenant's cost there,
decision 0032); the root side only counts it (`StreamTally`) and passes each
read on, a tenant's reads taking turns (`OutputTurns`). A detached spawn's
output stays in the root, in an `OutputLog`, for ReadOutput.
"""

from __future__ import annotations

import asyncio
import select
from collections import deque
from collections.abc import Callable

from hostcapd.kept_loop import KeptLoop

#: Largest Output event of a kept tail: the front-end streams it in pieces
#: of this size before the Exited.
OUTPUT_CHUNK = 1024 * 1024
#: Reads smaller than this are gathered into one piece of the tail ring: a
#: trickle of tiny reads must not cost an object each.
TAIL_PIECE = 64 * 1024


def marker(dropped: int) -> bytes:
    return f"\n[... {dropped} bytes dropped by hostcapd ...]\n".encode()


class StreamBuffer:
    def __init__(self, keep: int, retain_head: bool = True) -> None:
        self.head_limit = keep - keep // 2
        self.tail_limit = keep // 2
        #: A streaming caller forwards the head at once: only its size is kept.
        self.retain_head = retain_head
        self.head = bytearray()
        self._head_size = 0
        # The tail ring holds the reads themselves: dropping from its front
        # pops whole pieces (trims one at most), so draining costs per read,
        # not per byte of a large tail.
        self._tail: deque[bytes | bytearray] = deque()
        self._tail_size = 0
        self.total = 0
        #: Bytes that fell out of the tail ring (the dropped middle).
        self.dropped = 0

    def feed(self, data: bytes) -> bytes:
        """Account `data`; return the prefix of it that is part of the head."""
        self.total += len(data)
        room = self.head_limit - self._head_size
        head_part = data[:room] if room > 0 else b""
        if head_part:
            self._head_size += len(head_part)
            if self.retain_head:
                self.head += head_part
        rest = data[len(head_part) :]
        if not rest:
            return head_part
        if self.tail_limit == 0:
            self.dropped += len(rest)
            return head_part
        last = self._tail[-1] if self._tail else None
        if len(rest) >= TAIL_PIECE:
            self._tail.append(rest)
        elif isinstance(last, bytearray) and len(last) < TAIL_PIECE:
            last += rest
        else:
            self._tail.append(bytearray(rest))
        self._tail_size += len(rest)
        self._drop_excess()
        return head_part

    def _drop_excess(self) -> None:
        """Drop from the front of the tail ring what exceeds its limit."""
        excess = self._tail_size - self.tail_limit
        if excess <= 0:
            return
        self._tail_size -= excess
        self.dropped += excess
        while excess > 0:
            first = self._tail[0]
            if len(first) <= excess:
                self._tail.popleft()
                excess -= len(first)
            elif isinstance(first, bytearray):
                del first[:excess]
                excess = 0
            else:
                self._tail[0] = first[excess:]
                excess = 0

    @property
    def kept(self) -> int:
        return self.total - self.dropped

    @property
    def held(self) -> int:
        """Bytes of output it holds (the head only if it retains it)."""
        return len(self.head) + self._tail_size

    def tail(self) -> bytes:
        """What follows the head: the marker (if anything was dropped) and the
        tail. With a budget of 0 nothing is kept, not even the marker."""
        tail = b"".join(self._tail)
        if self.dropped and (self.head_limit or self.tail_limit):
            return marker(self.dropped) + tail
        return tail

    def parts(self) -> list[bytes | bytearray]:
        """The kept bytes as pieces (head, marker, tail), for a writer that
        gathers them: nothing is joined into one more copy."""
        pieces: list[bytes | bytearray] = [self.head] if self.head else []
        if self.dropped and (self.head_limit or self.tail_limit):
            pieces.append(marker(self.dropped))
        pieces.extend(self._tail)
        return pieces

    def result(self) -> bytes:
        """The kept bytes, head + marker + tail, for a buffered Run."""
        return b"".join(self.parts())


class StreamTally:
    """One stream's counts where its bytes are passed on, not kept: what a
    `StreamBuffer` of the same budget fed the same bytes would say of its
    `total`, `kept` and `dropped` (head and tail are the first and last
    bytes, so only the total matters)."""

    def __init__(self, keep: int) -> None:
        self.keep = keep
        self.total = 0

    def feed(self, size: int) -> None:
        self.total += size

    @property
    def kept(self) -> int:
        return min(self.total, self.keep)

    @property
    def dropped(self) -> int:
        return self.total - self.kept


class OutputTurns:
    """A tenant's turns at reading its spawns' pipes on the root's one event
    loop: at most `per_turn` reads per pass of the loop, whatever the number
    of its spawns, so its output never holds up another tenant's calls for
    more than a few reads. A reader past its turn waits (its pipe is not
    watched: the child's writes block on it, as on a slow consumer) and is
    given a read at a later pass, in the order they came."""

    def __init__(self, per_turn: int = 1) -> None:
        self.per_turn = per_turn
        self._running_loop = KeptLoop()
        self._left = per_turn
        self._waiting: deque[tuple[object, int, Callable[[int], None]]] = deque()
        self._granted: set[tuple[object, int]] = set()
        self._reset_pending = False
        #: The read that last took this pass's budget (a refund gives it back).
        self._took: tuple[object, int] | None = None

    def take(self) -> bool:
        """Whether a read may happen now (and count it)."""
        self._schedule()
        if self._left <= 0:
            return False
        self._left -= 1
        return True

    def admit(self, owner: object, fd: int, reader: Callable[[int], None]) -> bool:
        """Whether `owner` may read `fd` now. If not, its reader is removed
        and put back (`reader(fd)` on the loop) at a later turn, with a read
        granted."""
        if (owner, fd) in self._granted:
            self._granted.discard((owner, fd))
            return True
        if self.take():
            self._took = (owner, fd)
            return True
        self._running_loop().remove_reader(fd)
        self._waiting.append((owner, fd, reader))
        self._schedule()
        return False

    def refund(self, owner: object, fd: int) -> None:
        """`owner`'s read of `fd` found the end of its pipe: if it took this
        pass's budget, it gives it back (the turns bound the output read in
        a pass; two pipes closed by one exit are read in one pass, not the
        second a pass later)."""
        if self._took == (owner, fd):
            self._took = None
            self._left = min(self._left + 1, self.per_turn)

    def forget(self, owner: object) -> None:
        """`owner` closed its pipes: its waits and grants go."""
        self._waiting = deque(w for w in self._waiting if w[0] is not owner)
        self._granted = {g for g in self._granted if g[0] is not owner}

    @property
    def waiting(self) -> int:
        return len(self._waiting)

    def _schedule(self) -> None:
        if not self._reset_pending:
            self._reset_pending = True
            self._running_loop().call_soon(self._next_turn)

    def _next_turn(self) -> None:
        """A new pass of the loop: the readers that waited longest get its
        reads first, in the order they came."""
        self._reset_pending = False
        self._left, self._took = self.per_turn, None
        loop = self._running_loop()
        while self._left > 0 and self._waiting:
            owner, fd, reader = self._waiting.popleft()
            self._left -= 1
            self._granted.add((owner, fd))
            loop.add_reader(fd, reader, fd)
        if self._waiting:
            self._schedule()


class StreamCount:
    """One stream's counts in an OutputLog: what a StreamBuffer's `total`,
    `kept` and `dropped` are, for the exit record and Exited."""

    def __init__(self) -> None:
        self.total = 0
        self.dropped = 0

    @property
    def kept(self) -> int:
        return self.total - self.dropped


class OutputLog:
    """A detached spawn's output, read later by offset (issue 30).

    Both streams in the order they came, one offset for both: the head (the
    first half of the budget) is kept, then a rolling tail (the second half);
    what falls out between them is counted per stream, exactly. Memory is
    the budget plus one piece per read: never more, whatever the spawn
    prints. `wait()` is a future resolved at the next output or the end.
    """

    def __init__(self, budget: int) -> None:
        self.head_limit = budget - budget // 2
        self.tail_limit = budget // 2
        #: (stream, bytes) pieces of the head, from offset 0.
        self._head: deque[tuple[int, bytes | bytearray]] = deque()
        self._head_size = 0
        #: (stream, bytes) pieces of the tail, ending at `total`.
        self._tail: deque[tuple[int, bytes | bytearray]] = deque()
        self._tail_size = 0
        self.total = 0
        self.counts = {1: StreamCount(), 2: StreamCount()}
        self._waiters: list[asyncio.Future[None]] = []

    @property
    def dropped(self) -> int:
        return self.total - self._head_size - self._tail_size

    @property
    def held(self) -> int:
        """Bytes of output this log holds (its cost to the tenant)."""
        return self._head_size + self._tail_size

    def feed(self, stream: int, data: bytes) -> None:
        self.total += len(data)
        self.counts[stream].total += len(data)
        room = self.head_limit - self._head_size
        if room > 0:
            part = data[:room]
            _append(self._head, stream, part)
            self._head_size += len(part)
            data = data[room:]
        if data:
            _append(self._tail, stream, data)
            self._tail_size += len(data)
            excess = self._tail_size - self.tail_limit
            while excess > 0:
                first_stream, first = self._tail[0]
                cut = min(excess, len(first))
                self.counts[first_stream].dropped += cut
                if cut == len(first):
                    self._tail.popleft()
                elif isinstance(first, bytearray):
                    del first[:cut]
                else:
                    self._tail[0] = (first_stream, first[cut:])
                self._tail_size -= cut
                excess -= cut
        self.wake()

    def wake(self) -> None:
        """Resolve every waiter (new output, or the end)."""
        waiters, self._waiters = self._waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)

    def wait(self) -> asyncio.Future[None]:
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        # Waits that timed out are dropped here: polling a silent spawn
        # does not grow the list.
        self._waiters = [w for w in self._waiters if not w.done()]
        self._waiters.append(waiter)
        return waiter

    def read(self, offset: int) -> tuple[bytes, bytes, int, int]:
        """(stdout, stderr, next offset, bytes past `offset` no longer held)."""
        out: dict[int, list[bytes]] = {1: [], 2: []}
        position = 0
        for stream, piece in self._head:
            end = position + len(piece)
            if end > offset:
                out[stream].append(bytes(piece[max(0, offset - position) :]))
            position = end
        tail_start = self.total - self._tail_size
        skipped = max(0, tail_start - max(offset, position))
        position = tail_start
        for stream, piece in self._tail:
            end = position + len(piece)
            if end > offset:
                out[stream].append(bytes(piece[max(0, offset - position) :]))
            position = end
        return b"".join(out[1]), b"".join(out[2]), self.total, skipped


def _append(pieces: deque[tuple[int, bytes | bytearray]], stream: int, data: bytes) -> None:
    """Add `data` of `stream`: to the last piece when that is a small one of
    the same stream, so a trickle of tiny reads does not cost an object each."""
    if pieces:
        last_stream, last = pieces[-1]
        if last_stream == stream and isinstance(last, bytearray) and len(last) < TAIL_PIECE:
            last += data
            return
    pieces.append((stream, bytearray(data) if len(data) < TAIL_PIECE else bytes(data)))


def ended_pipes(fds: list[int]) -> set[int]:
    """The pipes of `fds` already at their end of file (every write end
    closed, nothing left to read), in one poll(2): a command that ended
    before its output was watched (most of a short one's stderr, all of
    /bin/true's) costs no watch, no wake-up and no read of its pipe."""
    if not fds:
        return set()
    poller = select.poll()
    for fd in fds:
        poller.register(fd, select.POLLIN)
    return {fd for fd, events in poller.poll(0) if events & _HUP_ONLY == select.POLLHUP}


_HUP_ONLY = select.POLLHUP | select.POLLIN | select.POLLERR | select.POLLNVAL
