"""A tenant front-end's reads asked of its fs worker directly (decision 0034).

    reads = DirectReads(link)                   # the read link the root side gave
    future = reads.ask(request, caller)         # None: relay the call instead
    outcome = await future                      # None: relay it (given up)
    await refuse(outcome, context)              # (if a Refusal) the call aborted
    return outcome                              # the answer's wire bytes

(one coroutine for the whole call: the handler awaits the future itself.)

The worker answers each `Read` with the file's content in one datagram, or
a typed refusal (audited by the root side from the worker's report before
the answer is sent), or `Relay` for a read too large for a datagram. On any
doubt about the link the call is relayed through the root side as every
read was before: until the link is known to be up (the worker's `Started`,
or the answer to a `Sync` probe), with as many reads in flight as it
carries at once, for a path or a request it does not carry, when the
link cannot take the request, and for a read not answered within
ANSWER_TIMEOUT_S (the link is then in doubt until a probe is answered).

A worker that dies loses the read it was doing; the one started in its
place says `Started`, and each read in flight is asked again, once (a read
changes nothing); a second loss fails it UNAVAILABLE.
"""

from __future__ import annotations

import asyncio
import itertools
import mmap
import socket
import sys
from dataclasses import dataclass
from typing import Any, NoReturn

import msgspec

from hostcapd import framing
from hostcapd.bridge import messages
from hostcapd.errors import UNAVAILABLE, Refusal
from hostcapd.frontend import convert
from hostcapd.fs import direct

#: What a read came to: the answer's wire bytes (made as the worker's
#: datagram is taken in: its data copied once, straight out of the
#: receive buffer), a refusal, or None (relay the call).
Outcome = bytes | Refusal | None
#: An answer's pages past this stay resident for the next one.
KEEP_RESIDENT = 64 << 10
LOST = Refusal(UNAVAILABLE, "the fs worker died during the request twice; it is restarted")


@dataclass
class _Pending:
    future: asyncio.Future[Outcome]
    datagram: bytes
    #: The loop's time past which the read is given up (relayed).
    deadline: float
    asked_again: bool = False


