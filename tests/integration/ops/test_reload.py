"""Config reload against a real daemon (SIGHUP and AdminService.Reload): a bad
config is refused and the old one keeps serving; tenants are added, removed
and replaced without touching the running spawns of the others."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc
from hostcap_proto.v1 import common_pb2, fs_pb2, fs_pb2_grpc, host_pb2, host_pb2_grpc
from ops_support import (
    DEADLINE_S,
    NotifySocket,
    hostcapctl,
    reload_records,
    sighup_reload,
    wait_admin,
    wait_until,
)
from support.daemon import (
    Daemon,
    audit_records,
    connectable,
    processes_with,
    runs_under,
    tenant_config,
)
from support.process import Client, outcome, request

#: A program that runs until the test creates the file `go` in its cwd (the
#: tenant's workspace), then prints $STAGE: the test decides when it ends.
WAIT_FOR_GO = 'while [ ! -e go ]; do sleep 0.05; done; echo "survived with STAGE=$STAGE"'


async def start_waiting(client: Client, marker: str) -> tuple[Any, Any]:
    call = client.stub.Spawn(request(["sh", "-c", WAIT_FOR_GO], env={"TEST_MARKER": marker}))
    async for event in call:
        assert event.WhichOneof("event") == "started", event
        return call, event.started
    raise AssertionError("no Started")


async def finish(call: Any) -> tuple[str, bytes, str]:
    """The rest of a spawn's stream: (outcome, stdout, message)."""
    out = b""
    async for event in call:
        kind = event.WhichOneof("event")
        if kind == "output" and event.output.stream == common_pb2.STDOUT:
            out += event.output.data
        elif kind == "exited":
            return common_pb2.Outcome.Name(event.exited.outcome), out, event.exited.message
    raise AssertionError("no Exited")


async def echo_on(socket: Path, text: str = "hello") -> bytes:
    client = Client(socket)
    try:
        result = await client.run("echo", text)
        assert outcome(result) == "EXITED", result.exited
        return bytes(result.stdout)
    finally:
        await client.close()


# --- a bad config is refused -------------------------------------------------------------


async def test_sighup_with_a_bad_config_keeps_the_old_one_serving(
    start_daemon: Callable[..., Daemon], notify: NotifySocket
) -> None:
    daemon = wait_admin(start_daemon(env={"NOTIFY_SOCKET": str(notify.path)}))
    daemon.config["tenants"]["dev"]["max_concurent_spawns"] = 3  # a typo: unknown key
    daemon.write_config()
    record = sighup_reload(daemon)
    assert record["message"].startswith("rejected: ")
    assert "max_concurent_spawns" in record["message"]
    assert record["tenants"] == ["dev"]
    # The reason is logged and shown to the service manager; the old config serves.
    wait_until(lambda: "max_concurent_spawns" in daemon.output(), "the reason is logged")
    status = notify.wait_for(lambda m: m.startswith("STATUS=reload rejected"), "STATUS=")
    assert "max_concurent_spawns" in status
    assert await echo_on(daemon.socket) == b"hello\n"
    assert daemon.proc is not None and daemon.proc.poll() is None


async def test_reload_over_the_admin_socket_says_why_a_config_is_refused(daemon: Daemon) -> None:
    wait_admin(daemon)
    daemon.config_path.write_text("[daemon\nthis is not TOML")
    refused = hostcapctl("reload", admin=daemon.admin_socket)
    assert refused.returncode == 125
    assert "INVALID_ARGUMENT" in refused.stderr and "not valid TOML" in refused.stderr
    assert "previous config keeps serving" in refused.stderr
    assert await echo_on(daemon.socket) == b"hello\n"


async def test_a_tenant_this_host_cannot_protect_is_refused_and_nothing_is_half_done(
    daemon: Daemon,
) -> None:
    wait_admin(daemon)
    socket = daemon.state / "run" / "weak.sock"
    daemon.config["tenants"]["weak"] = tenant_config(
        daemon.state, "weak", sandbox={"simulate_unavailable": ["seccomp"]}
    )
    daemon.write_config()
    refused = hostcapctl("reload", admin=daemon.admin_socket)
    assert refused.returncode == 125
    assert "PROTECTION_UNAVAILABLE" in refused.stderr and "seccomp" in refused.stderr
    assert not socket.exists()
    assert sorted(p.name for p in socket.parent.iterdir()) == ["admin.sock", "dev.sock"]
    assert await echo_on(daemon.socket) == b"hello\n"


def test_a_change_outside_the_tenants_is_refused(daemon: Daemon) -> None:
    wait_admin(daemon)
    daemon.config["daemon"]["kill_grace_seconds"] = 3
    daemon.write_config()
    record = sighup_reload(daemon)
    assert record["message"].startswith("rejected: the [daemon] settings changed")
    assert "restart hostcapd" in record["message"]


# --- tenants added, removed, replaced ------------------------------------------------------


