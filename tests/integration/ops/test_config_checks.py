"""What `hostcapd check-config`, start-up and reload refuse, against the real
CLI and a real daemon: the same checks, the tenant named in every message."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from ops_support import hostcapctl, sighup_reload, wait_admin
from support import toml
from support.daemon import REPO, Daemon, daemon_config, prepare_roots, tenant_config


def check_config(path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "hostcapd", "check-config", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
    )


def write(state: Path, tenants: dict[str, dict[str, Any]], prepare: bool = True) -> Path:
    """A config of `tenants` (an override of None removes the key)."""
    bodies = {}
    for name, over in tenants.items():
        body = tenant_config(state, name, **{k: v for k, v in over.items() if v is not None})
        bodies[name] = {k: v for k, v in body.items() if over.get(k, ...) is not None}
    config = daemon_config(state, bodies)
    if prepare:
        prepare_roots(config)
    path = state / "checked.toml"
    path.write_text(toml.dumps(config))
    return path


# --- 1. a tenant socket open to other users ---------------------------------------------


@pytest.mark.parametrize("mode", [0o666, 0o606, 0o661, 0o604])
def test_check_config_refuses_a_tenant_socket_other_users_may_reach(
    state_dir: Path, mode: int
) -> None:
    path = write(state_dir, {"alpha": {}, "beta": {"socket_mode": mode}})
    done = check_config(path)
    assert done.returncode == 2, done
    assert f"tenant 'beta': socket_mode {mode:#o} grants access to every local user" in done.stderr
    assert "alpha" not in done.stderr


def test_group_bits_need_a_socket_group(state_dir: Path) -> None:
    path = write(state_dir, {"beta": {"socket_group": None, "socket_mode": 0o660}})
    assert "socket_group" not in path.read_text()
    done = check_config(path)
    assert done.returncode == 2, done
    assert "tenant 'beta': socket_mode 0o660 grants group access but socket_group is not set" in (
        done.stderr
    )
    ok = check_config(write(state_dir, {"beta": {"socket_group": None, "socket_mode": 0o600}}))
    assert ok.returncode == 0, ok


def test_start_up_refuses_a_world_connectable_tenant_socket(
    start_daemon: Callable[..., Daemon], state_dir: Path
) -> None:
    with pytest.raises(RuntimeError) as refused:
        start_daemon(tenants={"beta": {"socket_mode": 0o666}})
    assert "tenant 'beta': socket_mode 0o666" in str(refused.value)
    assert not (state_dir / "run" / "beta.sock").exists()


def test_reload_refuses_a_world_connectable_tenant_socket(daemon: Daemon) -> None:
    wait_admin(daemon)
    daemon.config["tenants"]["dev"]["socket_mode"] = 0o666
    daemon.write_config()
    record = sighup_reload(daemon)
    assert record["message"].startswith("rejected: ")
    assert "tenant 'dev': socket_mode 0o666" in record["message"]
    refused = hostcapctl("reload", admin=daemon.admin_socket)
    assert refused.returncode == 125 and "tenant 'dev': socket_mode 0o666" in refused.stderr
    assert oct(daemon.socket.stat().st_mode & 0o777) == oct(0o660)


# --- 2. check-config runs what start-up and reload run -----------------------------------


def test_check_config_passes_a_config_the_daemon_serves(state_dir: Path) -> None:
    done = check_config(write(state_dir, {"alpha": {}, "beta": {}}))
    assert (done.returncode, done.stderr) == (0, ""), done
    assert done.stdout.endswith("ok (2 tenant(s): alpha, beta)\n")


@pytest.mark.parametrize("root", [0, "0"])
def test_check_config_refuses_a_root_run_as_user_naming_the_tenant(
    state_dir: Path, root: int | str
) -> None:
    # A number written as a string is a uid too (not "unknown user"). The
    # socket is the owner's alone: root's group would be the run-as group's.
    beta = {"run_as_user": 0, "socket_group": None, "socket_mode": 0o600}
    write(state_dir, {"alpha": {}, "beta": beta})  # the roots, made as uid 0's
    path = write(state_dir, {"alpha": {}, "beta": {**beta, "run_as_user": root}}, prepare=False)
    done = check_config(path)
    assert done.returncode == 2, done
    assert done.stderr.splitlines() == [
        f"{path}: 1 problem(s)",
        "  tenant 'beta': run_as_user is root: tenants never run as root",
    ]


def test_check_config_refuses_a_missing_root_by_tenant_name_and_index(state_dir: Path) -> None:
    missing = state_dir / "nowhere"
    path = write(state_dir, {"alpha": {}, "beta": {}})
    text = path.read_text().replace(str(state_dir / "beta" / "reference"), str(missing))
    path.write_text(text)
    done = check_config(path)
    assert done.returncode == 2, done
    assert done.stderr.splitlines()[1:] == [f"  tenant 'beta': roots[1] {missing} does not exist"]


def test_check_config_refuses_a_root_the_run_as_identity_cannot_search(state_dir: Path) -> None:
    path = write(state_dir, {"beta": {}})
    (state_dir / "beta" / "reference").chmod(0o700)  # root's alone
    done = check_config(path)
    assert done.returncode == 2, done
    assert "tenant 'beta': roots[1]" in done.stderr
    assert "not readable and searchable by the run-as identity" in done.stderr


def test_check_config_refuses_a_protection_this_host_cannot_apply(state_dir: Path) -> None:
    path = write(state_dir, {"beta": {"sandbox": {"simulate_unavailable": ["seccomp"]}}})
    done = check_config(path)
    assert done.returncode == 2, done
    assert "tenant 'beta' requires seccomp, which this host cannot apply" in done.stderr


def test_check_config_refuses_required_fs_changes_without_a_disk_budget(state_dir: Path) -> None:
    path = write(state_dir, {"beta": {"sandbox": {"fs_changes": "required"}}})
    done = check_config(path)
    assert done.returncode == 2, done
    assert "tenant 'beta' requires fs_changes" in done.stderr
    assert "no file system of its own" in done.stderr


def test_check_config_names_schema_errors_by_tenant_name(state_dir: Path) -> None:
    path = write(state_dir, {"alpha": {}, "beta": {}})
    head, tail = path.read_text().rsplit('"run_as_user" = 65534', 1)
    path.write_text(head + '"run_as_user" = "no-such-user-here"' + tail)
    done = check_config(path)
    assert done.returncode == 2, done
    assert done.stderr.splitlines() == [
        f"{path}: invalid config",
        "  tenant 'beta': unknown user 'no-such-user-here'",
    ]


@pytest.mark.parametrize(
    ("override", "expected"),
    [
        ({"run_as_user": 0}, "tenant 'beta': run_as_user is root"),
        ({"roots": [{"path": "/nonexistent-hostcap-root", "tier": "read-only"}]}, "roots[0]"),
    ],
)
def test_what_check_config_refuses_start_up_and_reload_refuse_alike(
    start_daemon: Callable[..., Daemon],
    state_dir: Path,
    override: dict[str, Any],
    expected: str,
) -> None:
    path = write(state_dir, {"beta": override}, prepare=False)
    assert expected in check_config(path).stderr
    daemon = wait_admin(start_daemon(tenants={"dev": {}}))
    daemon.config["tenants"]["beta"] = tenant_config(state_dir, "beta", **override)
    if "roots" not in override:
        prepare_roots(daemon.config)
    daemon.config_path.write_text(toml.dumps(daemon.config))
    refused = hostcapctl("reload", admin=daemon.admin_socket)
    assert refused.returncode == 125 and expected in refused.stderr, refused
    assert not daemon.socket_of("beta").exists()
    daemon.stop()
    started = subprocess.run(
        [sys.executable, "-m", "hostcapd", "serve", "--config", str(daemon.config_path)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
    )
    assert started.returncode == 2 and expected in started.stderr, started
