"""A spawn's `process.exec` and `process.exit` are built by
`hostcapd.process.records` in the form their models dump them to, and the
writer takes them as built (`AuditLog.write_built`) without validating them
again. These tests are that validation, moved: for requests and reports of
every shape, the built fields are exactly what the model's check makes of
them (same keys, values and types), plain for the fast encoder, and the
records stored through `write_built` are the ones `write` stores."""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from audit_helpers import SettingsFactory
from hostcap_proto import audit as contract
from hostcap_proto.names import Rusage
from hostcapd.audit import AuditLog
from hostcapd.audit.built import Built
from hostcapd.bridge.values import Caller
from hostcapd.callers import CURRENT
from hostcapd.config import Tenant
from hostcapd.process import records
from hostcapd.process.executable import HashCache
from hostcapd.process.output import StreamCount, StreamTally
from hostcapd.process.report import Outcome, Report
from hostcapd.process.request import Prepared, SpawnRequest, prepare
from hostcapd.sandbox.profile import ProtectionStatus

CEILING = {
    "cpu_seconds": 60.0,
    "memory_bytes": 1 << 30,
    "wall_seconds": 600.0,
    "pids": 256,
    "output_bytes": 1 << 20,
    "file_size_bytes": 1 << 30,
    "open_files": 1024,
    "total_output_bytes": 1 << 24,
}
PROTECTIONS = (
    ProtectionStatus("exec_by_fd", True, "", True),
    ProtectionStatus("landlock", True, "ABI 7: fs, tcp, scope", True),
    ProtectionStatus("seccomp", False, "not built ✓", False),
    ProtectionStatus("cgroup", True, "cgroup v2", True),
)
HEADER = set(contract.HEADER_FIELDS)


@pytest.fixture
def tenant(tmp_path: Path) -> Tenant:
    work = tmp_path / "wörk"
    (work / "src").mkdir(parents=True)
    return Tenant.model_validate(
        {
            "name": "unit",
            "socket": str(tmp_path / "unit.sock"),
            "run_as_user": 65534,
            "run_as_group": 65534,
            "roots": [{"path": str(work)}],
            "env": {"PATH": "/usr/bin:/bin", "HOME": str(work)},
            "env_allowlist": ["LANG", "TERM"],
            "limits": {"default": {"wall_seconds": 30.0, "pids": 64}, "ceiling": CEILING},
        }
    )


def requests(tenant: Tenant) -> Iterator[SpawnRequest]:
    cwd = tenant.roots[0].path
    yield SpawnRequest(argv=("true",))
    yield SpawnRequest(argv=("sh", "-c", "echo héllo \U0001f600 --password=x"), cwd=str(cwd))
    yield SpawnRequest(
        argv=("ls", "-la"),
        cwd=str(cwd / "src"),
        env={"LANG": "C.UTF-8", "TERM": "xterm"},
        limits={"cpu_seconds": 5, "wall_seconds": 0.5, "memory_bytes": 1 << 20, "pids": 8},
        request_id="req-✓",
        labels={"session": "s1", "tool_call_id": "call-7", "ü": "日本語"},
    )
    yield SpawnRequest(argv=("true",), limits={"cpu_seconds": 1e-05, "output_bytes": 0})


@pytest.fixture
def prepared(tenant: Tenant) -> Iterator[list[tuple[SpawnRequest, Prepared]]]:
    made = [(r, prepare(r, tenant, PROTECTIONS, HashCache())) for r in requests(tenant)]
    yield made
    for _, p in made:
        p.close()


def typed(value: Any) -> Any:
    """`value` with every part's type spelled out, dict items sorted: 1 ==
    1.0 == True in Python, not in a record; the canonical form sorts keys."""
    if isinstance(value, dict):
        return ("dict", sorted((typed(k), typed(v)) for k, v in value.items()))
    if isinstance(value, list | tuple):
        return (type(value).__name__, [typed(v) for v in value])
    return (type(value).__name__, repr(value))


