"""Output of one stream: keep head and tail within a budget, count the rest.

The child must never block on a full pipe because of what we drop: bytes
past the head are drained into a bounded tail ring and the middle is only
counted. `feed()` returns the part of a chunk that belongs to the head, so a
streaming caller can forward it at once.
"""

from __future__ import annotations


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
        self._tail = bytearray()
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
        if rest:
            if self.tail_limit == 0:
                self.dropped += len(rest)
            else:
                self._tail += rest
                excess = len(self._tail) - self.tail_limit
                if excess > 0:
                    del self._tail[:excess]
                    self.dropped += excess
        return head_part

    @property
    def kept(self) -> int:
        return self.total - self.dropped

    def tail(self) -> bytes:
        """What follows the head: the marker (if anything was dropped) and the
        tail. With a budget of 0 nothing is kept, not even the marker."""
        if self.dropped and (self.head_limit or self.tail_limit):
            return marker(self.dropped) + bytes(self._tail)
        return bytes(self._tail)

    def result(self) -> bytes:
        """The kept bytes, head + marker + tail, for a buffered Run."""
        return bytes(self.head) + self.tail()
