"""A tenant's health follows what the daemon would do with its spawns: with
the audit volume full, or the tenant's disk budget gone, `hostcapctl
health` on the tenant's socket (and `--service tenant/NAME` on the admin
socket) says NOT_SERVING and why, until it clears, with one log line each
way; a front-end restarted meanwhile says so too."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import psutil
import pytest
from ops_support import hostcapctl, wait_admin, wait_until
from support.daemon import Daemon
from support.process import Client

BUDGET = 32 << 20


def health(daemon: Daemon, tenant: str = "dev") -> tuple[int, str]:
    done = hostcapctl("health", tenant=daemon.socket_of(tenant))
    return done.returncode, done.stdout.strip()


def wait_health(daemon: Daemon, code: int, tenant: str = "dev") -> str:
    """Wait until health exits `code` (0 SERVING, 1 not); its output."""
    seen: list[tuple[int, str]] = []

    def reached() -> bool:
        seen.append(health(daemon, tenant))
        return seen[-1][0] == code

    wait_until(reached, f"health to exit {code} (last: {seen[-1:] if seen else None})")
    return seen[-1][1]


def lines(daemon: Daemon, text: str) -> list[str]:
    return [line for line in daemon.output().splitlines() if text in line]


@pytest.fixture
def audit_volume(state_dir: Path) -> Iterator[Path]:
    volume = state_dir / "audit-volume"
    volume.mkdir(parents=True)
    subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=256k,mode=0755", "tmpfs", str(volume)], check=True
    )
    try:
        yield volume
    finally:
        subprocess.run(["umount", "-l", str(volume)], check=False)


def fill(directory: Path) -> Path:
    filler = directory / "filler"
    with open(filler, "wb", buffering=0) as out:
        for step in (65536, 4096, 512, 1):
            with contextlib.suppress(OSError):
                while True:
                    out.write(b"\0" * step)
    return filler


@pytest.mark.parametrize("split", [True, False], ids=["front-end", "in-process"])
async def test_a_full_audit_volume_is_not_serving_until_it_has_room(
    start_daemon: Callable[..., Daemon], audit_volume: Path, split: bool
) -> None:
    daemon = wait_admin(
        start_daemon(
            tenants={"alpha": {}, "beta": {}},
            audit={"path": str(audit_volume / "audit.jsonl"), "group": "root", "journal": "off"},
            daemon={"frontend_processes": split},
        )
    )
    assert health(daemon, "alpha") == (0, "SERVING")
    filler = fill(audit_volume)
    for tenant in ("alpha", "beta"):
        said = wait_health(daemon, 1, tenant)
        assert said.startswith(
            f"NOT_SERVING: audit log unwritable: the audit volume of {audit_volume / 'audit.jsonl'} is full"
        ), said
    # The admin socket says it per tenant; the daemon itself still serves
    # (a liveness probe must not restart it: that would end every spawn).
    for tenant in ("alpha", "beta"):
        done = hostcapctl("health", "--service", f"tenant/{tenant}", admin=daemon.admin_socket)
        assert done.returncode == 1, done
        assert done.stdout.startswith("NOT_SERVING: audit log unwritable: "), done.stdout
    assert hostcapctl("health", admin=daemon.admin_socket).stdout == "SERVING\n"
    # What health says is what a spawn meets.
    client = Client(daemon.socket_of("alpha"))
    try:
        reason = ""
        for _ in range(8):  # the log's last page may still take a line or two
            try:
                reason = await client.refusal("true")
            except AssertionError:
                continue
            break
        assert reason == "AUDIT_UNAVAILABLE"
    finally:
        await client.close()
    # The refusal is logged with the id of the spawn it admitted.
    (refused,) = lines(daemon, "tenant alpha: Run refused AUDIT_UNAVAILABLE (spawn ")
    assert " INFO hostcapd.service: " in refused, refused

    filler.unlink()
    for tenant in ("alpha", "beta"):
        assert wait_health(daemon, 0, tenant) == "SERVING"
    for tenant in ("alpha", "beta"):
        done = hostcapctl("health", "--service", f"tenant/{tenant}", admin=daemon.admin_socket)
        assert (done.returncode, done.stdout) == (0, "SERVING\n"), done
    for tenant in ("alpha", "beta"):
        down = lines(daemon, f"tenant {tenant}: health NOT_SERVING: audit log unwritable")
        up = lines(daemon, f"tenant {tenant}: health SERVING again")
        assert len(down) == 1 and " WARNING " in down[0], down
        assert len(up) == 1 and " INFO " in up[0], up


async def test_a_disk_budget_gone_is_not_serving_and_refuses_spawns(
    start_daemon: Callable[..., Daemon],
) -> None:
    daemon = wait_admin(start_daemon(tenants={"dev": {"disk": {"budget_bytes": BUDGET}}}))
    workspace = daemon.root()
    mount = daemon.state / "disk" / "dev.mnt"
    assert health(daemon) == (0, "SERVING")
    # An operator (or a cleanup job) unmounts the root's bind from the image:
    # a spawn would now write to the host's volume, past the budget.
    # (Lazily: the fs worker holds the root open.)
    subprocess.run(["umount", "--lazy", str(workspace)], check=True)
    try:
        said = wait_health(daemon, 1)
        assert said == (
            f"NOT_SERVING: disk budget unavailable: the root {workspace} is no longer "
            "on its image dev.img"
        ), said
        client = Client(daemon.socket)
        try:
            assert await client.refusal("touch", "escaped") == "PROTECTION_UNAVAILABLE"
        finally:
            await client.close()
        assert not (workspace / "escaped").exists()
    finally:
        subprocess.run(["mount", "--bind", str(mount / "root-0"), str(workspace)], check=True)
    assert wait_health(daemon, 0) == "SERVING"
    client = Client(daemon.socket)
    try:
        assert (await client.run("touch", "inside")).exited.exit_code == 0
    finally:
        await client.close()
    assert (mount / "root-0" / "inside").exists()
    assert len(lines(daemon, "tenant dev: health NOT_SERVING: disk budget unavailable")) == 1
    assert len(lines(daemon, "tenant dev: health SERVING again")) == 1


def test_a_restarted_front_end_is_told_it_is_not_serving(
    start_daemon: Callable[..., Daemon], audit_volume: Path
) -> None:
    daemon = wait_admin(
        start_daemon(
            audit={"path": str(audit_volume / "audit.jsonl"), "group": "root", "journal": "off"}
        )
    )
    fill(audit_volume)
    wait_health(daemon, 1)
    frontends = [
        c for c in psutil.Process(daemon.pid).children() if "hostcapd.frontend" in c.cmdline()
    ]
    before = {c.pid for c in frontends}
    for child in frontends:
        os.kill(child.pid, signal.SIGKILL)
    wait_until(
        lambda: lines(daemon, "tenant dev: its front-end serves again") != [],
        "the tenant's front-end serves again",
    )
    after = {
        c.pid for c in psutil.Process(daemon.pid).children() if "hostcapd.frontend" in c.cmdline()
    }
    assert after and not after & before
    assert wait_health(daemon, 1).startswith("NOT_SERVING: audit log unwritable")
    # The admin socket's front-end, restarted too, is told each tenant's again.
    wait_until(
        lambda: (
            hostcapctl("health", "--service", "tenant/dev", admin=daemon.admin_socket).returncode
            == 1
        ),
        "the admin socket's health says tenant/dev is not serving",
    )


@pytest.mark.parametrize("split", [True, False], ids=["front-end", "in-process"])
def test_a_dead_spawner_is_not_serving_until_it_is_back(
    start_daemon: Callable[..., Daemon], split: bool
) -> None:
    daemon = wait_admin(start_daemon(daemon={"frontend_processes": split}))
    spawner = daemon.spawner_pid()
    assert spawner is not None
    os.kill(spawner, signal.SIGKILL)
    wait_until(
        lambda: lines(daemon, "tenant dev: health SERVING again") != [],
        "health to come back once the spawner is restarted",
    )
    down = lines(daemon, "tenant dev: health NOT_SERVING: ")
    assert len(down) == 1 and "the spawner is not running" in down[0], down
    assert health(daemon) == (0, "SERVING")
    done = hostcapctl("health", "--service", "tenant/dev", admin=daemon.admin_socket)
    assert (done.returncode, done.stdout) == (0, "SERVING\n"), done
    assert daemon.spawner_pid() not in (None, spawner)
