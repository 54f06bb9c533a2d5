"""Start a real hostcapd (a subprocess) on temporary sockets."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from support import toml

REPO = Path(__file__).resolve().parents[2]
NOBODY = 65534
GiB = 1 << 30
MiB = 1 << 20


def tenant_config(state: Path, name: str = "dev", **overrides: Any) -> dict[str, Any]:
    """A tenant like --dev's, under `state`, with overrides merged on top."""
    workspace = state / name / "workspace"
    reference = state / name / "reference"
    config: dict[str, Any] = {
        "socket": str(state / "run" / f"{name}.sock"),
        "socket_owner": 0,
        "socket_group": 0,
        "socket_mode": 0o660,
        "run_as_user": NOBODY,
        "run_as_group": NOBODY,
        "roots": [
            {"path": str(workspace), "tier": "read-write"},
            {"path": str(reference), "tier": "read-only"},
        ],
        "env": {"HOME": str(workspace), "LANG": "C.UTF-8", "PATH": "/usr/local/bin:/usr/bin:/bin"},
        "env_allowlist": ["LANG", "TZ", "GREETING", "TEST_MARKER"],
        "limits": {
            "default": {"output_bytes": MiB, "wall_seconds": 60},
            "ceiling": {
                "cpu_seconds": 600,
                "wall_seconds": 600,
                "memory_bytes": 4 * GiB,
                "pids": 1024,
                "output_bytes": 64 * MiB,
                "total_output_bytes": 256 * MiB,
                "file_size_bytes": GiB,
                "open_files": 4096,
            },
        },
        "max_concurrent_spawns": 64,
        "sandbox": {},
        # This machine has one unprivileged user for every test tenant.
        "shared_run_as": True,
    }
    # HOSTCAPD_TEST_WARM=N sets every tenant's warm_spawns (unset: the
    # daemon's default, warm where the profile has a pid namespace).
    if "HOSTCAPD_TEST_WARM" in os.environ:
        config["warm_spawns"] = int(os.environ["HOSTCAPD_TEST_WARM"])
    for key, value in overrides.items():
        if isinstance(value, dict) and isinstance(config.get(key), dict):
            merged = dict(config[key])
            for k, v in value.items():
                if isinstance(v, dict) and isinstance(merged.get(k), dict):
                    merged[k] = {**merged[k], **v}
                else:
                    merged[k] = v
            config[key] = merged
        else:
            config[key] = value
    return config


def daemon_config(state: Path, tenants: dict[str, dict[str, Any]], **extra: Any) -> dict[str, Any]:
    config: dict[str, Any] = {
        "daemon": {
            "state_dir": str(state),
            "runtime_dir": str(state / "run"),
            "kill_grace_seconds": 0.2,
            # Each test daemon sweeps only its own subtree at start-up.
            "cgroup_parent": f"hostcapd-test/{state.parent.name}-{os.getpid()}",
            # HOSTCAPD_EVENT_LOOP=uvloop runs the suite's daemons on uvloop.
            "event_loop": os.environ.get("HOSTCAPD_EVENT_LOOP", "asyncio"),
        },
        "audit": {"path": str(state / "log" / "audit.jsonl"), "group": "root", "journal": "off"},
        "admin": {"socket": str(state / "run" / "admin.sock"), "mode": 0o600},
        "tenants": tenants,
    }
    for key, value in extra.items():
        if key == "daemon":  # merged: a test sets one daemon setting
            config["daemon"].update(value)
        else:
            config[key] = value
    return config


def prepare_roots(config: dict[str, Any]) -> None:
    state = Path(config["daemon"]["state_dir"])
    state.mkdir(parents=True, exist_ok=True)
    os.chmod(state, 0o711)
    for tenant in config["tenants"].values():
        for root in tenant["roots"]:
            path = Path(root["path"])
            path.mkdir(parents=True, exist_ok=True)
            os.chmod(path.parent, 0o711)
            if root["tier"] == "read-write":
                os.chown(path, tenant["run_as_user"], tenant["run_as_group"])


def connectable(path: Path) -> bool:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.connect(str(path))
        return True
    except OSError:
        return False
    finally:
        s.close()


def file_identity(path: Path) -> tuple[int, int] | None:
    try:
        st = path.lstat()
    except OSError:
        return None
    return (st.st_dev, st.st_ino)


