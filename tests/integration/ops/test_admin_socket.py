"""The admin socket against a real daemon: who may connect (the kernel
decides), ps, kill, health, and the audit log over the socket."""

from __future__ import annotations

import json
import stat
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc
from hostcap_proto.audit import encode_line, parse_line, verify_files
from hostcap_proto.errors import from_rpc_error
from hostcap_proto.v1 import admin_pb2, admin_pb2_grpc, common_pb2
from ops_support import DEADLINE_S, connect_as, hostcapctl, hostcapctl_as, wait_admin, wait_until
from support.daemon import NOBODY, REPO, Daemon, audit_records, processes_with
from support.process import Client, request

#: Debian's adm group, standing in for the configured admin group.
ADM_GID = 4
#: A tenant whose socket nobody's group may reach: its spawns run as
#: another user (Debian's daemon, uid 1), since check-config refuses a
#: socket group the run-as identity belongs to.
NOBODY_CONNECTS = {"socket_group": NOBODY, "run_as_user": 1, "run_as_group": 1}


async def start_sleeper(client: Client, marker: str, script: str = "sleep 1000") -> Any:
    """A streaming spawn that stays running; returns (call, Started)."""
    call = client.stub.Spawn(request(["sh", "-c", script], env={"TEST_MARKER": marker}))
    async for event in call:
        if event.WhichOneof("event") == "started":
            return call, event.started
        raise AssertionError(f"the spawn did not start: {event}")
    raise AssertionError("the stream ended before Started")


def admin_stub(daemon: Daemon) -> tuple[grpc.aio.Channel, admin_pb2_grpc.AdminServiceStub]:
    ch = grpc.aio.insecure_channel(f"unix:{daemon.admin_socket}")
    return ch, admin_pb2_grpc.AdminServiceStub(ch)  # type: ignore[no-untyped-call]


# --- who may connect ------------------------------------------------------------------


def test_a_non_admin_uid_is_refused_by_the_kernel(start_daemon: Callable[..., Daemon]) -> None:
    # A tenant socket nobody's group may reach, in the same directory, proves
    # the directory is reachable: the refusal comes from the admin socket itself.
    daemon = wait_admin(start_daemon(tenants={"dev": NOBODY_CONNECTS}))
    st = daemon.admin_socket.stat()
    assert (st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)) == (0, 0, 0o600)

    assert connect_as(NOBODY, NOBODY, [], daemon.socket) == {"connected": True, "uid": NOBODY}
    assert connect_as(NOBODY, NOBODY, [], daemon.admin_socket) == {
        "connected": False,
        "errno": "EACCES",
        "uid": NOBODY,
    }
    admin = ["--admin-socket", str(daemon.admin_socket)]
    ps = hostcapctl_as(NOBODY, NOBODY, [], *admin, "ps", "--json")
    assert ps.returncode != 0 and "Permission denied" in ps.stdout + ps.stderr, ps
    health = hostcapctl_as(NOBODY, NOBODY, [], *admin, "health")
    assert health.returncode == 2, health
    # Root may.
    assert hostcapctl("health", admin=daemon.admin_socket).stdout == "SERVING\n"


def test_the_admin_group_may_connect_and_others_may_not(
    start_daemon: Callable[..., Daemon], state_dir: Path
) -> None:
    admin = {"socket": str(state_dir / "run" / "admin.sock"), "group": ADM_GID, "mode": 0o660}
    daemon = wait_admin(start_daemon(tenants={"dev": NOBODY_CONNECTS}, admin=admin))
    st = daemon.admin_socket.stat()
    assert (st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)) == (0, ADM_GID, 0o660)
    member = hostcapctl_as(
        NOBODY, NOBODY, [ADM_GID], "--admin-socket", str(daemon.admin_socket), "health"
    )
    assert (member.returncode, member.stdout) == (0, "SERVING\n"), member
    outsider = connect_as(NOBODY, NOBODY, [], daemon.admin_socket)
    assert (outsider["connected"], outsider.get("errno")) == (False, "EACCES")


def test_an_admin_mode_open_to_others_is_refused_at_start(
    start_daemon: Callable[..., Daemon], state_dir: Path
) -> None:
    admin = {"socket": str(state_dir / "run" / "admin.sock"), "mode": 0o666}
    try:
        start_daemon(admin=admin)
    except RuntimeError as error:
        assert "admin" in str(error) and "0o666" in str(error)
    else:
        raise AssertionError("the daemon served an admin socket open to everyone")
    assert not (state_dir / "run" / "admin.sock").exists()


