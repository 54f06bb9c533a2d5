"""The fs worker's end of the front-end's read link and of its report link
(decision 0034; the protocol is `hostcapd.fs.direct`)."""

from __future__ import annotations

import errno
import os
import secrets
import select
import socket
import time
from collections import Counter
from typing import Any

import msgspec

from hostcapd import framing
from hostcapd.errors import Refusal
from hostcapd.fs import content
from hostcapd.fs.direct import (
    ACK_TIMEOUT_S,
    ACKS,
    AUDITED_READ_REASONS,
    COUNT_EVERY_S,
    COUNT_IDLE_S,
    MAX_DATA,
    MAX_REQUEST,
    REQUESTS,
    Answer,
    Content,
    Counted,
    Denied,
    Malformed,
    Read,
    Refused,
    Relay,
    Started,
    Sync,
    Synced,
    encode,
    read_bounds,
    split,
)
from hostcapd.fs.errors import refusal_from_errno

_ENCODER = msgspec.msgpack.Encoder()
_HEAD_LEN = 4
#: Room in an answer's datagram for its header (a path of MAX_PATH
#: characters, the hashes) and the kernel's own.
HEADER_ROOM = 32 << 10


class DirectServer:
    """The worker's end of both links (blocking, in the worker's one thread)."""

    def __init__(
        self,
        link: socket.socket,
        reports: socket.socket,
        operations: Any,
        max_read_bytes: int,
        generation: int,
    ) -> None:
        self.link = link
        self.reports = reports
        self.operations = operations
        self.max_read_bytes = max_read_bytes
        self.generation = generation
        # What one datagram can carry on this host: the socket's send buffer
        # bounds it (the root forces 8 MiB; a daemon not run as root gets
        # what net.core.wmem_max allows), less room for the header.
        sndbuf = link.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF)
        self.max_data = max(0, min(MAX_DATA, sndbuf - HEADER_ROOM))
        self.counts: Counter[str] = Counter()
        self._first_count = 0.0
        # A random start: an ack the root sent to an earlier worker on the
        # same socket can never match one of ours.
        self._seq = secrets.randbits(48) + 1
        self.open = True

    def announce(self) -> None:
        self._send(Started(pid=os.getpid()))

    # --- serving ---

    def serve_one(self) -> None:
        """Answer one datagram of the read link (if one is there)."""
        try:
            raw, ancillary, flags, _ = self.link.recvmsg(MAX_REQUEST, 0, socket.MSG_DONTWAIT)
        except BlockingIOError:
            return
        except OSError:
            self.open = False
            return
        if not raw and not ancillary and self._hung_up():
            self.open = False  # the front-end's end is gone
            return
        try:
            if not raw:
                raise ValueError("an empty datagram")
            if framing.truncated(flags) or ancillary:
                raise ValueError("a datagram too long, or carrying fds")
            header, data = split(raw)
            if len(data):
                raise ValueError("a request carrying data")
            request = REQUESTS.decode(header)
        except (ValueError, msgspec.ValidationError, msgspec.DecodeError) as error:
            self._report(Malformed(what=str(error)[:1000], generation=self.generation))
            # No more of this link: its front-end is killed for it, and the
            # next gets a new link (and this worker is restarted). Whatever
            # else it queued makes no more reports (nor records).
            self.open = False
            return
        if isinstance(request, Sync):
            self._send(Synced(nonce=request.nonce))
            return
        self._read(request)

    def _hung_up(self) -> bool:
        """An empty read is the end of the link (else an empty datagram)."""
        poller = select.poll()
        poller.register(self.link, select.POLLIN)
        return any(events & select.POLLHUP for _, events in poller.poll(0))

    def _read(self, request: Read) -> None:
        try:
            answer, data = self._content(request)
        except Refusal as refusal:
            self._refused(request, refusal)
            return
        except OSError as error:
            self._refused(request, refusal_from_errno(error, "read"))
            return
        if isinstance(answer, Content):
            self._count("OK")
        self._send(answer, data)

    def _content(self, request: Read) -> tuple[Content | Relay, bytes]:
        max_bytes = read_bounds(request.offset, request.max_bytes, self.max_read_bytes)
        opened, fd, st = self.operations.open_checked(request.path)
        try:
            if min(max_bytes, max(int(opened["size"]) - request.offset, 0)) > self.max_data:
                return Relay(id=request.id), b""
            try:
                result = content.read_range(fd, request.offset, max_bytes, opened["name"], st)
            except content.NotRegularFile:
                raise Refusal("INVALID_ARGUMENT", "read: not a regular file") from None
        finally:
            os.close(fd)
        if len(result.data) > self.max_data:  # it grew meanwhile
            return Relay(id=request.id), b""
        answer = Content(
            id=request.id,
            path=str(opened["path"]),
            size=result.size,
            offset=result.offset,
            truncated=result.truncated,
            is_binary=result.is_binary,
            media_type=result.media_type,
            sha256=result.sha256,
            file_sha256=result.file_sha256,
        )
        return answer, result.data

    def _refused(self, request: Read, refusal: Refusal) -> None:
        if refusal.reason in AUDITED_READ_REASONS:
            # The record first (the root counts it too), then the answer;
            # the counts kept go before it, so the root has them in order.
            self.flush()
            self._seq += 1
            seq = self._seq
            denied = Denied(
                seq=seq,
                reason=refusal.reason,
                message=refusal.message,
                path=request.path,
                caller=request.caller,
            )
            if self._report(denied):
                self._await_ack(seq)
        else:
            self._count(refusal.reason)
        self._send(Refused(id=request.id, reason=refusal.reason, message=refusal.message))

    def _await_ack(self, seq: int) -> None:
        deadline = time.monotonic() + ACK_TIMEOUT_S
        while (left := deadline - time.monotonic()) > 0:
            ready, _, _ = select.select([self.reports], [], [], left)
            if not ready:
                return
            try:
                raw = self.reports.recv(256, socket.MSG_DONTWAIT)
            except BlockingIOError:
                continue
            except OSError:
                return
            if not raw:
                return
            try:
                header, _ = split(raw)
                if ACKS.decode(header).seq == seq:
                    return
            except (ValueError, msgspec.ValidationError, msgspec.DecodeError):
                return

    # --- counts and sends ---

    def _count(self, result: str) -> None:
        now = time.monotonic()
        if not self.counts:
            self._first_count = now
        self.counts[result] += 1
        if now - self._first_count >= COUNT_EVERY_S:
            self.flush()

    def flush(self) -> None:
        """Send the counts kept (kept again if the root is not reading)."""
        if self.counts and self._report(Counted(results=dict(self.counts))):
            self.counts.clear()

    def idle_timeout(self) -> float | None:
        """How long the worker may sleep before the counts are due."""
        return COUNT_IDLE_S if self.counts else None

    def _report(self, report: Denied | Counted | Malformed) -> bool:
        try:
            self.reports.send(encode(report), socket.MSG_DONTWAIT)
        except OSError:
            return False
        return True

    def _send(self, answer: Answer, data: bytes = b"") -> None:
        # Never blocks the worker: a front-end that does not read its
        # answers (gone, or hostile) loses them.
        body = _ENCODER.encode(answer)
        try:
            self.link.sendmsg(
                [len(body).to_bytes(_HEAD_LEN, "big"), body, data], [], socket.MSG_DONTWAIT
            )
        except OSError as error:
            if error.errno == errno.EMSGSIZE and isinstance(answer, Content):
                self._send(Relay(id=answer.id))  # larger than this link carries
