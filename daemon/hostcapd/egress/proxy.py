"""A tenant's egress proxy: the unprivileged process behind the loopback
listener of each of its proxy-mode spawns.

    python -I -m hostcapd.egress FD

started by the daemon (`hostcapd.egress.supervisor`) with one end of a
SOCK_SEQPACKET pair as FD. It reads the `Hello` (the tenant's rules),
confines itself as a front-end does (`hostcapd.frontend.confine`: its
identity, no capabilities, no_new_privs, not dumpable, landlock, seccomp),
except that it may connect, over TCP only to its rules' ports; then it
serves. Each `Listen` brings the listening sockets made inside a spawn's
network namespace (a socket keeps the namespace it was made in): the proxy
accepts on them from here, in the host's network. With them comes the
namespace's tun device, where everything the spawn sends past the proxy
lands: each such packet is answered with an ICMP error and reported as a
denied attempt (`hostcapd.egress.direct`), never forwarded.

A client speaks HTTP CONNECT, plain HTTP proxying (an absolute http://
target) or SOCKS5 (with remote name resolution). The proxy resolves the
name itself, decides by the rules (`hostcapd.egress.rules`), and connects
to the address it resolved and checked, never to one the client gives. A
refusal is an HTTP 403 whose body says which rule refused and how to ask
for it, or SOCKS5's "not allowed by ruleset". Every attempt is reported to
the daemon (`Connection`), which checks it and writes the audit record.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import ipaddress
import os
import socket
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import msgspec

from hostcapd.egress import direct, messages, packets, protocols
from hostcapd.egress.protocols import ProtocolError
from hostcapd.egress.rules import IPAddress, Policy, Verdict, host_literal

#: Modules imported on first use that the proxy uses (nothing of the
#: interpreter is readable once it is confined).
PRELOADED = (
    "encodings.ascii",
    "encodings.idna",
    "encodings.latin_1",
    "asyncio.base_events",
    "asyncio.selector_events",
    "asyncio.streams",
    "concurrent.futures.thread",
)
#: Seconds a client has to send its request head.
HEAD_TIMEOUT = 30.0
#: Bytes read at a time when relaying.
CHUNK = 256 * 1024
#: Headers never passed on to the server (the proxy's own, and hop-by-hop).
_HOP_HEADERS = {
    b"connection",
    b"keep-alive",
    b"proxy-authorization",
    b"proxy-connection",
    b"te",
    b"trailer",
    b"upgrade",
}


@dataclass
class SpawnState:
    """One spawn's listener and what its connections have used."""

    spawn_id: str
    servers: list[asyncio.Server] = field(default_factory=list)
    tun: direct.Tun | None = None
    connections: int = 0
    bytes_used: int = 0
    tasks: set[asyncio.Task[None]] = field(default_factory=set)


class Refused(Exception):
    def __init__(self, verdict: Verdict, socks_code: int = protocols.SOCKS_NOT_ALLOWED) -> None:
        super().__init__(verdict.reason)
        self.verdict = verdict
        self.socks_code = socks_code


@dataclass
class Attempt:
    """What is reported of one connection."""

    spawn_id: str
    protocol: str
    host: str = ""
    port: int = 0
    address: str = ""
    rule: str = ""
    allowed: bool = False
    reason: str = ""
    up: int = 0
    down: int = 0
    started: float = field(default_factory=time.monotonic)


