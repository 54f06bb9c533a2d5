"""A tenant socket serving FsService, for the integration and security tests.

Two kinds, same tests:

- `daemon`: the real hostcapd, started by the shared test support
  (tests/support/daemon.py) with one tenant like --dev's. Skipped, saying
  why, while hostcapd does not serve FsService (until the front-end wires
  start_fs_service in); runs as soon as it does.
- `in-process`: `start_fs_service` for the same --dev tenant behind the
  daemon's own front-end code run in the test's loop (the channel and the
  front-end's conversion included): the real service, worker and audit
  log, without the rest of the daemon.

Both run the tenant as `nobody`. State dirs live under /tmp with mode 0711,
so the tenant's own processes (a planted symlink, the race's swapper) can
reach the workspace by path; the service itself does not need that.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import pytest
from hostcap_proto.errors import WireError, from_rpc_error
from hostcap_proto.v1 import common_pb2, fs_pb2, fs_pb2_grpc, process_pb2, process_pb2_grpc
from hostcapd.audit import AuditLog
from hostcapd.bridge.frontends import Endpoint, FrontendProcess, Relayed
from hostcapd.bridge.messages import REQUESTS
from hostcapd.config import AuditSettings, FsSettings, Tenant, dev_config, prepare_dev_state
from hostcapd.service.fs_runtime import start_fs_service
from support.daemon import NOBODY, Daemon, children_of, cmdline, daemon_config, tenant_config
from support.identity import as_user

#: Big enough for a 64 MiB write plus its envelope (the dev ceiling).
MAX_MESSAGE = 80 << 20
CHANNEL_OPTIONS = [
    ("grpc.max_receive_message_length", MAX_MESSAGE),
    ("grpc.max_send_message_length", MAX_MESSAGE),
]
DAEMON_START_S = 60.0


def make_state_dir() -> Path:
    state = Path(tempfile.mkdtemp(prefix="hostcap-fs-it-"))
    state.chmod(0o711)
    return state


@dataclass
class FsEndpoint:
    kind: str
    socket: Path
    state: Path
    workspace: Path
    reference: Path
    audit_path: Path
    uid: int
    gid: int
    max_read_bytes: int
    max_write_bytes: int
    worker_pid: Callable[[], int]
    #: Directories outside every root made for a test (removed afterwards).
    _outside: list[Path] = field(default_factory=list)

    def channel(self) -> grpc.aio.Channel:
        return grpc.aio.insecure_channel(f"unix:{self.socket}", options=CHANNEL_OPTIONS)

    def scratch(self) -> str:
        """A fresh tenant-owned directory in the workspace; its relative path."""
        name = f"t-{uuid.uuid4().hex[:12]}"
        path = self.workspace / name
        path.mkdir()
        os.chown(path, self.uid, self.gid)
        return name

    def outside_dir(self) -> Path:
        """A directory beneath no root whose files the tenant's uid can read:
        only the jail keeps them out of the file API."""
        path = Path(tempfile.mkdtemp(prefix="hostcap-fs-outside-"))
        path.chmod(0o755)
        self._outside.append(path)
        return path

    def as_tenant(self, argv: list[str]) -> subprocess.CompletedProcess[str]:
        """Run a command as the tenant's uid (what its own spawns could do)."""
        return subprocess.run(
            as_user(self.uid, self.gid, argv), capture_output=True, text=True, check=True
        )

    async def plant_symlink(self, target: str, link: str) -> None:
        """`link` (relative to the workspace) -> `target`, made by the tenant:
        through a sandboxed spawn when the daemon serves, else as its uid."""
        if self.kind == "daemon":
            async with self.channel() as channel:
                stub = process_pb2_grpc.ProcessServiceStub(channel)
                result = await stub.Run(
                    process_pb2.SpawnRequest(argv=["ln", "-s", target, link], cwd=".")
                )
            exited = result.exited
            assert (exited.outcome, exited.exit_code) == (common_pb2.EXITED, 0), (
                f"{common_pb2.Outcome.Name(exited.outcome)}: {exited.message} {result.stderr!r}"
            )
        else:
            self.as_tenant(["ln", "-s", target, str(self.workspace / link)])
        assert (self.workspace / link).is_symlink()

    def cleanup(self) -> None:
        for path in self._outside:
            shutil.rmtree(path, ignore_errors=True)
        self._outside.clear()


async def failure(call: object) -> tuple[grpc.StatusCode, WireError]:
    """The status code and hostcap refusal a call ends with."""
    try:
        await call  # type: ignore[misc]
    except grpc.aio.AioRpcError as error:
        found = from_rpc_error(error)  # type: ignore[arg-type]
        assert found is not None, f"no hostcap reason in {error.code()}: {error.details()}"
        return error.code(), found
    raise AssertionError("the call succeeded")


