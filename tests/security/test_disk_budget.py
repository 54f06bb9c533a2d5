"""A tenant must not fill the volume its roots share with the host and the
audit log: each tenant's read-write roots live on a file system image of its
disk budget (a loop device), its space reserved when it is made. A sandboxed
program writing past the budget meets ENOSPC, the file API refuses
QUOTA_EXCEEDED (RESOURCE_EXHAUSTED) with a reason, the host volume's free
space does not move, and every spawn still runs and is audited."""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import Callable
from pathlib import Path

import grpc
import pytest
from hostcap_proto.errors import from_rpc_error
from hostcap_proto.v1 import fs_pb2, fs_pb2_grpc, host_pb2, host_pb2_grpc
from hostcapd.config import DEV_DISK_BUDGET, dev_config
from support.daemon import Daemon, daemon_config, tenant_config
from support.process import Client, outcome

MiB = 1 << 20
BUDGET = 64 * MiB
#: ext4 starts its lazy init of a mounted file system within 5 s.
LAZY_INIT_WINDOW_S = 6.0
LABELS = {"session": "disk", "node_id": "n1", "tool_call_id": "t1"}

FILL = """
import errno, json, os, sys
path = os.path.join(sys.argv[1], "fill.bin")
written, err = 0, "none"
chunk = b"x" * (1 << 20)
try:
    with open(path, "wb") as f:
        while written < (256 << 20):
            written += f.write(chunk)
            f.flush()
        os.fsync(f.fileno())
except OSError as e:
    err = errno.errorcode.get(e.errno, str(e.errno))
print(json.dumps({"written": written, "error": err}))
"""

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="loop devices and mounts need root")


async def test_writes_beyond_the_budget_fail_and_the_audit_volume_keeps_its_space(
    start_daemon: Callable[..., Daemon],
) -> None:
    daemon = start_daemon(tenants={"dev": {"disk": {"budget_bytes": BUDGET}}})
    workspace = daemon.root("dev")
    audit_dir = daemon.audit_path.parent
    client = Client(daemon.socket)
    try:
        image = daemon.state / "disk" / "dev.img"
        # The image's space is reserved on the host volume when it is made,
        # and stays so once mounted (ext4's lazy init starts 0-5 s after the
        # mount; if it zeroed through the loop device it would punch holes).
        deadline = time.monotonic() + LAZY_INIT_WINDOW_S
        while True:
            reserved = image.stat().st_blocks * 512
            assert reserved >= BUDGET, f"the image holds {reserved} of {BUDGET} bytes"
            if time.monotonic() > deadline:
                break
            await asyncio.sleep(0.2)
        result = await client.run(
            "python3", "-I", "-c", FILL, str(workspace), limits={"wall_seconds": 100}
        )
        assert outcome(result) == "EXITED", result.stderr
        found = json.loads(result.stdout.decode().strip().splitlines()[-1])
        assert found["error"] in ("ENOSPC", "EDQUOT"), found
        assert found["written"] <= BUDGET, found
        # Filling it took nothing more from the volume the audit log is on
        # (its free space itself is no measure: other work shares the volume).
        grown = image.stat().st_blocks * 512 - reserved
        assert grown <= MiB, f"the image grew {grown} bytes past its reservation"
        assert os.stat(image).st_dev == os.stat(audit_dir).st_dev  # the same volume

        # The file API: a typed refusal with its reason, RESOURCE_EXHAUSTED.
        fs = fs_pb2_grpc.FsServiceStub(client.channel)  # type: ignore[no-untyped-call]
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await fs.WriteFile(
                fs_pb2.WriteFileRequest(
                    path=f"{workspace}/more.bin",
                    data=os.urandom(8 * MiB),
                    labels=LABELS,
                    request_id="disk-1",
                )
            )
        assert refused.value.code() is grpc.StatusCode.RESOURCE_EXHAUSTED, refused.value
        wire = from_rpc_error(refused.value)
        assert wire is not None and wire.reason == "QUOTA_EXCEEDED"
        assert "disk budget" in wire.message, wire.message

        # Every spawn still runs, and is audited: nothing is AUDIT_UNAVAILABLE.
        echoed = await client.run("sh", "-c", f"rm {workspace}/fill.bin; echo still")
        assert (outcome(echoed), echoed.stdout) == ("EXITED", b"still\n"), echoed.exited.message
        host = host_pb2_grpc.HostServiceStub(client.channel)  # type: ignore[no-untyped-call]
        caps = await host.Capabilities(host_pb2.CapabilitiesRequest())
        assert (caps.disk_budget_bytes, caps.disk_budget_mechanism) == (BUDGET, "loop_image")
    finally:
        await client.close()
    assert b'"process.exec"' in daemon.audit_path.read_bytes() or "process.exec" in (
        daemon.audit_path.read_text()
    )


async def test_the_budget_outlives_a_restart_and_keeps_the_files(
    start_daemon: Callable[..., Daemon],
) -> None:
    daemon = start_daemon(tenants={"dev": {"disk": {"budget_bytes": BUDGET}}})
    workspace = daemon.root("dev")
    client = Client(daemon.socket)
    try:
        assert outcome(await client.run("sh", "-c", f"echo kept > {workspace}/note")) == "EXITED"
    finally:
        await client.close()
    daemon.stop()
    assert not os.path.ismount(workspace)  # a clean stop unmounts
    daemon.start()
    client = Client(daemon.socket)
    try:
        shown = await client.run("cat", f"{workspace}/note")
        assert shown.stdout == b"kept\n"
        df = await client.run("df", "-B1", "--output=size", str(workspace))
        assert int(df.stdout.split()[-1]) <= BUDGET
    finally:
        await client.close()


def test_a_budget_the_host_cannot_reserve_refuses_the_tenant(state_dir: Path) -> None:
    tenant = tenant_config(state_dir, "dev", disk={"budget_bytes": 1 << 50})
    daemon = Daemon(state_dir, daemon_config(state_dir, {"dev": tenant}))
    with pytest.raises(RuntimeError):
        daemon.start(timeout=30)
    assert "disk_budget" in daemon.output(), daemon.output()


def test_the_dev_tenant_has_a_one_gib_budget(tmp_path: Path) -> None:
    assert dev_config(tmp_path).tenants[0].disk.budget_bytes == DEV_DISK_BUDGET == 1 << 30