class DirectReads:
    """The front-end's end of its read link, on the running loop."""

    def __init__(self, sock: socket.socket) -> None:
        sock.setblocking(False)
        self.sock = sock
        self.loop = asyncio.get_running_loop()
        self.pending: dict[int, _Pending] = {}
        self._ids = itertools.count(1)
        #: One timer for every read's deadline (not one a read): armed for
        #: the earliest, it gives up what is late and arms itself again.
        self._sweeper: asyncio.TimerHandle | None = None
        #: Reads go direct only while this holds.
        self.up = False
        self._probe = 0
        # Anonymous memory, resident only where an answer was written (an
        # idle front-end's RSS is a tenant's cost); a large answer's pages
        # are given back once it is copied out.
        self._buffer = mmap.mmap(-1, direct.MAX_ANSWER)
        self._view = memoryview(self._buffer)
        self.loop.add_reader(sock.fileno(), self._readable)
        self._doubt()

    def close(self) -> None:
        if self._sweeper is not None:
            self._sweeper.cancel()
            self._sweeper = None
        if self.sock.fileno() >= 0:
            self.loop.remove_reader(self.sock.fileno())
            self.sock.close()
        self.up = False

    # --- asking -------------------------------------------------------------

    async def read(self, request: messages.ReadFileCall, caller: messages.Caller | None) -> Outcome:
        future = self.ask(request, caller)
        return None if future is None else await future

    def ask(
        self, request: messages.ReadFileCall, caller: messages.Caller | None
    ) -> asyncio.Future[Outcome] | None:
        """Send the read; the future of its outcome, or None: relay it. A
        read not answered within ANSWER_TIMEOUT_S comes to None (relayed),
        and puts the link in doubt."""
        if not self.up or len(self.pending) >= direct.IN_FLIGHT:
            return None
        if len(request.path) > direct.MAX_PATH:
            return None
        ident = next(self._ids)
        datagram = direct.encode(
            direct.Read(
                id=ident,
                path=request.path,
                offset=request.offset,
                max_bytes=request.max_bytes,
                caller=caller,
            )
        )
        if len(datagram) > direct.MAX_REQUEST or not self._send(datagram):
            return None
        future: asyncio.Future[Outcome] = self.loop.create_future()
        deadline = self.loop.time() + direct.ANSWER_TIMEOUT_S
        self.pending[ident] = _Pending(future, datagram, deadline)
        sweeper = self._sweeper
        if sweeper is None or deadline < sweeper.when():  # (a timeout made shorter)
            if sweeper is not None:
                sweeper.cancel()
            self._sweeper = self.loop.call_at(deadline, self._sweep)
        return future

    def _sweep(self) -> None:
        """Give up the reads past their deadline (relayed; the link in doubt
        if one was still awaited); armed again for the next deadline."""
        self._sweeper = None
        now = self.loop.time()
        late = [ident for ident, p in self.pending.items() if p.deadline <= now]
        awaited = False
        for ident in late:
            future = self.pending.pop(ident).future
            awaited = awaited or not future.done()
            _settle(future, None)
        if awaited:
            self._doubt()
        if self.pending:
            first = min(p.deadline for p in self.pending.values())
            self._sweeper = self.loop.call_at(first, self._sweep)

    def _send(self, datagram: bytes) -> bool:
        try:
            self.sock.send(datagram)
        except OSError:  # full (a worker that does not read), or gone
            self.up = False
            return False
        return True

    def _doubt(self) -> None:
        """Relay until a probe is answered (everything before it was)."""
        self.up = False
        self._probe = next(self._ids)
        self._send(direct.encode(direct.Sync(nonce=self._probe)))

    # --- answers ------------------------------------------------------------

    def _readable(self) -> None:
        # One answer a wake-up: each answers one read, so reading on until
        # a read finds nothing would cost a system call a read; the reader is
        # level-triggered, and what is left is read on the loop's next pass.
        try:
            size, _, flags, _ = self.sock.recvmsg_into([self._buffer])
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            size, flags = 0, 0
        if size == 0:
            self.close()  # the worker's end is gone: relay from now on
            self._lost_all()
            return
        try:
            if flags & framing.MSG_TRUNC:
                raise ValueError("an answer longer than the link carries")
            header, data = direct.split(self._view[:size])
            answer = direct.ANSWERS.decode(header)
        except (ValueError, msgspec.ValidationError, msgspec.DecodeError) as error:
            print(f"hostcapd front-end: a bad answer on the read link: {error}", file=sys.stderr)
            self._doubt()
            return
        self._answer(answer, data)
        del header, data
        if size > KEEP_RESIDENT:
            self._buffer.madvise(mmap.MADV_DONTNEED)

    def _answer(self, answer: direct.Answer, data: memoryview) -> None:
        if isinstance(answer, direct.Started):
            self.up = True
            for ident, pending in list(self.pending.items()):
                if pending.future.done():  # its call is gone (cancelled)
                    del self.pending[ident]
                elif pending.asked_again:
                    del self.pending[ident]
                    _settle(pending.future, LOST)
                else:
                    pending.asked_again = True
                    if not self._send(pending.datagram):
                        del self.pending[ident]
                        _settle(pending.future, None)
            return
        if isinstance(answer, direct.Synced):
            if answer.nonce == self._probe:
                self.up = True
            return
        waiting = self.pending.pop(answer.id, None)
        if waiting is None:
            return  # a read given up, or asked twice and answered once already
        if isinstance(answer, direct.Content):
            if not waiting.future.done():  # (its call gone: nothing to make)
                _settle(waiting.future, response(answer, data))
        elif isinstance(answer, direct.Refused):
            _settle(waiting.future, Refusal(Refusal.reason_of(answer.reason), answer.message))
        else:
            _settle(waiting.future, None)

    def _lost_all(self) -> None:
        lost, self.pending = self.pending, {}
        for pending in lost.values():
            _settle(pending.future, None)


def _settle(future: asyncio.Future[Outcome], outcome: Outcome) -> None:
    if not future.done():
        future.set_result(outcome)


async def refuse(refusal: Refusal, context: Any) -> NoReturn:
    """End the call with a direct read's refusal."""
    abort = messages.Abort(
        call=1,
        code=refusal.code,
        message=refusal.message,
        reason=refusal.reason if refusal.on_the_wire else "",
    )
    await convert.abort(context, abort)
    raise AssertionError("abort returned")


def response(found: direct.Content, data: bytes | memoryview) -> bytes:
    """A direct read's content as its wire bytes."""
    return convert.read_file_response(
        path=found.path,
        data=data,
        size=found.size,
        offset=found.offset,
        truncated=found.truncated,
        is_binary=found.is_binary,
        media_type=found.media_type,
        sha256=found.sha256,
        file_sha256=found.file_sha256,
    )