async def refusal(call: object) -> WireError:
    """The hostcap refusal a call ends with; fails if it succeeds or carries none."""
    return (await failure(call))[1]


@contextlib.asynccontextmanager
async def in_process(
    audit_settings: Callable[[AuditSettings], AuditSettings] | None = None,
    tenant_change: Callable[[Tenant], Tenant] | None = None,
) -> AsyncIterator[FsEndpoint]:
    state = make_state_dir()
    config = dev_config(state)
    prepare_dev_state(config)
    tenant = config.tenants[0] if tenant_change is None else tenant_change(config.tenants[0])
    settings = config.audit if audit_settings is None else audit_settings(config.audit)
    audit = AuditLog.open(settings, boot_id=uuid.uuid4().hex)
    runtime = await start_fs_service(tenant, audit)
    socket_path = state / "run" / "fs.sock"
    methods = {
        name: Relayed(getattr(runtime.service, name.partition(".")[2]), False, name)
        for name in REQUESTS["tenant"]
        if name.startswith("FsService.")
    }
    server = FrontendProcess(
        Endpoint("tenant", tenant.name, socket_path, 0, 0, 0o600, MAX_MESSAGE, MAX_MESSAGE),
        audit,
        methods,
        lambda: None,
        in_process=True,
    )
    os.rename(await server.start(), socket_path)
    server.remove_bind_dir()

    def worker_pid() -> int:
        pid = runtime.worker.pid
        assert pid is not None
        return pid

    endpoint = FsEndpoint(
        kind="in-process",
        socket=socket_path,
        state=state,
        workspace=tenant.roots[0].path,
        reference=tenant.roots[1].path,
        audit_path=settings.path,
        uid=tenant.uid,
        gid=tenant.gid,
        max_read_bytes=tenant.fs.max_read_bytes,
        max_write_bytes=tenant.fs.max_write_bytes,
        worker_pid=worker_pid,
    )
    try:
        yield endpoint
    finally:
        await server.stop(None)
        await runtime.close()
        await audit.close()
        endpoint.cleanup()
        shutil.rmtree(state, ignore_errors=True)


@contextlib.contextmanager
def real_daemon() -> Iterator[FsEndpoint]:
    """hostcapd as the shared test support starts it (tests/support/daemon.py)."""
    state = make_state_dir()
    daemon = Daemon(state, daemon_config(state, {"dev": tenant_config(state, "dev")}))
    try:
        daemon.start(timeout=DAEMON_START_S)
        _skip_unless_fs_served(daemon.socket)

        def worker_pid() -> int:
            for pid in children_of(daemon.pid):
                if b"hostcapd.fs.worker" in cmdline(pid):
                    return pid
            raise AssertionError("no fs worker under the daemon")

        defaults = FsSettings()
        endpoint = FsEndpoint(
            kind="daemon",
            socket=daemon.socket,
            state=state,
            workspace=daemon.root(index=0),
            reference=daemon.root(index=1),
            audit_path=daemon.audit_path,
            uid=NOBODY,
            gid=NOBODY,
            max_read_bytes=defaults.max_read_bytes,
            max_write_bytes=defaults.max_write_bytes,
            worker_pid=worker_pid,
        )
        try:
            yield endpoint
        finally:
            endpoint.cleanup()
    finally:
        if daemon.proc is not None and daemon.proc.poll() is None:
            daemon.stop()
        shutil.rmtree(state, ignore_errors=True)


def _skip_unless_fs_served(socket_path: Path) -> None:
    with grpc.insecure_channel(f"unix:{socket_path}") as channel:
        try:
            fs_pb2_grpc.FsServiceStub(channel).Stat(fs_pb2.StatRequest(path="."), timeout=30)  # type: ignore[no-untyped-call]
        except grpc.RpcError as error:
            if error.code() == grpc.StatusCode.UNIMPLEMENTED:  # type: ignore[attr-defined]
                pytest.skip(
                    "hostcapd does not serve FsService yet (start_fs_service is not wired in)"
                )
            raise


# --- the fixtures both suites use (imported by their conftest.py) ---


@pytest.fixture(scope="module")
def fs_daemon() -> Iterator[FsEndpoint]:
    """The real daemon, one per test module (its start-up is the slow part)."""
    with real_daemon() as endpoint:
        yield endpoint


@pytest.fixture(params=["in-process", "daemon"])
async def endpoint(request: pytest.FixtureRequest) -> AsyncIterator[FsEndpoint]:
    """Each test runs against both kinds of endpoint."""
    if request.param == "daemon":
        yield request.getfixturevalue("fs_daemon")
        return
    async with in_process() as served:
        yield served


@pytest.fixture
async def stub(endpoint: FsEndpoint) -> AsyncIterator[Any]:
    async with endpoint.channel() as channel:
        yield fs_pb2_grpc.FsServiceStub(channel)  # type: ignore[no-untyped-call]