class Proxy:
    def __init__(self, channel: socket.socket, hello: messages.Hello, policy: Policy) -> None:
        self.channel = channel
        self.hello = hello
        self.policy = policy
        self.spawns: dict[str, SpawnState] = {}

    # --- the channel ----------------------------------------------------------

    async def run(self) -> int:
        loop = asyncio.get_running_loop()
        self.channel.setblocking(False)
        closed = loop.create_future()

        def readable() -> None:
            try:
                data, fds = messages.receive(self.channel)
            except BlockingIOError:
                return
            except OSError:
                data, fds = b"", []
            if not data:
                loop.remove_reader(self.channel.fileno())
                if not closed.done():
                    closed.set_result(None)
                return
            try:
                message = messages.decode_to_proxy(data)
            except (msgspec.DecodeError, msgspec.ValidationError):
                message = None
            if isinstance(message, messages.Listen) and fds and len(fds) == len(message.ends):
                self._listen(message.spawn_id, message.ends, fds)
                return
            for fd in fds:
                os.close(fd)
            if isinstance(message, messages.Forget):
                self._forget(message.spawn_id)

        loop.add_reader(self.channel.fileno(), readable)
        await closed
        for spawn_id in list(self.spawns):
            self._forget(spawn_id)
        return 0

    def _report(self, attempt: Attempt) -> None:
        report = messages.Connection(
            spawn_id=attempt.spawn_id,
            protocol=attempt.protocol,  # type: ignore[arg-type]
            host=attempt.host[:300],
            port=attempt.port,
            address=attempt.address,
            rule=attempt.rule,
            allowed=attempt.allowed,
            reason=attempt.reason[:1000],
            bytes_up=attempt.up,
            bytes_down=attempt.down,
            duration_ms=int((time.monotonic() - attempt.started) * 1000),
        )
        with contextlib.suppress(OSError):
            self.channel.send(messages.encode(report))

    def _direct(self, spawn_id: str, attempt: packets.Attempt, reason: str) -> None:
        """A packet past the proxy (read on the spawn's tun): refused."""
        report = Attempt(spawn_id, attempt.protocol, attempt.address, attempt.port)
        report.address, report.reason = attempt.address, reason
        self._report(report)

    def _listen(self, spawn_id: str, ends: Sequence[str], fds: list[int]) -> None:
        if spawn_id in self.spawns:  # handed again: served already
            for fd in fds:
                os.close(fd)
            with contextlib.suppress(OSError):
                self.channel.send(messages.encode(messages.Listening(spawn_id)))
            return
        state = self.spawns[spawn_id] = SpawnState(spawn_id)
        listeners = [
            socket.socket(fileno=fd) for kind, fd in zip(ends, fds, strict=True) if kind == "tcp"
        ]
        for kind, fd in zip(ends, fds, strict=True):
            if kind == "tun" and state.tun is None:
                state.tun = direct.Tun(fd, lambda a, r: self._direct(spawn_id, a, r))
            elif kind == "tun":
                os.close(fd)

        async def start() -> None:
            for listener in listeners:
                listener.setblocking(False)
                state.servers.append(
                    await asyncio.start_server(
                        lambda r, w: self._accepted(state, r, w), sock=listener
                    )
                )
            with contextlib.suppress(OSError):
                self.channel.send(messages.encode(messages.Listening(spawn_id)))

        task = asyncio.ensure_future(start())
        state.tasks.add(task)
        task.add_done_callback(state.tasks.discard)

    def _forget(self, spawn_id: str) -> None:
        state = self.spawns.pop(spawn_id, None)
        if state is None:
            return
        for server in state.servers:
            server.close()
        if state.tun is not None:
            state.tun.close()
        for task in list(state.tasks):
            task.cancel()

    # --- one client connection ----------------------------------------------------

    async def _accepted(
        self, state: SpawnState, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        task = asyncio.current_task()
        assert task is not None
        state.tasks.add(task)
        try:
            first = await asyncio.wait_for(reader.read(protocols.MAX_HEAD), HEAD_TIMEOUT)
            if not first:
                return
            if first[0] == protocols.SOCKS_VERSION:
                await self._socks(state, first, reader, writer)
            else:
                await self._http(state, first, reader, writer)
        except (TimeoutError, ConnectionError, OSError, asyncio.IncompleteReadError):
            pass
        finally:
            state.tasks.discard(task)
            writer.close()

    async def _http(
        self,
        state: SpawnState,
        buf: bytes,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
    ) -> None:
        attempt = Attempt(state.spawn_id, "http")
        try:
            head = protocols.http_head(buf)
            while head is None:
                more = await asyncio.wait_for(reader.read(protocols.MAX_HEAD), HEAD_TIMEOUT)
                if not more:
                    return
                buf += more
                head = protocols.http_head(buf)
            if head.method == b"CONNECT":
                attempt.protocol = "connect"
                attempt.host, attempt.port = protocols.authority(head.target, default_port=None)
                path = b""
            else:
                attempt.host, attempt.port, path = protocols.absolute_uri(head.target)
        except ProtocolError as error:
            attempt.reason = f"malformed request: {error}"
            self._report(attempt)
            await _answer(writer, 400, "Bad Request", f"hostcap egress proxy: {error}\n")
            return
        try:
            upstream = await self._open(state, attempt)
        except Refused as refused:
            self._report(attempt)
            status = 403 if refused.socks_code == protocols.SOCKS_NOT_ALLOWED else 502
            await _answer(
                writer,
                status,
                "Forbidden" if status == 403 else "Bad Gateway",
                self._refusal_text(attempt, refused.verdict),
                refusal=refused.verdict.reason if status == 403 else "",
            )
            return
        up_reader, up_writer = upstream
        try:
            if head.method == b"CONNECT":
                writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
            else:
                origin_head = _origin_head(head, path)
                up_writer.write(origin_head)
                attempt.up += len(origin_head)
            if head.rest:
                up_writer.write(head.rest)
                attempt.up += len(head.rest)
            await self._relay(state, attempt, reader, writer, up_reader, up_writer)
        finally:
            up_writer.close()
            self._report(attempt)

    async def _socks(
        self,
        state: SpawnState,
        buf: bytes,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
    ) -> None:
        attempt = Attempt(state.spawn_id, "socks5")
        try:
            greeting = protocols.socks_greeting(buf)
            while greeting is None:
                buf += await _more(reader, buf)
                greeting = protocols.socks_greeting(buf)
            methods, used = greeting
            if 0 not in methods:
                writer.write(bytes([protocols.SOCKS_VERSION, 0xFF]))
                await writer.drain()
                return
            writer.write(bytes([protocols.SOCKS_VERSION, 0]))
            buf = buf[used:]
            request = protocols.socks_request(buf)
            while request is None:
                buf += await _more(reader, buf)
                request = protocols.socks_request(buf)
        except ProtocolError as error:
            attempt.reason = f"malformed request: {error}"
            self._report(attempt)
            writer.write(protocols.socks_reply(protocols.SOCKS_FAILURE))
            return
        req, used = request
        attempt.host, attempt.port = req.host, req.port
        if req.command != 1:
            attempt.reason = "only SOCKS5 CONNECT is supported (no BIND, no UDP ASSOCIATE)"
            self._report(attempt)
            writer.write(protocols.socks_reply(protocols.SOCKS_COMMAND_UNSUPPORTED))
            return
        try:
            up_reader, up_writer = await self._open(state, attempt)
        except Refused as refused:
            self._report(attempt)
            writer.write(protocols.socks_reply(refused.socks_code))
            return
        try:
            writer.write(protocols.socks_reply(protocols.SOCKS_OK))
            rest = buf[used:]
            if rest:
                up_writer.write(rest)
                attempt.up += len(rest)
            await self._relay(state, attempt, reader, writer, up_reader, up_writer)
        finally:
            up_writer.close()
            self._report(attempt)

    # --- deciding and connecting ----------------------------------------------------

    async def _open(
        self, state: SpawnState, attempt: Attempt
    ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        """The upstream connection of `attempt` (filled in as decided);
        Refused with the verdict otherwise."""
        hello = self.hello

        def refuse(verdict: Verdict, code: int = protocols.SOCKS_NOT_ALLOWED) -> Refused:
            attempt.allowed, attempt.rule, attempt.reason = False, verdict.rule, verdict.reason
            return Refused(verdict, code)

        state.connections += 1
        if state.connections > hello.max_connections:
            raise refuse(
                Verdict(
                    False,
                    "",
                    f"the spawn's limit of {hello.max_connections} "
                    "connections is reached (network.max_connections)",
                )
            )
        verdict = self.policy.decide(attempt.host, attempt.port)
        attempt.rule = verdict.rule
        if not verdict.allowed:
            raise refuse(verdict)
        deadline = time.monotonic() + hello.connect_timeout
        candidates = await self._addresses(attempt.host, attempt.port, verdict, deadline, refuse)
        last: Verdict | None = None
        for address in candidates:
            checked = self.policy.check_address(verdict, address)
            if not checked.allowed:
                last = last or checked
                continue
            attempt.address = str(address)
            try:
                opened = await asyncio.wait_for(
                    asyncio.open_connection(str(address), attempt.port),
                    max(0.0, deadline - time.monotonic()),
                )
            except TimeoutError:
                raise refuse(
                    Verdict(
                        False,
                        checked.rule,
                        f"connecting to {address} timed out after {hello.connect_timeout:g} s",
                    ),
                    protocols.SOCKS_TTL_EXPIRED,
                ) from None
            except OSError as error:
                last = Verdict(
                    False,
                    checked.rule,
                    f"connecting to {address}:{attempt.port} failed: {error.strerror or error}",
                )
                continue
            attempt.allowed, attempt.rule, attempt.reason = True, checked.rule, checked.reason
            return opened
        assert last is not None
        code = protocols.SOCKS_NOT_ALLOWED if "internal" in last.reason else protocols.SOCKS_REFUSED
        raise refuse(last, code)

    async def _addresses(
        self, host: str, port: int, verdict: Verdict, deadline: float, refuse: object
    ) -> list[IPAddress]:
        if verdict.override is not None:
            return [verdict.override]
        literal = host_literal(host)
        if literal is not None:
            return [literal]
        loop = asyncio.get_running_loop()
        try:
            infos = await asyncio.wait_for(
                loop.getaddrinfo(host, port, type=socket.SOCK_STREAM),
                max(0.0, deadline - time.monotonic()),
            )
        except (OSError, TimeoutError, UnicodeError) as error:
            assert callable(refuse)
            raise refuse(
                Verdict(False, verdict.rule, f"{host} cannot be resolved: {error}"),
                protocols.SOCKS_HOST_UNREACHABLE,
            ) from None
        found = [ipaddress.ip_address(str(info[4][0]).split("%")[0]) for info in infos]
        return list(dict.fromkeys(found))

    def _refusal_text(self, attempt: Attempt, verdict: Verdict) -> str:
        rule = f"rule {verdict.rule!r}" if verdict.rule else "no rule matched"
        return (
            f"hostcap egress proxy: {attempt.host}:{attempt.port} refused: {verdict.reason}\n"
            f"deciding rule: {rule}\n"
            f"To ask for it: the operator of tenant {self.hello.tenant!r} adds an allow rule "
            f"such as {attempt.host + ':' + str(attempt.port)!r} to [tenants."
            f"{self.hello.tenant}.network] allow (see hostcapctl capabilities --json).\n"
        )

    async def _relay(
        self,
        state: SpawnState,
        attempt: Attempt,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        up_reader: asyncio.StreamReader,
        up_writer: asyncio.StreamWriter,
    ) -> None:
        limit = self.hello.max_bytes

        async def pump(src: asyncio.StreamReader, dst: asyncio.StreamWriter, up: bool) -> None:
            try:
                while True:
                    data = await src.read(CHUNK)
                    if not data:
                        break
                    state.bytes_used += len(data)
                    if state.bytes_used > limit:
                        attempt.reason = (
                            f"the spawn's limit of {limit} bytes is reached (network.max_bytes)"
                        )
                        break
                    if up:
                        attempt.up += len(data)
                    else:
                        attempt.down += len(data)
                    dst.write(data)
                    await dst.drain()
            finally:
                with contextlib.suppress(OSError):
                    if dst.can_write_eof():
                        dst.write_eof()

        ups = asyncio.ensure_future(pump(reader, up_writer, True))
        downs = asyncio.ensure_future(pump(up_reader, writer, False))
        try:
            done, pending = await asyncio.wait({ups, downs}, return_when=asyncio.FIRST_COMPLETED)
            # One way ended: the other runs on (a half-closed connection),
            # unless the byte limit or a broken connection ended it.
            broken = any(not t.cancelled() and t.exception() is not None for t in done)
            if pending and not broken and not attempt.reason.startswith("the spawn's limit"):
                await asyncio.wait(pending)
        finally:
            for task in (ups, downs):
                task.cancel()
            for task in (ups, downs):
                with contextlib.suppress(BaseException):
                    await task


async def _more(reader: asyncio.StreamReader, buf: bytes) -> bytes:
    if len(buf) > protocols.MAX_HEAD:
        raise ProtocolError("the request is too large")
    more = await asyncio.wait_for(reader.read(protocols.MAX_HEAD), HEAD_TIMEOUT)
    if not more:
        raise ProtocolError("the client closed before its request")
    return more


def _origin_head(head: protocols.HttpHead, path: bytes) -> bytes:
    lines = [head.method + b" " + path + b" HTTP/1.1"]
    lines += [
        name + b": " + value for name, value in head.headers if name.lower() not in _HOP_HEADERS
    ]
    lines.append(b"Connection: close")
    return b"\r\n".join(lines) + b"\r\n\r\n"


async def _answer(
    writer: asyncio.StreamWriter, status: int, phrase: str, body: str, refusal: str = ""
) -> None:
    data = body.encode()
    # The reason also as a header: a CONNECT client (curl) shows headers, not the body.
    header = "".join(c if " " <= c < "\x7f" else "?" for c in refusal)[:500]
    header = f"X-Hostcap-Refusal: {header}\r\n" if header else ""
    writer.write(
        f"HTTP/1.1 {status} {phrase}\r\n{header}Content-Type: text/plain; charset=utf-8\r\n"
        f"Content-Length: {len(data)}\r\nConnection: close\r\n\r\n".encode()
        + data
    )
    with contextlib.suppress(ConnectionError):
        await writer.drain()


def own_addresses() -> list[IPAddress]:
    """This host's addresses (in the proxy's network namespace)."""
    import psutil

    found: list[IPAddress] = []
    for addrs in psutil.net_if_addrs().values():
        for addr in addrs:
            if addr.family in (socket.AF_INET, socket.AF_INET6):
                with contextlib.suppress(ValueError):
                    found.append(ipaddress.ip_address(addr.address.split("%")[0]))
    return found


def preload() -> None:
    """Load now what the proxy uses later: once confined (and its uid
    changed), nothing more of the interpreter may be readable."""
    with contextlib.suppress(OSError):
        socket.getaddrinfo("localhost", 80, type=socket.SOCK_STREAM)
    for name in PRELOADED:
        importlib.import_module(name)


def main(argv: list[str]) -> int:
    from hostcapd.applied import Unavailable
    from hostcapd.frontend.confine import Confinement, confine, interpreter_paths

    channel = socket.socket(fileno=int(argv[1]))
    data, fds = messages.receive(channel)
    for fd in fds:
        os.close(fd)
    hello = messages.decode_to_proxy(data)
    if not isinstance(hello, messages.Hello):
        print("egress proxy: the first message is not a Hello", file=sys.stderr)
        return 2
    policy = Policy.of(hello.allow, hello.deny, hello.resolve, own_addresses())
    preload()

    try:
        applied = confine(
            Confinement(
                "",
                interpreter_paths(),
                hello.parent_pid,
                uid=hello.uid,
                gid=hello.gid,
                egress_ports=policy.ports(),
            )
        )
    except Unavailable as error:
        print(f"egress proxy: cannot be confined: {error}", file=sys.stderr)
        return 3
    channel.send(messages.encode(messages.Ready([(a.name, a.applied, a.reason) for a in applied])))
    return asyncio.run(Proxy(channel, hello, policy).run())