# --- ps, kill, health --------------------------------------------------------------------


async def test_ps_lists_a_running_spawn_with_its_tenant(
    start_daemon: Callable[..., Daemon], marker: str
) -> None:
    daemon = wait_admin(start_daemon(tenants={"dev": {}, "ci": {}}))
    client = Client(daemon.socket_of("ci"))
    try:
        call, started = await start_sleeper(client, marker, f"sleep 1000 # {marker}")
        listed = hostcapctl("ps", "--json", admin=daemon.admin_socket)
        assert listed.returncode == 0, listed.stderr
        spawns = json.loads(listed.stdout)
        assert [s["spawn_id"] for s in spawns] == [started.spawn_id]
        (spawn,) = spawns
        assert set(spawn) == {"spawn_id", "tenant", "pid", "argv", "age_s", "limits", "detached"}
        assert spawn["tenant"] == "ci"
        assert spawn["pid"] == started.pid
        assert spawn["argv"] == ["sh", "-c", f"sleep 1000 # {marker}"]
        assert spawn["age_s"] >= 0
        assert spawn["limits"]["wall_seconds"] == 60  # the tenant's default, as applied

        table = hostcapctl("ps", admin=daemon.admin_socket)
        assert table.returncode == 0
        header, row = table.stdout.splitlines()
        assert header.split() == ["SPAWN", "TENANT", "PID", "AGE", "COMMAND"]
        assert row.split()[:3] == [started.spawn_id, "ci", str(started.pid)]
        only_dev = json.loads(
            hostcapctl("ps", "--json", "--tenant", "dev", admin=daemon.admin_socket).stdout
        )
        assert only_dev == []
        call.cancel()
    finally:
        await client.close()


async def test_ps_redacts_secrets_in_argv_as_the_audit_log_does(
    daemon: Daemon, client: Client, marker: str
) -> None:
    wait_admin(daemon)
    call, started = await start_sleeper(
        client, marker, f"sleep 1000 # {marker} --password=hunter2 TOKEN=s3cr3tvalue"
    )
    (spawn,) = json.loads(hostcapctl("ps", "--json", admin=daemon.admin_socket).stdout)
    shown = " ".join(spawn["argv"])
    assert "hunter2" not in shown and "s3cr3tvalue" not in shown
    assert "--password=[REDACTED]" in shown and "TOKEN=[REDACTED]" in shown
    assert marker in shown  # what is not secret is shown as is
    table = hostcapctl("ps", admin=daemon.admin_socket).stdout
    assert "hunter2" not in table and marker in table
    (exec_record,) = [
        r
        for r in audit_records(daemon.audit_path)
        if r["event"] == "process.exec" and r["spawn_id"] == started.spawn_id
    ]
    assert exec_record["argv"] == spawn["argv"]
    call.cancel()


async def test_kill_ends_the_spawn_cancelled_with_its_tree_gone(
    daemon: Daemon, client: Client, marker: str
) -> None:
    wait_admin(daemon)
    # A grandchild in its own session: killing the direct child alone would miss it.
    call, started = await start_sleeper(client, marker, "setsid sh -c 'sleep 1000' & sleep 1000")
    wait_until(lambda: len(processes_with(marker)) >= 3, "the tree is up")
    killed = hostcapctl("kill", started.spawn_id, "--json", admin=daemon.admin_socket)
    assert killed.returncode == 0, killed.stderr
    result = json.loads(killed.stdout)
    assert result["spawn_id"] == started.spawn_id
    assert result["tenant"] == "dev"
    assert result["outcome"] == "CANCELLED"
    assert "administrator" in result["message"]
    # The kill returns once the tree is gone.
    assert processes_with(marker) == []
    events = [e async for e in call]
    exited = events[-1].exited
    assert common_pb2.Outcome.Name(exited.outcome) == "CANCELLED"
    assert "administrator" in exited.message
    exits = [
        r
        for r in audit_records(daemon.audit_path)
        if r["event"] == "process.exit" and r.get("spawn_id") == started.spawn_id
    ]
    assert [(r["outcome"], "administrator" in r["message"]) for r in exits] == [("CANCELLED", True)]
    assert json.loads(hostcapctl("ps", "--json", admin=daemon.admin_socket).stdout) == []


