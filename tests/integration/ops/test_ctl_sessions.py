"""hostcapctl run --detach, output and stop (issue 30), against a real daemon."""

from __future__ import annotations

import json
import time
from typing import Any

from hostcap_proto.v1 import process_pb2
from ops_support import hostcapctl, sighup_reload, wait_admin
from support.daemon import Daemon, audit_records, processes_with, wait_gone
from support.process import Client, request


def test_detach_output_by_offset_and_stop(daemon: Daemon, marker: str) -> None:
    started = hostcapctl(
        "run",
        "--detach",
        "--json",
        "--",
        "sh",
        "-c",
        f"echo hello-{marker}; exec sleep 300",
        tenant=daemon.socket,
    )
    assert started.returncode == 0, started.stderr
    spawn_id = json.loads(started.stdout)["spawn_id"]
    plain = hostcapctl("run", "--detach", "--", "true", tenant=daemon.socket)
    assert plain.returncode == 0 and len(plain.stdout.strip()) > 8, plain

    first = json.loads(
        hostcapctl("output", spawn_id, "--wait-ms", "5000", "--json", tenant=daemon.socket).stdout
    )
    assert first["stdout"] == f"hello-{marker}\n" and first["running"] is True
    assert "outcome" not in first
    assert first["next_offset"] == len(first["stdout"])

    ps = hostcapctl("ps", "--json", admin=daemon.admin_socket)
    assert [s["detached"] for s in json.loads(ps.stdout) if s["spawn_id"] == spawn_id] == [True]

    stopped = hostcapctl("stop", spawn_id, tenant=daemon.socket)
    assert stopped.returncode == 0, stopped.stderr
    deadline = time.monotonic() + 30
    while True:
        later = json.loads(
            hostcapctl(
                "output",
                spawn_id,
                "--offset",
                str(first["next_offset"]),
                "--wait-ms",
                "2000",
                "--json",
                tenant=daemon.socket,
            ).stdout
        )
        if not later["running"] or time.monotonic() > deadline:
            break
    assert later["running"] is False and later["outcome"] == "SIGNALED"
    assert later["stdout"] == "" and later["next_offset"] == first["next_offset"]
    exits = [
        r["outcome"]
        for r in audit_records(daemon.audit_path)
        if r.get("spawn_id") == spawn_id and r["event"] == "process.exit"
    ]
    assert exits == ["SIGNALED"]

    missing = hostcapctl("output", "no-such-spawn", "--json", tenant=daemon.socket)
    assert json.loads(missing.stdout)["error"]["reason"] == "NOT_FOUND"
    assert hostcapctl("stop", "no-such-spawn", tenant=daemon.socket).returncode != 0


def test_env_open_run_list_ps_close(daemon: Daemon, marker: str) -> None:
    opened = hostcapctl("env", "open", "--idle-timeout", "60", "--json", tenant=daemon.socket)
    assert opened.returncode == 0, opened.stderr
    env = json.loads(opened.stdout)["id"]
    plain = hostcapctl("env", "open", tenant=daemon.socket)
    assert plain.returncode == 0 and plain.stdout.strip().startswith("env-"), plain
    wrote = hostcapctl(
        "run", "--env", env, "--env", "LANG=C", "--", "sh", "-c", f"echo {marker} > /tmp/x",
        tenant=daemon.socket,
    )  # fmt: skip
    assert wrote.returncode == 0, wrote.stderr
    server = hostcapctl(
        "run", "--env", env, "--detach", "--json", "--", "sh", "-c", f"sleep 300; : {marker}",
        tenant=daemon.socket,
    )  # fmt: skip
    spawn_id = json.loads(server.stdout)["spawn_id"]
    read = hostcapctl("run", "--env", env, "--", "cat", "/tmp/x", tenant=daemon.socket)
    assert read.stdout == f"{marker}\n"
    listed = json.loads(hostcapctl("env", "list", "--json", tenant=daemon.socket).stdout)
    assert {e["id"]: e["spawn_ids"] for e in listed}[env] == [spawn_id]
    ps = json.loads(hostcapctl("ps", "--json", "--environments", admin=daemon.admin_socket).stdout)
    assert {e["id"]: e["spawn_ids"] for e in ps["environments"]}[env] == [spawn_id]
    assert env in hostcapctl("ps", admin=daemon.admin_socket).stdout
    closed = hostcapctl("env", "close", env, "--json", tenant=daemon.socket)
    assert json.loads(closed.stdout) == {"id": env, "spawns_ended": [spawn_id]}
    again = hostcapctl("env", "close", env, tenant=daemon.socket)
    assert again.returncode != 0 and "NOT_FOUND" in again.stderr
    missing = hostcapctl("run", "--env", env, "--", "true", tenant=daemon.socket)
    assert missing.returncode != 0 and "NOT_FOUND" in missing.stderr


