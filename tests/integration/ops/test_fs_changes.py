"""Each spawn's fs.changes record names exactly the files it created,
modified, deleted or renamed beneath the tenant's roots (decision 0030):
two spawns of one tenant running at once each get their own, a process the
command left behind is attributed to its spawn, and the record comes before
the spawn's exit record."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hostcap_proto.v1 import host_pb2, host_pb2_grpc
from ops_support import sighup_reload
from support.daemon import Daemon, audit_records
from support.process import Client, outcome

MiB = 1 << 20

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="loop devices and fanotify need root")

#: Write, rename and delete its own files; the second spawn's start waits on
#: a file the first makes, so they surely overlap.
WORK = r"""
set -e
cd "$1"; me=$2
mkdir -p "d-$me"
echo one > "d-$me/new.txt"
echo keep > "keep-$me.txt"
echo gone > "gone-$me.txt"
mv "d-$me/new.txt" "d-$me/moved.txt"
rm "gone-$me.txt"
echo more >> "existing-$me.txt"
mkdir "tmp-$me"; echo t > "tmp-$me/t"; rm -r "tmp-$me"
touch "started-$me"
i=0; while [ ! -e "started-$3" ] && [ $i -lt 200 ]; do sleep 0.05; i=$((i+1)); done
echo late > "after-$me.txt"
"""


def hostcapctl(*args: str) -> str:
    """`hostcapctl audit query ARGS`, the installed command (an --admin-socket
    first goes before the subcommand)."""
    admin = list(args[:2]) if args[0] == "--admin-socket" else []
    done = subprocess.run(
        [
            str(Path(sys.executable).parent / "hostcapctl"),
            *admin,
            "audit",
            "query",
            *args[len(admin) :],
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def hostcapctl_json(*args: str) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = json.loads(hostcapctl(*args, "--format", "json"))
    return found


def _changes(daemon: Daemon, spawn_id: str) -> dict[str, Any]:
    records = list(audit_records(daemon.audit_path))
    mine = [r for r in records if r.get("spawn_id") == spawn_id]
    events = [r["event"] for r in mine]
    assert "fs.changes" in events, events
    assert events.index("fs.changes") < events.index("process.exit"), events
    return next(r for r in mine if r["event"] == "fs.changes")


def _by_path(record: dict[str, Any], root: str) -> dict[str, list[str]]:
    return {c["path"].removeprefix(root + "/"): c["kinds"] for c in record["changes"]}


@pytest.mark.parametrize(
    "sandbox", [{}, {"pid_namespace": "off"}], ids=["init-as-pid-1", "no-pid-namespace"]
)
async def test_two_concurrent_spawns_each_name_exactly_their_own_changes(
    start_daemon: Callable[..., Daemon], sandbox: dict[str, str]
) -> None:
    """With a pid namespace a spawn's root is its init; without one, its command."""
    daemon = start_daemon(tenants={"dev": {"disk": {"budget_bytes": 64 * MiB}, "sandbox": sandbox}})
    root = str(daemon.root("dev"))
    client = Client(daemon.socket)
    try:
        made = await client.run(
            "sh", "-c", 'cd "$1"; echo x > existing-a.txt; echo x > existing-b.txt', "sh", root
        )
        assert _by_path(_changes(daemon, made.started.spawn_id), root) == {
            "existing-a.txt": ["created", "modified"],
            "existing-b.txt": ["created", "modified"],
        }
        a, b = await asyncio.gather(
            client.run("sh", "-c", WORK, "sh", root, "a", "b", limits={"wall_seconds": 60}),
            client.run("sh", "-c", WORK, "sh", root, "b", "a", limits={"wall_seconds": 60}),
        )
    finally:
        await client.close()
    assert outcome(a) == "EXITED" and a.exited.exit_code == 0, a.stderr
    assert outcome(b) == "EXITED" and b.exited.exit_code == 0, b.stderr
    for result, me in ((a, "a"), (b, "b")):
        record = _changes(daemon, result.started.spawn_id)
        assert record["complete"], record
        assert _by_path(record, root) == {
            f"d-{me}": ["created"],
            f"d-{me}/new.txt": ["created", "modified", "renamed_from"],
            f"d-{me}/moved.txt": ["renamed_to"],
            f"keep-{me}.txt": ["created", "modified"],
            f"gone-{me}.txt": ["created", "modified", "deleted"],
            f"existing-{me}.txt": ["modified"],
            # A directory removed before its events were read: still named.
            f"tmp-{me}": ["created", "deleted"],
            f"tmp-{me}/t": ["created", "modified", "deleted"],
            f"started-{me}": ["created"],
            f"after-{me}.txt": ["created", "modified"],
        }, record
        sizes = {c["path"]: c.get("size") for c in record["changes"]}
        assert sizes[f"{root}/keep-{me}.txt"] == 5
        assert sizes[f"{root}/gone-{me}.txt"] is None  # deleted: nothing to measure
        assert next(c for c in record["changes"] if c["path"] == f"{root}/d-{me}")["dir"]

    # Which spawn created, changed or deleted a file: from the files and the daemon.
    a_id, b_id = a.started.spawn_id, b.started.spawn_id
    for source in (
        ["--file", str(daemon.audit_path)],
        ["--admin-socket", str(daemon.admin_socket)],
    ):
        found = hostcapctl_json(*source, "--path", f"{root}/gone-b.txt")
        assert [(r["event"], r["spawn_id"]) for r in found] == [("fs.changes", b_id)], found
        found = hostcapctl_json(*source, "--path", f"{root}/d-a")  # beneath a directory
        assert [r["spawn_id"] for r in found] == [a_id]
        found = hostcapctl_json(*source, "--changed-by", a_id[:8])
        assert [(r["event"], r["spawn_id"]) for r in found] == [("fs.changes", a_id)]
    table = hostcapctl("--file", str(daemon.audit_path), "--path", f"{root}/gone-a.txt")
    assert f"created,modified,deleted {root}/gone-a.txt" in table, table