async def test_kill_takes_a_unique_id_prefix_and_refuses_an_ambiguous_one(
    daemon: Daemon, client: Client, marker: str
) -> None:
    wait_admin(daemon)
    calls: list[Any] = []
    ids: list[str] = []
    # Sleepers until two ids share their first character (17 at most).
    while len({i[0] for i in ids}) == len(ids):
        call, started = await start_sleeper(client, marker)
        calls.append(call)
        ids.append(started.spawn_id)
    first = ids[-1][0]
    sharing = sorted(i for i in ids if i[0] == first)
    ambiguous = hostcapctl("kill", first, admin=daemon.admin_socket)
    assert ambiguous.returncode == 125, ambiguous
    assert f"spawn id prefix {first!r} is ambiguous" in ambiguous.stderr
    assert all(i in ambiguous.stderr for i in sharing)
    assert sorted(
        s["spawn_id"]
        for s in json.loads(hostcapctl("ps", "--json", admin=daemon.admin_socket).stdout)
    ) == sorted(ids)
    # The shortest prefix unique among them kills exactly that spawn.
    target = sharing[0]
    n = 1
    while sum(i.startswith(target[:n]) for i in ids) > 1:
        n += 1
    killed = hostcapctl("kill", target[:n], "--json", admin=daemon.admin_socket)
    assert killed.returncode == 0, killed.stderr
    assert json.loads(killed.stdout)["spawn_id"] == target
    left = json.loads(hostcapctl("ps", "--json", admin=daemon.admin_socket).stdout)
    assert sorted(s["spawn_id"] for s in left) == sorted(i for i in ids if i != target)
    for call in calls:
        call.cancel()


def test_kill_of_an_unknown_spawn_is_not_found(daemon: Daemon) -> None:
    wait_admin(daemon)
    result = hostcapctl("kill", "0" * 32, admin=daemon.admin_socket)
    assert result.returncode == 125
    assert "NOT_FOUND" in result.stderr


def test_health_is_serving_then_unreachable_after_stop(daemon: Daemon) -> None:
    wait_admin(daemon)
    served = hostcapctl("health", admin=daemon.admin_socket)
    assert (served.returncode, served.stdout) == (0, "SERVING\n")
    tenant = hostcapctl("health", tenant=daemon.socket)
    assert (tenant.returncode, tenant.stdout) == (0, "SERVING\n")
    assert daemon.stop() == 0
    gone = hostcapctl("health", "--timeout", "2", admin=daemon.admin_socket)
    assert gone.returncode == 2


# --- the audit log over the socket ----------------------------------------------------------


async def test_audit_tail_follow_shows_a_new_record_as_it_is_written(
    daemon: Daemon, client: Client, marker: str
) -> None:
    wait_admin(daemon)
    last_stored = daemon.audit_path.read_text().splitlines()[-1]
    follower = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "hostcap.ctl.main",
            "--admin-socket",
            str(daemon.admin_socket),
            "audit",
            "tail",
            "-f",
            "-n",
            "1",
            "--json",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
    )
    try:
        # The daemon subscribes before it reads the tail: once the last stored
        # record has arrived, everything written from now on will follow.
        assert (await _readline(follower, DEADLINE_S)).rstrip("\n") == last_stored
        # Then the tail's own record (written after what it read), naming the follower.
        own = parse_line((await _readline(follower, DEADLINE_S)).rstrip("\n").encode())
        assert (own["event"], own["method"], own["caller"]["pid"]) == (
            "admin.call",
            "TailAudit",
            follower.pid,
        )
        result = await client.run("echo", marker)
        assert result.exited.exit_code == 0
        seen: list[dict[str, Any]] = []
        while not any(r.get("event") == "process.exit" for r in seen):
            seen.append(parse_line((await _readline(follower, DEADLINE_S)).rstrip("\n").encode()))
        assert [r["event"] for r in seen] == ["process.exec", "process.exit"]
        assert seen[0]["argv"] == ["echo", marker]
        assert {r["spawn_id"] for r in seen} == {result.started.spawn_id}
        # Exactly the stored lines, so they verify against the file's chain.
        stored = daemon.audit_path.read_bytes().splitlines(keepends=True)
        for record in seen:
            assert encode_line(record) in stored
        assert follower.poll() is None  # still following
        # Until the daemon stops: then the stream ends cleanly.
        assert daemon.stop() == 0
        assert follower.wait(DEADLINE_S) == 0
        assert follower.stderr is not None
        assert "the daemon closed the stream" in follower.stderr.read()
    finally:
        if follower.poll() is None:
            follower.terminate()
            follower.wait(DEADLINE_S)


