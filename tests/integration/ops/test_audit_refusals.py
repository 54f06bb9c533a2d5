"""A refused spawn's policy.deny says what was refused (issue 33): the argv,
redacted by the exec record's rules and with its digest, the executable as
asked, the cwd and the limits asked for; against a real daemon."""

from __future__ import annotations

from typing import Any

from hostcap_proto.audit import REDACTED, argv_sha256
from ops_support import hostcapctl
from support.daemon import Daemon, audit_records
from support.process import Client

TOKEN = "ghp_" + "Zq7" * 12


def last_deny(daemon: Daemon) -> dict[str, Any]:
    denies = [r for r in audit_records(daemon.audit_path) if r["event"] == "policy.deny"]
    assert denies, "no policy.deny was written"
    return denies[-1]


async def test_a_refused_spawn_records_its_argv_with_the_secret_redacted(
    daemon: Daemon, client: Client
) -> None:
    argv = ["env", f"GITHUB_TOKEN={TOKEN}", "sh", "-c", "echo run; API_KEY=k1 make deploy"]
    reason = await client.refusal(*argv, cwd="/etc", limits={"wall_seconds": 5})
    assert reason == "PATH_ESCAPES_ROOT"
    deny = last_deny(daemon)
    assert TOKEN not in daemon.audit_path.read_text() and "k1" not in deny["argv"][4]
    assert deny["argv"] == [
        "env", f"GITHUB_TOKEN={REDACTED}", "sh", "-c", f"echo run; API_KEY={REDACTED} make deploy"
    ]  # fmt: skip
    assert (deny["argv_redacted"], deny["argv_truncated"]) == (True, False)
    assert deny["argv_sha256"] == argv_sha256(argv)
    assert deny["executable_requested"] == "env" and "executable" not in deny
    assert deny["cwd"] == "/etc"
    assert deny["limits_requested"] == {"wall_seconds": 5.0}
    assert (deny["method"], deny["reason"]) == ("Run", "PATH_ESCAPES_ROOT")
    proved = hostcapctl(
        "audit", "verify-argv", "--file", str(daemon.audit_path), "--seq", str(deny["seq"]),
        "--", *argv,
    )  # fmt: skip
    assert proved.returncode == 0, proved.stdout + proved.stderr


async def test_a_refused_executable_and_refused_limits_are_named_as_asked(
    daemon: Daemon, client: Client
) -> None:
    reason = await client.refusal("no-such-tool-here", "--password", "hunter2")
    assert reason == "EXECUTABLE_NOT_FOUND"
    deny = last_deny(daemon)
    assert deny["argv"] == ["no-such-tool-here", "--password", REDACTED]
    assert deny["executable_requested"] == "no-such-tool-here"
    assert "cwd" not in deny  # none was asked for: the tenant's first root
    reason = await client.refusal("true", limits={"memory_bytes": 1 << 60, "pids": 0})
    assert reason.startswith("LIMIT")
    assert last_deny(daemon)["limits_requested"] == {"memory_bytes": 1 << 60, "pids": 0}