async def test_a_left_behind_grandchild_is_attributed_to_its_spawn(
    start_daemon: Callable[..., Daemon],
) -> None:
    """The writer's parent has exited (it is reparented, in a session of its
    own) and the writer exits right after its write, so when its event is read
    neither it nor its parent may exist: only its ancestry names the spawn. A
    second spawn runs meanwhile, so "the tenant's only spawn" would not do."""
    daemon = start_daemon(tenants={"dev": {"disk": {"budget_bytes": 64 * MiB}}})
    root = str(daemon.root("dev"))
    leaver = (
        "cd \"$1\"; (setsid sh -c 'sleep 0.3; echo late > orphan.txt' &) ; "
        "sleep 1.5; test -s orphan.txt"
    )
    client = Client(daemon.socket)
    try:
        left, other = await asyncio.gather(
            client.run("sh", "-c", leaver, "sh", root, limits={"wall_seconds": 60}),
            client.run(
                "sh", "-c", 'sleep 0.2; echo x > "$1/other.txt"; sleep 1', "sh", root,
                limits={"wall_seconds": 60},
            ),
        )  # fmt: skip
    finally:
        await client.close()
    assert outcome(left) == "EXITED" and left.exited.exit_code == 0, left.stderr
    assert outcome(other) == "EXITED", other.stderr
    assert _by_path(_changes(daemon, left.started.spawn_id), root) == {
        "orphan.txt": ["created", "modified"]
    }
    assert _by_path(_changes(daemon, other.started.spawn_id), root) == {
        "other.txt": ["created", "modified"]
    }


async def test_a_spawn_that_changes_nothing_has_an_empty_record_and_fs_api_writes_are_not_its(
    start_daemon: Callable[..., Daemon],
) -> None:
    daemon = start_daemon(tenants={"dev": {"disk": {"budget_bytes": 64 * MiB}}})
    client = Client(daemon.socket)
    try:
        result = await client.run("true")
    finally:
        await client.close()
    record = _changes(daemon, result.started.spawn_id)
    assert record["changes"] == [] and record["complete"], record


def test_required_fs_changes_without_a_file_system_of_its_own_refuses_the_tenant(
    start_daemon: Callable[..., Daemon],
) -> None:
    with pytest.raises(RuntimeError, match="fs_changes") as refused:
        start_daemon(tenants={"dev": {"sandbox": {"fs_changes": "required"}}})
    assert "no file system of its own" in str(refused.value)