async def _readline(proc: subprocess.Popen[str], timeout: float) -> str:
    import asyncio

    assert proc.stdout is not None
    line = await asyncio.wait_for(asyncio.to_thread(proc.stdout.readline), timeout)
    if not line:
        raise AssertionError(f"the follower ended: {proc.stderr.read() if proc.stderr else ''}")
    return line


async def test_audit_tail_and_query_over_the_socket_match_the_file(
    daemon: Daemon, client: Client, marker: str
) -> None:
    wait_admin(daemon)
    result = await client.run("sh", "-c", "exit 3", labels={"case": marker})
    spawn_id = result.started.spawn_id
    lines = daemon.audit_path.read_text().splitlines()

    tail = hostcapctl("audit", "tail", "-n", "2", "--json", admin=daemon.admin_socket)
    assert tail.returncode == 0, tail.stderr
    assert tail.stdout.splitlines() == lines[-2:]

    query = hostcapctl(
        "audit",
        "query",
        "--spawn",
        spawn_id,
        "--event",
        "process.*",
        "--json",
        admin=daemon.admin_socket,
    )
    assert query.returncode == 0, query.stderr
    from_file = hostcapctl(
        "audit",
        "query",
        "--file",
        str(daemon.audit_path),
        "--spawn",
        spawn_id,
        "--event",
        "process.*",
        "--json",
    )
    assert query.stdout == from_file.stdout
    records = [json.loads(line) for line in query.stdout.splitlines()]
    assert [r["event"] for r in records] == ["process.exec", "process.exit"]
    assert records[1]["exit_code"] == 3

    outcome = hostcapctl(
        "audit", "query", "--outcome", "exited", "--since", "1h", admin=daemon.admin_socket
    )
    assert outcome.returncode == 0
    assert spawn_id in outcome.stdout
    assert verify_files([daemon.audit_path]).ok


async def test_admin_rpcs_refuse_bad_input_with_a_reason(daemon: Daemon) -> None:
    wait_admin(daemon)
    ch, stub = admin_stub(daemon)
    try:
        try:
            await stub.Kill(admin_pb2.KillRequest(spawn_id=""))
        except grpc.aio.AioRpcError as error:
            wire = from_rpc_error(error)
            assert wire is not None and wire.reason == "NOT_FOUND"
        else:
            raise AssertionError("Kill of no spawn succeeded")
        try:
            async for _ in stub.TailAudit(admin_pb2.TailAuditRequest(lines=10**9)):
                pass
        except grpc.aio.AioRpcError as error:
            wire = from_rpc_error(error)
            assert wire is not None and wire.reason == "INVALID_ARGUMENT"
        else:
            raise AssertionError("an unbounded tail was accepted")
    finally:
        await ch.close()


def test_without_a_group_the_admin_socket_is_root_only_whatever_the_mode(
    start_daemon: Callable[..., Daemon], state_dir: Path
) -> None:
    # The default mode is 0o660; with no group those group bits would be root's group.
    admin = {"socket": str(state_dir / "run" / "admin.sock")}
    daemon = wait_admin(start_daemon(admin=admin))
    st = daemon.admin_socket.stat()
    assert (st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)) == (0, 0, 0o600)


