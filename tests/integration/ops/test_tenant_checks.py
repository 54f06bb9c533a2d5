"""What `hostcapd check-config` refuses when tenants are compared with each
other and with the host (overlapping roots, system directories as roots, a
shared run-as uid, a socket group of the run-as identity, a writable audit
log), and how it reports a misspelt key: each with a config showing it, run
through the real CLI."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from support import toml
from support.daemon import NOBODY, REPO, daemon_config, prepare_roots, tenant_config


def check_config(path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "hostcapd", "check-config", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
    )


def config(state: Path, tenants: dict[str, dict[str, Any]], **extra: Any) -> dict[str, Any]:
    """Tenants like the suite's (each its own roots, made), overrides on top;
    the roots an override names are not made (nor chowned: `/usr` stays)."""
    made = daemon_config(state, {name: tenant_config(state, name) for name in tenants})
    prepare_roots(made)
    return daemon_config(
        state, {name: tenant_config(state, name, **over) for name, over in tenants.items()}, **extra
    )


def checked(state: Path, body: dict[str, Any]) -> subprocess.CompletedProcess[str]:
    path = state / "checked.toml"
    path.write_text(toml.dumps(body))
    return check_config(path)


def roots(*pairs: tuple[Path | str, str]) -> list[dict[str, str]]:
    return [{"path": str(p), "tier": tier} for p, tier in pairs]


# --- roots shared between tenants ------------------------------------------------------


def test_two_tenants_with_one_read_write_root_are_refused(state_dir: Path) -> None:
    alpha_ws = state_dir / "alpha" / "workspace"
    body = config(state_dir, {"alpha": {}, "beta": {"roots": roots((alpha_ws, "read-write"))}})
    done = checked(state_dir, body)
    assert done.returncode == 2, done
    assert (
        f"tenant 'beta': roots[0] {alpha_ws} (read-write) overlaps tenant 'alpha''s "
        f"roots[0] {alpha_ws} (read-write): tenants may share a root only when both have it "
        "read-only"
    ) in done.stderr


def test_a_read_only_root_inside_another_tenants_read_write_root_is_refused(
    state_dir: Path,
) -> None:
    inside = state_dir / "alpha" / "workspace" / "shared"
    inside.mkdir(parents=True)
    body = config(
        state_dir,
        {
            "alpha": {},
            "beta": {
                "roots": roots(
                    (state_dir / "beta" / "workspace", "read-write"), (inside, "read-only")
                )
            },
        },
    )
    done = checked(state_dir, body)
    assert done.returncode == 2, done
    assert f"tenant 'beta': roots[1] {inside} (read-only) overlaps tenant 'alpha''s roots[0]" in (
        done.stderr
    )


def test_a_symlinked_spelling_of_another_tenants_root_is_refused(state_dir: Path) -> None:
    link = state_dir / "elsewhere"
    body = config(state_dir, {"alpha": {}, "beta": {"roots": roots((link, "read-write"))}})
    link.symlink_to(state_dir / "alpha" / "workspace")
    done = checked(state_dir, body)
    assert done.returncode == 2, done
    assert f"tenant 'beta': roots[0] {link} (read-write) overlaps tenant 'alpha''s" in done.stderr


def test_two_tenants_may_share_a_root_both_read_only(state_dir: Path) -> None:
    shared = state_dir / "alpha" / "reference"
    body = config(
        state_dir,
        {
            "alpha": {},
            "beta": {
                "roots": roots(
                    (state_dir / "beta" / "workspace", "read-write"), (shared, "read-only")
                )
            },
        },
    )
    done = checked(state_dir, body)
    assert done.returncode == 0, done


# --- the host's own directories -----------------------------------------------------------


@pytest.mark.parametrize(
    ("root", "says"),
    [
        ("/", "roots[0] is / (the whole host)"),
        ("/usr", "roots[0] /usr is or holds a system directory (/usr)"),
        ("/var", "roots[0] /var is or holds a system directory (/var)"),
        ("/proc/self", "roots[0] /proc/self is under /proc"),
    ],
)
def test_the_host_root_or_a_system_directory_is_never_a_root(
    state_dir: Path, root: str, says: str
) -> None:
    body = config(state_dir, {"beta": {"roots": roots((root, "read-only"))}})
    done = checked(state_dir, body)
    assert done.returncode == 2, done
    assert f"tenant 'beta': {says}" in done.stderr


def test_a_root_holding_a_configured_system_dir_is_refused(state_dir: Path) -> None:
    tools = state_dir / "beta" / "workspace" / "tools"
    tools.mkdir(parents=True)
    body = config(state_dir, {"beta": {"sandbox": {"system_dirs": ["/usr", str(tools)]}}})
    done = checked(state_dir, body)
    assert done.returncode == 2, done
    assert f"is or holds a system directory ({tools})" in done.stderr


# --- run-as identities ----------------------------------------------------------------------


def test_two_tenants_with_one_run_as_uid_are_refused(state_dir: Path) -> None:
    body = config(state_dir, {"alpha": {"shared_run_as": False}, "beta": {"shared_run_as": False}})
    done = checked(state_dir, body)
    assert done.returncode == 2, done
    assert (
        f"tenant 'beta': run_as_user (uid {NOBODY}) is also tenant 'alpha''s: their spawns "
        "could reach each other's processes and files"
    ) in done.stderr


def test_sharing_a_run_as_uid_needs_both_tenants_to_say_so(state_dir: Path) -> None:
    one = config(state_dir, {"alpha": {"shared_run_as": True}, "beta": {"shared_run_as": False}})
    assert checked(state_dir, one).returncode == 2
    both = config(state_dir, {"alpha": {"shared_run_as": True}, "beta": {"shared_run_as": True}})
    done = checked(state_dir, both)
    assert done.returncode == 0, done


def test_a_socket_group_the_run_as_identity_belongs_to_is_refused(state_dir: Path) -> None:
    body = config(state_dir, {"beta": {"socket_group": NOBODY}})  # nobody's own group
    done = checked(state_dir, body)
    assert done.returncode == 2, done
    assert (
        f"tenant 'beta': socket_group (gid {NOBODY}) is a group of the run-as identity "
        f"(uid {NOBODY} gid {NOBODY}): its spawns could connect to the tenant's socket"
    ) in done.stderr


def test_numeric_run_as_user_and_group_written_as_strings_are_ids(state_dir: Path) -> None:
    body = config(state_dir, {"beta": {"run_as_user": str(NOBODY), "run_as_group": str(NOBODY)}})
    done = checked(state_dir, body)
    assert done.returncode == 0, done


# --- the audit log's permissions ---------------------------------------------------------------


@pytest.mark.parametrize("mode", [0o666, 0o662, 0o660, 0o620])
def test_a_group_or_world_writable_audit_file_mode_is_refused(state_dir: Path, mode: int) -> None:
    body = config(state_dir, {"beta": {}})
    body["audit"]["file_mode"] = mode
    done = checked(state_dir, body)
    assert done.returncode == 2, done
    assert f"audit.file_mode {mode:#o} lets others write the audit log" in done.stderr


def test_a_world_writable_audit_directory_is_refused(state_dir: Path) -> None:
    body = config(state_dir, {"beta": {}})
    directory = Path(body["audit"]["path"]).parent
    directory.mkdir(parents=True, exist_ok=True)
    os.chmod(directory, 0o777)
    done = checked(state_dir, body)
    assert done.returncode == 2, done
    assert f"audit directory {directory} is mode 0o777" in done.stderr
    os.chmod(directory, 0o750)
    assert checked(state_dir, body).returncode == 0


# --- a misspelt key -----------------------------------------------------------------------------


def test_a_misspelt_key_gets_did_you_mean_and_its_line(state_dir: Path) -> None:
    body = config(state_dir, {"beta": {}})
    tenant = body["tenants"]["beta"]
    tenant["run_as_usr"] = tenant.pop("run_as_user")
    tenant["limits"]["ceiling"]["memroy_bytes"] = tenant["limits"]["ceiling"].pop("memory_bytes")
    path = state_dir / "checked.toml"
    path.write_text(toml.dumps(body))
    lines = path.read_text().splitlines()
    usr = 1 + next(i for i, line in enumerate(lines) if "run_as_usr" in line)
    memroy = 1 + next(i for i, line in enumerate(lines) if "memroy_bytes" in line)
    done = check_config(path)
    assert done.returncode == 2, done
    assert done.stderr.splitlines() == [
        f"{path}: invalid config",
        f"  tenant 'beta': limits.ceiling.memroy_bytes: unknown key (did you mean 'memory_bytes'?) (line {memroy})",
        f"  tenant 'beta': run_as_usr: unknown key (did you mean 'run_as_user'?) (line {usr})",
    ]


def test_a_misspelt_section_gets_did_you_mean_and_nothing_of_pydantics(state_dir: Path) -> None:
    path = state_dir / "checked.toml"
    path.write_text(
        '[daemon]\nstate_dir = "/srv/x"\nruntime_dir = "/run/x"\n\n'
        '[audit]\npath = "/var/log/x/audit.jsonl"\n\n'
        '[tenant.beta]\nsocket = "/run/x/beta.sock"\n'
    )
    done = check_config(path)
    assert done.returncode == 2, done
    assert "tenant: unknown key (did you mean 'tenants'?) (line 8)" in done.stderr
    assert "pydantic" not in done.stderr and "Tuple should have" not in done.stderr
    assert "[type=" not in done.stderr