async def test_capabilities_report_fs_changes_applied_with_a_disk_budget(
    start_daemon: Callable[..., Daemon],
) -> None:
    daemon = start_daemon(
        tenants={"dev": {"disk": {"budget_bytes": 64 * MiB}, "sandbox": {"fs_changes": "required"}}}
    )
    client = Client(daemon.socket)
    try:
        stub = host_pb2_grpc.HostServiceStub(client.channel)  # type: ignore[no-untyped-call]
        caps = await stub.Capabilities(host_pb2.CapabilitiesRequest())
    finally:
        await client.close()
    fs = next(p for p in caps.protections if p.name == "fs_changes")
    assert fs.applied and fs.required, fs


async def test_a_host_without_the_mechanism_refuses_required_and_records_nothing_best_effort(
    start_daemon: Callable[..., Daemon],
) -> None:
    disk = {"budget_bytes": 64 * MiB}
    with pytest.raises(RuntimeError, match="requires fs_changes"):
        start_daemon(
            tenants={
                "dev": {
                    "disk": disk,
                    "sandbox": {"fs_changes": "required", "simulate_unavailable": ["fs_changes"]},
                }
            }
        )
    daemon = start_daemon(
        tenants={"dev": {"disk": disk, "sandbox": {"simulate_unavailable": ["fs_changes"]}}}
    )
    client = Client(daemon.socket)
    try:
        result = await client.run("sh", "-c", 'echo x > "$1/f"', "sh", str(daemon.root("dev")))
    finally:
        await client.close()
    mine = [
        r for r in audit_records(daemon.audit_path) if r.get("spawn_id") == result.started.spawn_id
    ]
    assert [r["event"] for r in mine] == ["process.exec", "process.exit"]
    fs = next(p for p in mine[0]["protections"] if p["name"] == "fs_changes")
    assert not fs["applied"] and "simulated" in fs["reason"]


async def test_sizes_and_hashes_are_read_beneath_the_root_and_never_through_a_symlink(
    start_daemon: Callable[..., Daemon],
) -> None:
    """The daemon (root) reads what it lists: a file the spawn swapped for a
    symlink to a root-only file before it ended must not be followed."""
    daemon = start_daemon(
        tenants={
            "dev": {
                "disk": {"budget_bytes": 64 * MiB},
                "fs_changes": {"sha256_max_bytes": MiB},
            }
        }
    )
    root = str(daemon.root("dev"))
    script = (
        'cd "$1"; printf hello > kept.txt; printf x > swapped; rm swapped; '
        "ln -s /etc/shadow swapped; mkdir sub; ln -s /etc sub/up"
    )
    client = Client(daemon.socket)
    try:
        result = await client.run("sh", "-c", script, "sh", root)
    finally:
        await client.close()
    assert outcome(result) == "EXITED" and result.exited.exit_code == 0, result.stderr
    by_path = {c["path"]: c for c in _changes(daemon, result.started.spawn_id)["changes"]}
    kept = by_path[f"{root}/kept.txt"]
    assert kept["size"] == 5
    assert kept["sha256"] == hashlib.sha256(b"hello").hexdigest()
    swapped = by_path[f"{root}/swapped"]
    assert swapped["kinds"] == ["created", "modified", "deleted"]
    assert "size" not in swapped and "sha256" not in swapped, swapped
    assert "size" not in by_path[f"{root}/sub/up"]


async def test_after_a_reload_spawns_are_recorded_by_the_same_reader_with_the_new_cap(
    start_daemon: Callable[..., Daemon],
) -> None:
    daemon = start_daemon(tenants={"dev": {"disk": {"budget_bytes": 64 * MiB}}})
    root = str(daemon.root("dev"))
    daemon.config["tenants"]["dev"]["fs_changes"] = {"max_paths": 2}
    daemon.write_config()
    record = sighup_reload(daemon)
    assert record.get("changed") == ["dev"], record
    client = Client(daemon.socket)
    try:
        result = await client.run("sh", "-c", 'cd "$1"; touch a b c d', "sh", root)
    finally:
        await client.close()
    changes = _changes(daemon, result.started.spawn_id)
    assert _by_path(changes, root) == {"a": ["created"], "b": ["created"]}
    assert changes["events_beyond"] == {"created": 2} and changes["truncated"], changes