async def test_audit_tail_and_query_reach_into_rotated_files(
    start_daemon: Callable[..., Daemon], state_dir: Path
) -> None:
    audit = {
        "path": str(state_dir / "log" / "audit.jsonl"),
        "group": "root",
        "journal": "off",
        "max_bytes": 4096,
        "keep_files": 100,
    }
    daemon = wait_admin(start_daemon(audit=audit))
    client = Client(daemon.socket)
    try:
        for i in range(12):
            assert (await client.run("echo", f"round-{i}")).exited.exit_code == 0
    finally:
        await client.close()
    files = [*sorted(daemon.audit_path.parent.glob("audit.jsonl.*")), daemon.audit_path]
    assert len(files) >= 3, "the log did not rotate"
    stored = [line for f in files for line in f.read_text().splitlines()]
    current = daemon.audit_path.read_text().splitlines()
    count = len(current) + 5  # more than the current file holds
    tail = hostcapctl("audit", "tail", "-n", str(count), "--json", admin=daemon.admin_socket)
    assert tail.returncode == 0, tail.stderr
    assert tail.stdout.splitlines() == stored[-count:]
    query = hostcapctl(
        "audit", "query", "--event", "process.exec", "--json", admin=daemon.admin_socket
    )
    execs = [json.loads(line) for line in query.stdout.splitlines()]
    assert [r["argv"][1] for r in execs] == [f"round-{i}" for i in range(12)]
    # The reads wrote their admin.call records (which may have rotated the log).
    files = [*sorted(daemon.audit_path.parent.glob("audit.jsonl.*")), daemon.audit_path]
    assert verify_files(files).ok


def test_check_config_refuses_an_admin_mode_open_to_others(tmp_path: Path) -> None:
    import subprocess
    import sys

    from support import toml
    from support.daemon import daemon_config, tenant_config

    config = daemon_config(tmp_path, {"dev": tenant_config(tmp_path)})
    config["admin"]["mode"] = 0o664
    path = tmp_path / "bad.toml"
    path.write_text(toml.dumps(config))
    done = subprocess.run(
        [sys.executable, "-m", "hostcapd", "check-config", str(path)],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 2
    assert "admin.mode" in done.stderr and "0o664" in done.stderr


async def test_ps_tree_shows_every_process_of_a_spawn(
    daemon: Daemon, client: Client, marker: str
) -> None:
    wait_admin(daemon)
    # A grandchild in its own session (it leaves the tree, not the cgroup)
    # and one that holds memory.
    script = (
        "setsid sh -c 'sleep 1000' & "
        "python3 -c 'import time; b = bytearray(32 << 20); time.sleep(1000)' & sleep 1000"
    )
    call, started = await start_sleeper(client, marker, script)
    wait_until(lambda: len(processes_with(marker)) >= 5, "the tree is up")
    listed = hostcapctl("ps", "--json", "--tree", admin=daemon.admin_socket)
    assert listed.returncode == 0, listed.stderr
    (spawn,) = json.loads(listed.stdout)
    processes = spawn["processes"]
    pids = {p["pid"] for p in processes}
    assert set(processes_with(marker)) <= pids, (processes, processes_with(marker))
    assert processes[0]["pid"] == started.pid
    names = sorted(p["name"] for p in processes)
    assert names.count("sleep") == 2 and "python3" in names, names
    python = next(p for p in processes if p["name"] == "python3")
    assert python["rss_bytes"] >= 32 << 20
    assert all(p["cpu_seconds"] >= 0 and p["threads"] >= 1 for p in processes)
    # Names only: a child's command line is never shown (it may hold secrets).
    assert all(
        set(p) == {"pid", "ppid", "name", "cpu_seconds", "rss_bytes", "threads"} for p in processes
    )
    table = hostcapctl("ps", "--tree", admin=daemon.admin_socket)
    assert table.returncode == 0, table.stderr
    lines = table.stdout.splitlines()
    assert lines[1].split()[0] == started.spawn_id
    assert len([line for line in lines[2:] if "└" in line]) == len(processes)
    assert not any("bytearray" in line for line in lines[2:])
    call.cancel()


async def test_ps_tree_without_a_cgroup_follows_the_pid_namespace(
    start_daemon: Callable[..., Daemon], marker: str
) -> None:
    daemon = wait_admin(start_daemon(tenants={"dev": {"sandbox": {"cgroup": "off"}}}))
    client = Client(daemon.socket)
    try:
        call, _ = await start_sleeper(client, marker, "setsid sh -c 'sleep 1000' & sleep 1000")
        wait_until(lambda: len(processes_with(marker)) >= 3, "the tree is up")
        listed = hostcapctl("ps", "--json", "--tree", admin=daemon.admin_socket)
        assert listed.returncode == 0, listed.stderr
        (spawn,) = json.loads(listed.stdout)
        assert set(processes_with(marker)) <= {p["pid"] for p in spawn["processes"]}
        call.cancel()
    finally:
        await client.close()