async def test_sighup_adding_a_tenant_makes_its_socket_serve(daemon: Daemon) -> None:
    wait_admin(daemon)
    daemon.config["tenants"]["second"] = tenant_config(daemon.state, "second")
    daemon.write_config()
    record = sighup_reload(daemon)
    assert (record["message"], record["added"], record["removed"], record["changed"]) == (
        "applied",
        ["second"],
        [],
        [],
    )
    assert record["tenants"] == ["dev", "second"]
    socket = daemon.socket_of("second")
    assert connectable(socket)
    assert await echo_on(socket) == b"hello\n"
    # It is whole: its fs worker serves, and Capabilities reports what it applied.
    async with grpc.aio.insecure_channel(f"unix:{socket}") as ch:
        caps = await host_pb2_grpc.HostServiceStub(ch).Capabilities(  # type: ignore[no-untyped-call]
            host_pb2.CapabilitiesRequest()
        )
        assert caps.tenant == "second"
        assert {p.name for p in caps.fs_protections if p.applied} >= {"uid_drop", "landlock"}
        (daemon.root("second") / "planted.txt").write_text("x")
        listing = await fs_pb2_grpc.FsServiceStub(ch).ListDirectory(  # type: ignore[no-untyped-call]
            fs_pb2.ListDirectoryRequest(path=".")
        )
        assert [e.name for e in listing.entries] == ["planted.txt"]
    ps = hostcapctl("ps", "--json", admin=daemon.admin_socket)
    assert ps.returncode == 0


async def test_removing_a_tenant_removes_its_socket_and_ends_its_spawns(
    start_daemon: Callable[..., Daemon], marker: str
) -> None:
    daemon = wait_admin(start_daemon(tenants={"dev": {}, "gone": {}}))
    gone_socket = daemon.socket_of("gone")
    client = Client(gone_socket)
    try:
        call, started = await start_waiting(client, marker)
        del daemon.config["tenants"]["gone"]
        daemon.write_config()
        result = hostcapctl("reload", "--json", admin=daemon.admin_socket)
        assert result.returncode == 0, result.stderr
        assert result.stdout.strip() == '{"added": [], "removed": ["gone"], "changed": []}'
        assert not gone_socket.exists()
        ended, _, message = await asyncio.wait_for(finish(call), DEADLINE_S)
        assert ended == "DAEMON_SHUTDOWN"
        assert "removed from the config" in message
    finally:
        await client.close()
    wait_until(lambda: processes_with(marker) == [], "the removed tenant's tree is gone")
    assert await echo_on(daemon.socket) == b"hello\n"
    exits = [
        r
        for r in audit_records(daemon.audit_path)
        if r["event"] == "process.exit" and r.get("spawn_id") == started.spawn_id
    ]
    assert [r["outcome"] for r in exits] == ["DAEMON_SHUTDOWN"]


async def test_a_running_spawn_of_an_unrelated_tenant_survives_a_reload(
    start_daemon: Callable[..., Daemon], marker: str
) -> None:
    daemon = wait_admin(
        start_daemon(tenants={"dev": {"env": {"STAGE": "dev"}}, "old": {}, "edited": {}})
    )
    client = Client(daemon.socket)
    try:
        call, started = await start_waiting(client, marker)
        del daemon.config["tenants"]["old"]
        daemon.config["tenants"]["edited"]["max_concurrent_spawns"] = 5
        daemon.config["tenants"]["new"] = tenant_config(daemon.state, "new")
        daemon.write_config()
        record = sighup_reload(daemon)
        assert (record["added"], record["removed"], record["changed"]) == (
            ["new"],
            ["old"],
            ["edited"],
        )
        # Still the same live process, still listed, then it ends on its own terms.
        assert runs_under(started.pid, marker)
        ps = hostcapctl("ps", "--json", admin=daemon.admin_socket)
        assert started.spawn_id in ps.stdout
        (daemon.root("dev") / "go").touch()
        ended, out, _ = await asyncio.wait_for(finish(call), DEADLINE_S)
        assert (ended, out) == ("EXITED", b"survived with STAGE=dev\n")
    finally:
        await client.close()


async def test_a_changed_tenant_is_replaced_but_its_running_spawn_finishes_under_the_old_config(
    start_daemon: Callable[..., Daemon], marker: str
) -> None:
    daemon = wait_admin(start_daemon(tenants={"dev": {"env": {"STAGE": "before"}}}))
    socket = daemon.socket
    client = Client(socket)  # connected before the reload, used after it
    missing: list[bool] = []
    stop_watching = threading.Event()

    def watch_socket() -> None:
        # The replacement is a rename over the old socket: it is never missing.
        while not stop_watching.is_set():
            if not socket.exists():
                missing.append(True)

    watcher = threading.Thread(target=watch_socket)
    try:
        call, started = await start_waiting(client, marker)
        daemon.config["tenants"]["dev"]["env"]["STAGE"] = "after"
        daemon.write_config()
        watcher.start()
        result = hostcapctl("reload", admin=daemon.admin_socket)
        stop_watching.set()
        watcher.join()
        assert (result.returncode, result.stdout) == (0, "reloaded: changed dev\n"), result.stderr
        assert missing == []
        # New spawns, even over the connection made before, get the new config.
        fresh = await client.run("sh", "-c", "echo $STAGE")
        assert fresh.stdout == b"after\n"
        # The running one is untouched and ends under the config it started with.
        assert runs_under(started.pid, marker)
        (daemon.root("dev") / "go").touch()
        ended, out, _ = await asyncio.wait_for(finish(call), DEADLINE_S)
        assert (ended, out) == ("EXITED", b"survived with STAGE=before\n")
    finally:
        stop_watching.set()
        if watcher.is_alive():
            watcher.join()
        await client.close()
    assert [r["changed"] for r in reload_records(daemon)] == [["dev"]]


async def test_reloading_the_same_config_again_changes_nothing(daemon: Daemon) -> None:
    wait_admin(daemon)
    daemon.config["tenants"]["dev"]["max_concurrent_spawns"] = 7
    daemon.write_config()
    assert sighup_reload(daemon)["changed"] == ["dev"]
    again = sighup_reload(daemon)
    assert (again["message"], again["added"], again["removed"], again["changed"]) == (
        "no change",
        [],
        [],
        [],
    )
    assert await echo_on(daemon.socket) == b"hello\n"