def placed_since(path: Path, before: tuple[int, int] | None) -> bool:
    """The file at `path` is not the one that was there (`before`)."""
    now = file_identity(path)
    return now is not None and now != before


@dataclass
class Daemon:
    state: Path
    config: dict[str, Any]
    proc: subprocess.Popen[bytes] | None = None
    env: dict[str, str] = field(default_factory=dict)
    #: More arguments of `hostcapd serve` (--log-format json, ...).
    args: list[str] = field(default_factory=list)

    @property
    def socket(self) -> Path:
        return Path(next(iter(self.config["tenants"].values()))["socket"])

    def socket_of(self, tenant: str) -> Path:
        return Path(self.config["tenants"][tenant]["socket"])

    @property
    def admin_socket(self) -> Path:
        return Path(self.config["admin"]["socket"])

    @property
    def audit_path(self) -> Path:
        return Path(self.config["audit"]["path"])

    def root(self, tenant: str | None = None, index: int = 0) -> Path:
        t = (
            self.config["tenants"][tenant]
            if tenant
            else next(iter(self.config["tenants"].values()))
        )
        return Path(t["roots"][index]["path"])

    @property
    def config_path(self) -> Path:
        return self.state / "hostcapd.toml"

    def write_config(self) -> None:
        prepare_roots(self.config)
        self.config_path.write_text(toml.dumps(self.config))

    def start(self, timeout: float = 20.0) -> Daemon:
        self.write_config()
        sockets = [Path(t["socket"]) for t in self.config["tenants"].values()]
        if self.config.get("admin"):
            sockets.append(Path(self.config["admin"]["socket"]))
        # A restart after SIGKILL: the old front-end may still be listening
        # on the old socket file for a moment (its parent-death signal is on
        # its way), so only a socket this process put in place counts.
        previous = {s: file_identity(s) for s in sockets}
        env = {"PATH": "/usr/bin:/bin", "HOSTCAP_CANARY": "daemon-secret-canary", **self.env}
        self.log = open(self.state / "daemon.log", "ab")  # noqa: SIM115
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "hostcapd",
                "serve",
                "--config",
                str(self.config_path),
                *self.args,
            ],
            env=env,
            stdout=self.log,
            stderr=self.log,
            cwd=REPO,
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"hostcapd exited with {self.proc.returncode}:\n{self.output()}")
            if all(placed_since(s, before) and connectable(s) for s, before in previous.items()):
                return self
            time.sleep(0.05)
        raise RuntimeError(f"hostcapd did not serve within {timeout} s:\n{self.output()}")

    def output(self) -> str:
        try:
            return (self.state / "daemon.log").read_text(errors="replace")
        except OSError:
            return ""

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 20.0) -> int:
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            code = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            code = self.proc.wait()
        self.log.close()
        return code

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def spawner_pid(self) -> int | None:
        for child in children_of(self.pid):
            if b"hostcapd.spawner" in cmdline(child):
                return child
        return None


def cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")
    except OSError:
        return b""


def children_of(pid: int) -> list[int]:
    out: list[int] = []
    try:
        tasks = list(Path(f"/proc/{pid}/task").iterdir())
    except OSError:
        return out  # it exited meanwhile: no children
    for task in tasks:
        with contextlib.suppress(OSError):
            out += [int(c) for c in (task / "children").read_text().split()]
    return out


def spawner_pid(daemon: Daemon) -> int:
    """The daemon's spawner process (`hostcapd-spawn`)."""
    assert daemon.proc is not None
    for pid in children_of(daemon.proc.pid):
        with contextlib.suppress(OSError):
            if Path(f"/proc/{pid}/comm").read_text().strip() == "hostcapd-spawn":
                return pid
    raise AssertionError("no spawner process")


#: The spawner's children that are not sandboxes, by their names (comm).
SPAWNER_HELPERS = frozenset({"hostcap-forker", "hostcapd-pools"})


def frontend_pids(daemon: Daemon) -> list[int]:
    """The daemon's front-end processes (`python -m hostcapd.frontend`)."""
    return [pid for pid in children_of(daemon.pid) if b"hostcapd.frontend" in cmdline(pid)]


def _comm_and_parent(pid: int) -> tuple[str, int]:
    comm = Path(f"/proc/{pid}/comm").read_text().strip()
    stat = Path(f"/proc/{pid}/stat").read_text()
    return comm, int(stat.rsplit(")", 1)[1].split()[1])


