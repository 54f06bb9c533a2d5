"""In the egress proxy: a spawn's tun device, where everything it sends past
the proxy lands (egress/netns.py). Each packet that tries to reach
something is answered with an ICMP "administratively prohibited" error, so
the program's connect() fails at once, and reported as a denied
network.connect (egress/packets.py says what counts as an attempt).

A flood cannot fill the audit log: a flow (protocol, addresses, port) is
recorded once per FLOW_TTL seconds, and a spawn's records are a token
bucket (BURST, then RATE a second); what was left out is counted in the
next record's reason, and in a last record when the spawn ends.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections import OrderedDict
from collections.abc import Callable

from hostcapd.egress import packets
from hostcapd.egress.rules import PROXY_PORT

#: Seconds a flow is not recorded again.
FLOW_TTL = 60.0
#: Flows remembered per spawn (the oldest forgotten first).
MAX_FLOWS = 256
#: Records a spawn may have at once, and per second after.
BURST = 20
RATE = 2.0
#: Packets read per wake-up (the rest on the next turn of the loop).
READS_PER_WAKE = 64
MAX_PACKET = 65536

_HOW = {
    "tcp": "a direct TCP connection",
    "udp": "a UDP datagram",
    "icmp": "a ping",
}


def reason_of(attempt: packets.Attempt) -> str:
    what = _HOW.get(attempt.protocol, f"a packet of IP protocol {attempt.number}")
    target = f"{attempt.address}:{attempt.port}" if attempt.port else attempt.address
    how = (
        "names are resolved by the proxy (socks5h:// or HTTP(S)_PROXY)"
        if attempt.protocol == "udp"
        else f"the egress proxy at 127.0.0.1:{PROXY_PORT} (HTTP_PROXY, HTTPS_PROXY, "
        "ALL_PROXY) is the only way out"
    )
    return f"{what} to {target} skips the proxy: refused, nothing leaves the namespace; {how}"


class Limiter:
    """Which of a spawn's attempts are recorded (see the module docstring)."""

    def __init__(self, now: Callable[[], float] = time.monotonic) -> None:
        self.now = now
        self.flows: OrderedDict[tuple[str, str, str, int, int], float] = OrderedDict()
        self.tokens = float(BURST)
        self.stamp = now()
        #: Attempts not recorded for want of tokens since the last record.
        self.left_out = 0

    def admit(self, attempt: packets.Attempt) -> bool:
        now = self.now()
        seen = self.flows.get(attempt.flow)
        if seen is not None and now - seen < FLOW_TTL:
            return False  # the same attempt again (a retry): recorded already
        self.tokens = min(float(BURST), self.tokens + (now - self.stamp) * RATE)
        self.stamp = now
        if self.tokens < 1:
            self.left_out += 1
            return False
        self.tokens -= 1
        self.flows[attempt.flow] = now
        self.flows.move_to_end(attempt.flow)
        while len(self.flows) > MAX_FLOWS:
            self.flows.popitem(last=False)
        return True


class Tun:
    """One spawn's tun device, read on the proxy's loop; `report` gets
    (attempt, reason) for each attempt recorded."""

    def __init__(self, fd: int, report: Callable[[packets.Attempt, str], None]) -> None:
        self.fd = fd
        self.report = report
        self.limiter = Limiter()
        self.answered = 0
        asyncio.get_running_loop().add_reader(fd, self._readable)

    def _readable(self) -> None:
        for _ in range(READS_PER_WAKE):
            try:
                packet = os.read(self.fd, MAX_PACKET)
            except BlockingIOError:
                return
            except OSError:
                self.close()
                return
            self._one(packet)

    def _one(self, packet: bytes) -> None:
        attempt = packets.attempt_of(packet)
        if attempt is None:
            return
        answer = packets.refusal_of(packet)
        if answer is not None:
            with contextlib.suppress(OSError):
                os.write(self.fd, answer)
                self.answered += 1
        if self.limiter.admit(attempt):
            reason = reason_of(attempt)
            if self.limiter.left_out:
                reason += f" ({self.limiter.left_out} more attempts before it were not recorded)"
                self.limiter.left_out = 0
            self.report(attempt, reason)

    def close(self) -> None:
        if self.fd < 0:
            return
        loop = asyncio.get_running_loop()
        loop.remove_reader(self.fd)
        # On a thread: the last close of a tun fd unregisters the device,
        # which waits for RCU grace periods (some 30 ms).
        loop.run_in_executor(None, os.close, self.fd)
        self.fd = -1
        if self.limiter.left_out:
            last = packets.Attempt("ip", "", "", 0)
            self.report(
                last,
                f"{self.limiter.left_out} more attempts past the proxy were refused "
                "but not recorded (the spawn's record rate was reached)",
            )
            self.limiter.left_out = 0
