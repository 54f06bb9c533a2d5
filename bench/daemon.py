"""A real hostcapd for the bench: a generated TOML config, private sockets.

Tenants are named by their sandbox profile:

- `full`: the default profile (every protection required, cgroups included);
- `nocg`: the default profile with `cgroup = "off"`;
- `minimal`: every protection off except rlimits, uid_drop and exec_by_fd;
- each with the daemon's default `warm_spawns` (the warm path, decision
  0026: warm children where the profile has a pid namespace, so `full` and
  `nocg` are warm, `minimal` is not); `full_fresh` and `nocg_fresh` are the
  same with `warm_spawns = 0`, `minimal_warm` with `warm_spawns =
  WARM_SPAWNS`: each pair is an A/B of the warm path;
- `stream`: the default profile with output ceilings that let a 256 MiB
  stream pass whole (the head half of `output_bytes` is what is streamed live,
  so the request asks for 512 MiB of kept output, the most a tenant may keep:
  a Run result with both streams kept must fit the client's largest message).

The daemon section sets `kill_grace_seconds = 0`: the kill row measures the
mechanism (SIGKILL of the tree), not the grace period a config chooses.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from hostcapd.config import PROTECTION_NAMES

from bench.native import BenchError

REPO = Path(__file__).resolve().parents[1]
NOBODY = 65534
MiB = 1 << 20
GiB = 1 << 30

PROTECTIONS = PROTECTION_NAMES
MINIMAL_KEEPS = ("rlimits", "uid_drop", "exec_by_fd")

PROFILES: dict[str, dict[str, str]] = {
    "full": {},
    "nocg": {"cgroup": "off"},
    "minimal": {name: ("required" if name in MINIMAL_KEEPS else "off") for name in PROTECTIONS},
    "stream": {},
}
for _name in ("full", "nocg"):
    PROFILES[f"{_name}_fresh"] = PROFILES[_name]
PROFILES["minimal_warm"] = PROFILES["minimal"]
#: minimal_warm's pool (the daemon's default where it warms).
WARM_SPAWNS = 2


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return (
            "{" + ", ".join(f"{json.dumps(k)} = {_toml_value(v)}" for k, v in value.items()) + "}"
        )
    raise TypeError(f"cannot write {value!r} as TOML")


def to_toml(data: dict[str, Any], prefix: str = "") -> str:
    """TOML for a config: nested dicts become tables (`env`, a plain string
    map, stays inline), lists of dicts become inline arrays of tables."""
    inline = [(k, v) for k, v in data.items() if not isinstance(v, dict) or k == "env"]
    tables = [(k, v) for k, v in data.items() if isinstance(v, dict) and k != "env"]
    out = "".join(f"{json.dumps(k)} = {_toml_value(v)}\n" for k, v in inline)
    for key, value in tables:
        name = f"{prefix}.{json.dumps(key)}" if prefix else json.dumps(key)
        out += f"\n[{name}]\n" + to_toml(value, name)
    return out


def tenant_config(state: Path, name: str, sandbox: dict[str, str]) -> dict[str, Any]:
    big = name == "stream"
    return {
        "socket": str(state / "run" / f"{name}.sock"),
        "socket_owner": 0,
        "socket_group": 0,
        "socket_mode": 0o600,
        "run_as_user": NOBODY,
        "run_as_group": NOBODY,
        # Every bench tenant runs as nobody: one security domain, said so.
        "shared_run_as": True,
        "roots": [{"path": str(state / name / "workspace"), "tier": "read-write"}],
        "env": {
            "HOME": str(state / name / "workspace"),
            "LANG": "C.UTF-8",
            "PATH": "/usr/bin:/bin",
        },
        "env_allowlist": ["LANG"],
        "max_concurrent_spawns": 64,
        # Set, not derived: six tenants' derived shares of half the host, less
        # the stream tenant's front-end (its output ceiling is the largest),
        # leave that one nothing (tenant ceilings, issue 29).
        "tenant_pids": 2048,
        "tenant_memory_bytes": GiB,
        **({"warm_spawns": 0} if name.endswith("_fresh") else {}),
        **({"warm_spawns": WARM_SPAWNS} if name.endswith("_warm") else {}),
        "limits": {
            "default": {"output_bytes": MiB, "wall_seconds": 120},
            "ceiling": {
                "cpu_seconds": 600,
                "wall_seconds": 600,
                "memory_bytes": 4 * GiB,
                "pids": 1024,
                "output_bytes": (512 * MiB) if big else (64 * MiB),
                "total_output_bytes": GiB if big else (256 * MiB),
                "file_size_bytes": GiB,
                "open_files": 4096,
            },
        },
        "sandbox": dict(sandbox),
    }


def state_parent() -> Path:
    """Where the bench keeps its daemons' state: bench/results/ when the
    run-as identity can traverse to it (roots outside /tmp need no extra
    mounts per spawn, as on a real install), else the temp dir."""
    results = REPO / "bench" / "results"
    results.mkdir(parents=True, exist_ok=True)
    path = results
    while path != path.parent:
        if not os.stat(path).st_mode & 0o001:
            import tempfile

            return Path(tempfile.gettempdir())
        path = path.parent
    return results


def _connectable(path: Path) -> bool:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.connect(str(path))
        return True
    except OSError:
        return False
    finally:
        s.close()


class BenchDaemon:
    """One hostcapd with the named tenants, started and stopped by the bench."""

    def __init__(
        self,
        state: Path,
        tenants: tuple[str, ...],
        event_loop: str = "asyncio",
        frontend_processes: bool = True,
    ) -> None:
        self.state = state
        self.tenants = tenants
        self.config: dict[str, Any] = {
            "daemon": {
                "state_dir": str(state),
                "runtime_dir": str(state / "run"),
                "kill_grace_seconds": 0,
                "cgroup_parent": f"hostcapd-bench-{os.getpid()}-{state.name}",
                "event_loop": event_loop,
                "frontend_processes": frontend_processes,
            },
            "audit": {
                "path": str(state / "log" / "audit.jsonl"),
                "group": "root",
                "journal": "off",
            },
            "tenants": {name: tenant_config(state, name, PROFILES[name]) for name in tenants},
        }
        self.proc: subprocess.Popen[bytes] | None = None
        #: The interpreter that runs it (another checkout's, for an A/B;
        #: HOSTCAP_BENCH_PYTHON: a wrapper's for a whole bench run).
        self.python = os.environ.get("HOSTCAP_BENCH_PYTHON") or sys.executable

    def socket(self, tenant: str) -> Path:
        return Path(self.config["tenants"][tenant]["socket"])

    def workspace(self, tenant: str) -> Path:
        return Path(self.config["tenants"][tenant]["roots"][0]["path"])

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def write_config(self) -> Path:
        self.state.mkdir(parents=True, exist_ok=True)
        os.chmod(self.state, 0o711)
        for name in self.tenants:
            workspace = self.workspace(name)
            workspace.mkdir(parents=True, exist_ok=True)
            os.chmod(workspace.parent, 0o711)
            os.chown(workspace, NOBODY, NOBODY)
        path = self.state / "hostcapd.toml"
        path.write_text(to_toml(self.config))
        return path

    def start(self, timeout: float = 30.0) -> BenchDaemon:
        config = self.write_config()
        log = open(self.state / "daemon.log", "ab")  # noqa: SIM115 (the daemon holds it)
        self.proc = subprocess.Popen(
            [self.python, "-m", "hostcapd", "serve", "--config", str(config)],
            env={"PATH": "/usr/bin:/bin"},
            stdout=log,
            stderr=log,
            cwd=REPO,
        )
        log.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise BenchError(f"hostcapd exited with {self.proc.returncode}:\n{self.log()}")
            if all(_connectable(self.socket(t)) for t in self.tenants):
                return self
            time.sleep(0.05)
        raise BenchError(f"hostcapd did not serve within {timeout} s:\n{self.log()}")

    def log(self) -> str:
        try:
            return (self.state / "daemon.log").read_text(errors="replace")[-4000:]
        except OSError:
            return ""

    def helper_pids(self) -> dict[str, int]:
        """The daemon's own child processes by role: spawner (and its pool
        maker, "pools"), front-ends (the split's, one per tenant), fs workers."""
        from bench.procfs import children_of, cmdline

        roles: dict[str, int] = {}
        for child in children_of(self.pid):
            line = cmdline(child)
            if b"hostcapd.spawner" in line:
                roles["spawner"] = child
                for pools in children_of(child):  # its pool maker (spawner/maker.py)
                    with contextlib.suppress(OSError):
                        if Path(f"/proc/{pools}/comm").read_text().strip() == "hostcapd-pools":
                            roles["pools"] = pools
            elif b"hostcapd.frontend" in line:
                roles[f"frontend-{sum(r.startswith('frontend') for r in roles)}"] = child
            elif line:
                roles[f"worker-{len(roles)}"] = child
        return roles

    def frontend_pids(self) -> list[int]:
        return [pid for role, pid in self.helper_pids().items() if role.startswith("frontend")]

    def stop(self) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