def waiting_warm_child(pid: int) -> bool:
    """Is `pid` a warm child waiting for its request (decision 0026), or the
    command's process its init cloned ahead (childsetup_c/init.c), which
    waits for it: a child of a spawner (`hostcapd-spawn`) with no child of
    its own but such a process, or such a process (named `hostcap-init`
    until its exec, a child of one)? (A spawn's init has its command, which
    exec'd; a fresh child in set-up exists only for a moment; the spawner's
    own helpers are none: its forker, `hostcap-forker`, which clones the
    inits, and its pool maker, `hostcapd-pools`.)"""
    try:
        comm, ppid = _comm_and_parent(pid)
        if comm in SPAWNER_HELPERS:
            return False
        parent, _ = _comm_and_parent(ppid)
        if parent == "hostcap-init" and comm == "hostcap-init":
            return not children_of(pid) and waiting_warm_child(ppid)
        if parent != "hostcapd-spawn":
            return False
        children = children_of(pid)
        if not children:
            return True
        if len(children) != 1:
            return False
        command, _ = _comm_and_parent(children[0])
    except (OSError, ValueError, IndexError):
        return False
    return command == "hostcap-init" and not children_of(children[0])


def environ(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return b""


def processes_with(marker: str) -> list[int]:
    """Pids whose command line or environment contains `marker`. A test gives
    its sandboxed programs TEST_MARKER=<marker>, which every descendant
    inherits, so any survivor of a tree can be found."""
    found = []
    needle = marker.encode()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        pid = int(entry.name)
        if needle in environ(pid) or needle in cmdline(pid):
            found.append(pid)
    return found


def runs_under(pid: int, marker: str) -> bool:
    """Whether the spawn whose main pid is `pid` runs a `marker` process: the
    main process itself (no pid namespace) or a child of it (with one, the
    main pid is the spawn's init and the command its child)."""
    for found in processes_with(marker):
        if found == pid:
            return True
        try:
            status = Path(f"/proc/{found}/status").read_text()
        except OSError:
            continue
        ppid = next(
            (line.split()[1] for line in status.splitlines() if line.startswith("PPid:")), ""
        )
        if ppid == str(pid):
            return True
    return False


def wait_gone(marker: str, timeout: float, exclude: tuple[int, ...] = ()) -> list[int]:
    """Wait until no process carries `marker` (but those in `exclude`, such
    as a test's own client whose argv names the marker)."""
    deadline = time.monotonic() + timeout
    while True:
        alive = [pid for pid in processes_with(marker) if pid not in exclude]
        if not alive or time.monotonic() > deadline:
            return alive
        time.sleep(0.02)


#: The files a spawn cgroup keeps open (a warm child's, one of the pool's or
#: a recycled one, hostcapd.process.cgroup_pool): its stat files, its
#: cgroup.procs and what its recycling reads, opened while it waits or is
#: kept, closed when it is removed; the cgroups change with every spawn.
AHEAD_STAT_FILE = re.compile(
    r"/(ready|warm|spawn)-[0-9a-f]{32}/(memory\.[a-z_.]+|pids\.[a-z_.]+|cgroup\.(procs|events))$"
)


def open_fds(pid: int) -> set[str]:
    """fd:target of each fd of `pid` but the stat files of cgroups made ahead
    (`ahead_fds`: they come and go with the cgroups, a bounded number)."""
    return {f for f in _all_fds(pid) if not AHEAD_STAT_FILE.search(f)}


def ahead_fds(pid: int) -> set[str]:
    """fd:target of each stat file of a cgroup made ahead that `pid` holds."""
    return {f for f in _all_fds(pid) if AHEAD_STAT_FILE.search(f)}


def _all_fds(pid: int) -> set[str]:
    base = Path(f"/proc/{pid}/fd")
    out = set()
    for fd in base.iterdir():
        with contextlib.suppress(OSError):
            out.add(f"{fd.name}:{os.readlink(fd)}")
    return out


def zombies_under(pid: int) -> list[int]:
    found = []
    for child in children_of(pid):
        try:
            state = Path(f"/proc/{child}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state == "Z":
            found.append(child)
        found += zombies_under(child)
    return found


def audit_records(path: Path) -> Iterator[dict[str, Any]]:
    import json

    # Split on newlines only: the writer stores U+2028 and the like raw in strings.
    for line in path.read_bytes().split(b"\n"):
        if line.strip():
            yield json.loads(line)