def reports() -> Iterator[Report]:
    usage = Rusage.from_wait4(0.002445, 0.0, 14276, 9, 7, 0, 8)
    yield Report(Outcome.EXITED, exit_code=0, message="exited with status 0", rusage=usage,
                 peak_memory_bytes=774144, duration=0.004216)  # fmt: skip
    yield Report(Outcome.SIGNALED, signal=9, message="killed by SIGKILL", rusage=usage,
                 duration=1.5)  # fmt: skip
    yield Report(Outcome.SPAWN_FAILED, message="chdir: Permission denied", failed_step="chdir",
                 errno=13)  # fmt: skip
    yield Report(Outcome.TIMEOUT, signal=15, message="timed out", oom_kills=2,
                 rusage=Rusage.from_wait4(5e-05, 1e-06, 0, 0, 0, 0, 0), duration=0.00002)  # fmt: skip
    yield Report(Outcome.EXITED, exit_code=3, signal=77, message="", duration=12345.6789)


def built_records(pairs: list[tuple[SpawnRequest, Prepared]], tenant: Tenant) -> list[Any]:
    out: list[tuple[str, dict[str, Any]]] = []
    rng = random.Random(5)
    for index, (request, p) in enumerate(pairs):
        spawn_id = f"{index:032x}"
        body = records.exec_record(tenant, spawn_id, request, p)
        out.append(("process.exec", body))
        token = CURRENT.set(Caller(uid=1000, gid=1000, pid=4242))  # a call's caller
        try:
            with_caller = records.exec_record(tenant, spawn_id, request, p)
        finally:
            CURRENT.reset(token)
        assert with_caller["caller"] == {"uid": 1000, "gid": 1000, "pid": 4242}
        out.append(("process.exec", with_caller))
        for report in reports():
            stdout: StreamTally | StreamCount = StreamTally(1 << 20)
            stdout.feed(rng.randint(0, 1 << 22))
            stderr = StreamCount()
            stderr.total = rng.randint(0, 100)
            out.append(
                (
                    "process.exit",
                    records.exit_record(
                        tenant.name,
                        spawn_id,
                        request,
                        4242,
                        report,
                        stdout,
                        stderr,
                        tty=(24, 80) if index % 2 else None,
                        input_counts=(3, 120) if index % 3 == 0 else None,
                    ),
                )
            )
    return out


def test_built_fields_are_what_the_model_makes_of_them(
    prepared: list[tuple[SpawnRequest, Prepared]], tenant: Tenant
) -> None:
    vouched = 0
    for event, body in built_records(prepared, tenant):
        assert not HEADER & body.keys()
        assert typed(contract.validate_event_fields_by_model(event, body)) == typed(body), body
        assert typed(contract.validate_event_fields(event, body)) == typed(body), body
        # What the builder vouches for (sealed unwalked) is what a walk finds.
        assert isinstance(body, Built) and body.plain == contract.fast_encodable(dict(body)), body
        vouched += body.plain
    assert 0 < vouched < len(built_records(prepared, tenant))


async def test_write_built_stores_what_write_stores(
    make_settings: SettingsFactory,
    prepared: list[tuple[SpawnRequest, Prepared]],
    tenant: Tenant,
    tmp_path: Path,
) -> None:
    checked = AuditLog.open(make_settings(), "boot-built")
    built = AuditLog.open(make_settings(path=tmp_path / "built" / "audit.jsonl"), "boot-built")
    cases = built_records(prepared, tenant)
    for event, body in cases:
        by_write = checked.write(event, **body)
        by_built = built.write_built(event, body)
        for record in (by_write, by_built):
            for name in ("time", "event_id", "run_id", "hash", "prev_hash"):
                record.pop(name)
        assert typed(by_built) == typed(by_write)
    _, durable = built.write_pending("process.exec", built=cases[0][1])
    await durable
    with pytest.raises(TypeError):
        built.write_pending("process.exec", built=cases[0][1], tenant="x")
    with pytest.raises(contract.AuditRecordError):
        built.write_built("process.exec", {**cases[0][1], "seq": 7})
    assert built.write_built_or_defer("process.exit", cases[2][1])
    await checked.close()
    await built.close()
    for settings_path in (checked.path, built.path):
        report = contract.verify_files([settings_path])
        assert report.failure is None, report.failure
        for raw in settings_path.read_bytes().splitlines():
            json.loads(raw)
