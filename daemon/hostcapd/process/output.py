"""Output of one stream: keep head and tail within a budget, count the rest.

The child must never block on a full pipe because of what we drop: bytes
past the head are drained into a bounded tail ring and the middle is only
counted. `feed()` returns the part of a chunk that belongs to the head, so a
streaming caller can forward it at once.
"""

from __future__ import annotations

from collections import deque

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
