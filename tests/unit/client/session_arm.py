"""An in-memory process arm with sessions and their input, for the policy
tests of write_stdin (issue 31): it records what was written into each
session and answers with it, so a test sees which writes reached the host.
The real arm is exercised against hostcapd in tests/integration/client."""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from hostcap.errors import HostError
from hostcap.host import (
    InputWritten,
    Outcome,
    ProcessResult,
    SessionInfo,
    SessionOutput,
    SpawnOptions,
    TerminalSize,
)


@dataclass
class FakeSession:
    info: SessionInfo
    options: SpawnOptions
    written: bytearray = field(default_factory=bytearray)
    pending: bytearray = field(default_factory=bytearray)
    closed: bool = False
    ended: bool = False
    sizes: list[TerminalSize] = field(default_factory=list)


class SessionArm:
    """Sessions that echo back what is written into them (`got:` + the bytes)."""

    def __init__(self) -> None:
        self.sessions: dict[str, FakeSession] = {}
        self._ids = itertools.count(1)

    async def spawn(
        self, command: str, args: Sequence[str], declared_env: Mapping[str, str], opts: SpawnOptions
    ) -> ProcessResult:
        raise HostError("UNIMPLEMENTED", "only sessions here")

    async def start_detached(
        self,
        command: str,
        args: Sequence[str],
        declared_env: Mapping[str, str],
        opts: SpawnOptions,
        *,
        environment_id: str = "",
    ) -> str:
        session_id = f"sess-{next(self._ids)}"
        self.sessions[session_id] = FakeSession(
            SessionInfo(
                session_id=session_id,
                command=command,
                args=tuple(args),
                stdin_open=opts.stdin_open or opts.tty is not None,
                tty=opts.tty,
                engine_session=opts.labels.get("session", ""),
                started_by=opts.labels.get("tool_call_id", ""),
            ),
            opts,
        )
        return session_id

    def _get(self, session_id: str) -> FakeSession:
        if session_id not in self.sessions:
            raise HostError("NOT_FOUND", f"no session {session_id}")
        return self.sessions[session_id]

    def session_info(self, session_id: str) -> SessionInfo | None:
        found = self.sessions.get(session_id)
        return found.info if found else None

    async def read_session(self, session_id: str, *, yield_ms: int) -> SessionOutput:
        session = self._get(session_id)
        text = bytes(session.pending).decode(errors="replace")
        session.pending.clear()
        result = None
        if session.ended:
            result = ProcessResult(spawn_id=session_id, outcome=Outcome.EXITED, exit_code=0)
        return SessionOutput(
            session_id=session_id,
            stdout=text,
            stderr="",
            dropped_bytes=0,
            running=not session.ended,
            result=result,
        )

    async def kill_session(self, session_id: str) -> None:
        self._get(session_id).ended = True

    async def write_stdin(
        self, session_id: str, data: bytes, *, close: bool = False
    ) -> InputWritten:
        session = self._get(session_id)
        if not session.info.stdin_open or session.closed:
            raise HostError("STDIN_NOT_OPEN", "not open")
        if session.ended:
            raise HostError("SPAWN_ENDED", "ended")
        session.written += data
        session.pending += b"got:" + data
        session.closed = close
        return InputWritten(
            session_id=session_id,
            bytes_written=len(data),
            total_bytes=len(session.written),
            writes=1,
            closed=close,
        )

    async def resize(self, session_id: str, size: TerminalSize) -> None:
        session = self._get(session_id)
        if session.info.tty is None:
            raise HostError("NOT_A_TERMINAL", "no terminal")
        session.sizes.append(size)

    async def open_environment(
        self,
        *,
        idle_timeout_s: float = 0.0,
        lifetime_s: float = 0.0,
        labels: Mapping[str, str] | None = None,
    ) -> str:
        raise HostError("UNIMPLEMENTED", "no environments here")

    async def close_environment(self, environment_id: str) -> list[str]:
        raise HostError("UNIMPLEMENTED", "no environments here")