async def test_a_reload_keeps_sessions_of_a_changed_tenant_and_ends_a_removed_ones(
    start_daemon: Any, marker: str
) -> None:
    """A changed config hands the tenant's environments and detached spawns to
    the new runtime; a removed tenant's are ended, the close saying why."""
    daemon = start_daemon(tenants={"dev": {}, "gone": {}})
    wait_admin(daemon)
    dev, gone = Client(daemon.socket_of("dev")), Client(daemon.socket_of("gone"))
    try:
        kept_env = (
            await dev.stub.OpenEnvironment(process_pb2.OpenEnvironmentRequest())
        ).environment_id
        kept = await dev.stub.Run(
            request(["sh", "-c", f"sleep 300; : {marker}-kept"], detached=True,
                    environment_id=kept_env)
        )  # fmt: skip
        gone_env = (
            await gone.stub.OpenEnvironment(process_pb2.OpenEnvironmentRequest())
        ).environment_id
        await gone.stub.Run(
            request(["sh", "-c", f"sleep 300; : {marker}-gone"], detached=True,
                    environment_id=gone_env)
        )  # fmt: skip
        del daemon.config["tenants"]["gone"]
        daemon.config["tenants"]["dev"]["max_concurrent_spawns"] = 63  # changed
        daemon.write_config()
        record = sighup_reload(daemon)
        assert (record["removed"], record["changed"]) == (["gone"], ["dev"])
        assert wait_gone(f"{marker}-gone", 20) == []
        assert processes_with(f"{marker}-kept")
        await dev.close()
        dev = Client(daemon.socket_of("dev"))
        listed = await dev.stub.ListEnvironments(process_pb2.ListEnvironmentsRequest())
        assert [e.environment_id for e in listed.environments] == [kept_env]
        answer = await dev.stub.ReadOutput(
            process_pb2.ReadOutputRequest(spawn_id=kept.started.spawn_id)
        )
        assert answer.running
        await dev.stub.CloseEnvironment(
            process_pb2.CloseEnvironmentRequest(environment_id=kept_env)
        )
        assert wait_gone(f"{marker}-kept", 20) == []
    finally:
        await dev.close()
        await gone.close()
    closes = {
        r["environment_id"]: r["reason"]
        for r in audit_records(daemon.audit_path)
        if r["event"] == "environment.close"
    }
    assert closes == {
        gone_env: "the tenant was removed from the config by a reload",
        kept_env: "closed by the client",
    }


def test_admin_kill_ends_a_detached_spawn(daemon: Daemon, marker: str) -> None:
    started = hostcapctl(
        "run", "--detach", "--json", "--", "sh", "-c", f"sleep 300; : {marker}",
        tenant=daemon.socket,
    )  # fmt: skip
    spawn_id = json.loads(started.stdout)["spawn_id"]
    killed = hostcapctl("kill", spawn_id, admin=daemon.admin_socket)
    assert killed.returncode == 0, killed.stderr
    assert wait_gone(marker, 20) == []
    ended = json.loads(
        hostcapctl("output", spawn_id, "--wait-ms", "5000", "--json", tenant=daemon.socket).stdout
    )
    assert ended["running"] is False and ended["outcome"] == "CANCELLED"
    assert "administrator" in ended["message"]
