"""The profile fails closed and reports honestly: a required protection the
host cannot apply refuses the tenant at start-up; a best-effort one that is
missing is reported in Capabilities, in each Started event and in each
process.exec audit record, and really is missing; `hostcapctl capabilities
--json` lists every protection by the issue's names."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from escape_attempts import SecurityHost, attack
from hostcap_proto.v1 import host_pb2, host_pb2_grpc
from support.daemon import REPO, Daemon, audit_records
from support.process import Client, request

PROTECTIONS = [
    "pid_namespace",
    "net_namespace",
    "ipc_namespace",
    "uts_namespace",
    "mount_namespace",
    "cgroup",
    "landlock",
    "seccomp",
    "rlimits",
    "no_new_privs",
    "uid_drop",
    "exec_by_fd",
    "fs_changes",
]
#: Applied only for a tenant with a file system of its own (a disk budget).
NEEDS_A_DISK = {"fs_changes"}
SIMULATED_NO_LANDLOCK = {"simulate_unavailable": ["landlock"]}


def test_required_landlock_on_a_host_without_it_refuses_the_tenant(
    start_daemon: Callable[..., Daemon],
) -> None:
    with pytest.raises(RuntimeError) as refused:
        start_daemon(
            tenants={"strict": {"sandbox": {**SIMULATED_NO_LANDLOCK, "landlock": "required"}}}
        )
    message = str(refused.value)
    assert "hostcapd exited with 2" in message  # non-zero: the daemon refused to start
    assert "tenant 'strict' requires landlock, which this host cannot apply" in message
    assert "simulated" in message


def test_required_landlock_refuses_even_beside_a_servable_tenant(
    start_daemon: Callable[..., Daemon], state_dir: Path
) -> None:
    """Never a silently weaker daemon: one unservable tenant stops start-up,
    and no socket of any tenant was left serving."""
    with pytest.raises(RuntimeError, match="requires landlock"):
        start_daemon(
            tenants={
                "fine": {},
                "strict": {"sandbox": {**SIMULATED_NO_LANDLOCK, "landlock": "required"}},
            }
        )
    assert not list((state_dir / "run").glob("*.sock"))


async def test_best_effort_landlock_missing_is_reported_everywhere_and_really_missing(
    start_daemon: Callable[..., Daemon],
) -> None:
    daemon = start_daemon(
        tenants={"loose": {"sandbox": {**SIMULATED_NO_LANDLOCK, "landlock": "best-effort"}}}
    )
    client = Client(daemon.socket)
    try:
        stub = host_pb2_grpc.HostServiceStub(client.channel)  # type: ignore[no-untyped-call]
        caps = await stub.Capabilities(host_pb2.CapabilitiesRequest())
        reported = {p.name: p for p in caps.protections}
        assert list(reported) == PROTECTIONS
        assert not reported["landlock"].applied and not reported["landlock"].required
        assert "simulated" in reported["landlock"].reason
        assert caps.landlock_abi == 0
        assert all(
            reported[n].applied for n in PROTECTIONS if n != "landlock" and n not in NEEDS_A_DISK
        )
        assert not reported["fs_changes"].applied
        assert "no file system of its own" in reported["fs_changes"].reason

        events = [e async for e in client.stub.Spawn(request(["true"]))]
        started = events[0].started
        in_started = {p.name: p.applied for p in started.protections}
        assert in_started["landlock"] is False and in_started["seccomp"] is True

        # The report is the truth: without landlock, the sandbox's own root
        # (no rule grants it) lists fine; it is EACCES in the full profile.
        found = await attack(client, 'report(var=attempt(os.listdir, "/"))')
        assert found == {"var": "ok"}
    finally:
        await client.close()
    execs = [r for r in audit_records(daemon.audit_path) if r["event"] == "process.exec"]
    assert execs and all(_protection(r, "landlock")["applied"] is False for r in execs)
    assert all(_protection(r, "seccomp")["applied"] is True for r in execs)
    assert any(r["spawn_id"] == started.spawn_id for r in execs)


def _protection(record: dict[str, Any], name: str) -> dict[str, Any]:
    return next(p for p in record["protections"] if p["name"] == name)


async def test_the_full_profile_denies_what_best_effort_left_open(alpha: Client) -> None:
    """The counterpart of the last check above, on the full-profile tenant."""
    assert await attack(alpha, 'report(var=attempt(os.listdir, "/"))') == {"var": "EACCES"}


def capabilities_json(socket: Path) -> dict[str, Any]:
    """`hostcapctl --socket S capabilities --json`, the installed command."""
    done = subprocess.run(
        [
            str(Path(sys.executable).parent / "hostcapctl"),
            "--socket",
            str(socket),
            "capabilities",
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=30,
        cwd=REPO,
    )
    assert done.returncode == 0, done.stderr
    data: dict[str, Any] = json.loads(done.stdout)
    return data


def test_hostcapctl_capabilities_json_lists_every_protection(host: SecurityHost) -> None:
    data = capabilities_json(host.socket("alpha"))
    protections = data["protections"]
    assert [p["name"] for p in protections] == PROTECTIONS
    for p in protections:
        assert {"name", "applied", "reason"} <= set(p)
        assert isinstance(p["applied"], bool) and isinstance(p["reason"], str)
    # This host offers everything the default profile requires.
    assert all(p["applied"] for p in protections if p["name"] not in NEEDS_A_DISK), protections
    by_name = {p["name"]: p for p in protections}
    assert by_name["landlock"]["reason"].startswith("ABI ")
    assert data["landlock_abi"] >= 1


def test_hostcapctl_capabilities_json_shows_namespaces_off(host: SecurityHost) -> None:
    by_name = {p["name"]: p for p in capabilities_json(host.socket("layers"))["protections"]}
    assert (by_name["pid_namespace"]["applied"], by_name["net_namespace"]["applied"]) == (
        False,
        False,
    )
    assert "off" in by_name["pid_namespace"]["reason"]
    assert by_name["landlock"]["applied"] and by_name["seccomp"]["applied"]
