"""systemd/: the unit verifies, scores what the docs say, and its hardening
leaves hostcapd able to build its sandboxes.

systemd is installed here but is not PID 1, so the unit cannot be started.
What can be checked without it is checked for real:

- `systemd-analyze verify` and `systemd-analyze security --offline=true` on
  the unit file itself;
- the capability bounding set, no_new_privs and the /proc masks of
  ProtectKernelTunables= and ProtectKernelLogs= are reproduced
  (setpriv and a private mount namespace) and the daemon's real C child
  set-up builds a full sandbox under them; each capability is then removed in
  turn to show the set has nothing spare;
- the system-call allow list is expanded with systemd's own group tables and
  checked against what the daemon and ordinary programs call, and against
  calls it must refuse;
- sysusers.d and tmpfiles.d are applied to a scratch root, and the example
  config loads against the users they create and fits the unit's writable
  paths.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
UNIT = REPO / "systemd" / "hostcapd.service"
SYSUSERS = REPO / "systemd" / "sysusers.d" / "hostcap.conf"
TMPFILES = REPO / "systemd" / "tmpfiles.d" / "hostcap.conf"
EXAMPLE_CONFIG = REPO / "systemd" / "hostcapd.toml"
INSTALL_DOC = REPO / "docs" / "install.md"

#: The issue's bar; docker, containerd, nomad and podman ship at 9.6.
EXPOSURE_CEILING = 5.0

SYSTEMD_ANALYZE = shutil.which("systemd-analyze")
needs_systemd_analyze = pytest.mark.skipif(
    SYSTEMD_ANALYZE is None, reason="systemd-analyze is not installed"
)
needs_root = pytest.mark.skipif(
    os.geteuid() != 0, reason="reproducing the service's environment needs root"
)


# --- the unit file ------------------------------------------------------------


def parse_unit(path: Path) -> dict[str, dict[str, list[str]]]:
    """Sections -> key -> every value assigned, in order (systemd keys repeat)."""
    sections: dict[str, dict[str, list[str]]] = {}
    current: dict[str, list[str]] | None = None
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not line or line[0] in "#;":
            continue
        if line.startswith("[") and line.endswith("]"):
            current = sections.setdefault(line[1:-1], {})
            continue
        assert current is not None, f"{path}: assignment outside a section: {line}"
        key, sep, value = line.partition("=")
        assert sep, f"{path}: not an assignment: {line}"
        current.setdefault(key.strip(), []).append(value.strip())
    return sections


@cache
def service() -> dict[str, list[str]]:
    return parse_unit(UNIT)["Service"]


def setting(key: str) -> str:
    values = service()[key]
    assert len(values) == 1, f"{key} is assigned {len(values)} times"
    return values[0]


def exec_start_binary() -> str:
    return setting("ExecStart").split()[0]


def capability_bounding_set() -> list[str]:
    return setting("CapabilityBoundingSet").split()


def run(argv: list[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False, **kwargs)  # type: ignore[call-overload, no-any-return]


# --- systemd-analyze ------------------------------------------------------------


def verify_problems(unit: Path) -> list[str]:
    assert SYSTEMD_ANALYZE is not None
    result = run([SYSTEMD_ANALYZE, "verify", str(unit)])
    lines = (result.stdout + result.stderr).splitlines()
    return [line for line in lines if line.strip()]


@needs_systemd_analyze
def test_verify_reports_nothing_but_the_missing_installed_binary() -> None:
    missing = f"Command {exec_start_binary()} is not executable"
    problems = [line for line in verify_problems(UNIT) if missing not in line]
    assert problems == []


@needs_systemd_analyze
def test_verify_is_silent_once_the_binary_exists(tmp_path: Path) -> None:
    # The filter above must hide only that one message: with a binary that
    # exists, verify has nothing at all to say.
    unit = tmp_path / UNIT.name
    unit.write_text(UNIT.read_text().replace(exec_start_binary(), "/bin/true"))
    assert verify_problems(unit) == []


@cache
def exposure() -> float:
    assert SYSTEMD_ANALYZE is not None
    result = run([SYSTEMD_ANALYZE, "security", "--offline=true", str(UNIT)])
    found = re.search(r"Overall exposure level for \S+: (\d+\.\d+)", result.stdout)
    assert found, f"no exposure level in:\n{result.stdout}\n{result.stderr}"
    return float(found.group(1))


@needs_systemd_analyze
def test_security_exposure_is_at_most_five() -> None:
    assert exposure() <= EXPOSURE_CEILING


@needs_systemd_analyze
def test_the_documented_exposure_is_the_one_systemd_computes() -> None:
    documented = re.search(r"scores \*\*(\d+\.\d+)\*\*", INSTALL_DOC.read_text())
    assert documented, f"{INSTALL_DOC} does not state the score"
    in_unit = re.search(r"--offline=true hostcapd\.service` scores (\d+\.\d+)", UNIT.read_text())
    assert in_unit, f"{UNIT} does not state the score"
    assert float(documented.group(1)) == float(in_unit.group(1)) == exposure()


# --- the capability bounding set, under the unit's /proc masks --------------------

#: Runs as the daemon would under the unit; prints {operation: error or null}.
PROBE = textwrap.dedent(
    r"""
    import json, os, signal, socket, subprocess, sys, tempfile, time
    from hostcapd import childsetup

    NOBODY = (65534, 65534)
    FLAGS = 0x00020000 | 0x04000000 | 0x08000000 | 0x20000000 | 0x40000000
    MOUNTS = [
        (0, None, b"/", None, (1 << 14) | (1 << 18), None),
        (0, b"proc", b"/proc", b"proc", 2 | 4 | 8, None),
        (0, b"tmpfs", b"/tmp", b"tmpfs", 2 | 4, b"size=1048576,mode=1777"),
    ]

    def spawn(argv, sandboxed, cwd=b"/"):
        exe = os.open(argv[0], os.O_PATH | os.O_CLOEXEC)
        r, w = os.pipe()
        try:
            pid, _ = childsetup.spawn(childsetup.ChildPlan(
                exe_fd=exe, exe_path=None, argv=[a.encode() for a in argv],
                envp=[b"PATH=/usr/bin:/bin"], stdio=(0, w, w), cwd_root=cwd, cwd=None, umask=0o022,
                clone_flags=FLAGS if sandboxed else 0, mounts=MOUNTS if sandboxed else [],
                hostname=b"hostcap" if sandboxed else None, loopback_up=sandboxed,
                cgroup_fds=[], rlimits=[(7, 256, 256)], oom_score_adj=b"500",
                loginuid=b"65534" if sandboxed else None, drop_caps=True, ids=NOBODY,
                no_new_privs=True, landlock_fd=-1, landlock_rules=[], seccomp_filter=b"",
                pdeathsig=signal.SIGKILL, cancel_fd=-1, life_fd=-1))
        finally:
            os.close(w)
            os.close(exe)
        return pid, r

    def output(pid, r):
        with os.fdopen(r, "rb") as f:
            out = f.read().decode()
        _, status = os.waitpid(pid, 0)
        if os.waitstatus_to_exitcode(status) != 0:
            raise RuntimeError(f"child failed: {out!r}")
        return out

    def sandbox():
        script = ("id -u; id -g; hostname; cat /proc/self/loginuid; echo; "
                  "grep CapEff /proc/self/status; ls /proc | grep -c '^[0-9]'")
        out = output(*spawn(["/bin/sh", "-c", script], True)).split()
        want = ["65534", "65534", "hostcap", "65534", "CapEff:", "0000000000000000"]
        if out[:6] != want:
            raise RuntimeError(f"sandbox is not what was asked: {out}")
        if int(out[6]) > 3:
            raise RuntimeError(f"the fresh /proc shows {out[6]} processes")

    def kill():
        pid, r = spawn(["/bin/sleep", "60"], False)
        os.close(r)
        # If this fails the sleep dies with the probe (its parent-death signal).
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)

    def chown():
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "tenant.sock")
            with socket.socket(socket.AF_UNIX) as s:
                s.bind(path)
                os.chown(path, *NOBODY)

    def loopback():
        subprocess.run(["unshare", "--net", "ip", "link", "set", "lo", "up"],
                       check=True, capture_output=True)

    def setns_mnt():
        # A mount namespace made ahead of need, entered later (the warm path).
        holder = subprocess.Popen(["unshare", "--mount", "sleep", "30"])
        try:
            mine = os.readlink("/proc/self/ns/mnt")
            for _ in range(500):
                if os.readlink(f"/proc/{holder.pid}/ns/mnt") != mine:
                    break
                time.sleep(0.01)
            subprocess.run(["nsenter", f"--mount=/proc/{holder.pid}/ns/mnt", "true"],
                           check=True, capture_output=True)
        finally:
            holder.kill()
            holder.wait()

    def cwd_in_workspace():
        workspace = sys.argv[2]
        out = output(*spawn(["/bin/pwd"], True, cwd=workspace.encode()))
        if out.strip() != workspace:
            raise RuntimeError(out)

    results = {}
    for name in sys.argv[1].split(","):
        try:
            globals()[name]()
            results[name] = None
        except Exception as error:
            results[name] = f"{type(error).__name__}: {error}"
    print(json.dumps(results))
    """
)

#: The environment systemd gives the service, as far as it is mount-based.
SERVICE_MOUNTS = textwrap.dedent(
    r"""
    set -e
    mount --make-rprivate /
    # ProtectKernelTunables=: /proc/sys and friends read-only.
    for p in /proc/sys /proc/sysrq-trigger /proc/irq /proc/bus /proc/fs; do
        if [ -e "$p" ]; then mount --bind "$p" "$p"; mount -o remount,bind,ro "$p"; fi
    done
    # ProtectKernelLogs=: /proc/kmsg made inaccessible.
    mount --bind "$INACCESSIBLE" /proc/kmsg
    exec "$@"
    """
)

#: Each kept capability: the operation that needs it, and how that operation
#: fails without it (for the sandbox: the C set-up's failing step).
NEEDED_FOR = {
    "CAP_SYS_ADMIN": ("sandbox", "('clone', 1)"),
    "CAP_SETUID": ("sandbox", "('uid', 1)"),
    "CAP_SETGID": ("sandbox", "('groups', 1)"),
    "CAP_SETPCAP": ("sandbox", "('caps_bounding', 1)"),
    "CAP_CHOWN": ("chown", "Operation not permitted"),
    "CAP_KILL": ("kill", "Operation not permitted"),
    "CAP_NET_ADMIN": ("loopback", "returned non-zero exit status"),
    "CAP_SYS_CHROOT": ("setns_mnt", "returned non-zero exit status"),
}
OPERATIONS = sorted({operation for operation, _ in NEEDED_FOR.values()})


def login_uid_is_set() -> bool:
    try:
        return Path("/proc/self/loginuid").read_text().strip() != str(2**32 - 1)
    except FileNotFoundError:
        return False


def run_as_service(
    capabilities: list[str], operations: list[str], tmp_path: Path, *args: str
) -> dict[str, str | None]:
    """Run PROBE with this bounding set, no_new_privs and the service's /proc masks."""
    for tool in ("setpriv", "unshare", "ip"):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} is not installed")
    if {"sandbox", "cwd_in_workspace"} & set(operations) and login_uid_is_set():
        # Setting a child's loginuid needs no capability only while the
        # daemon's own is unset, as it always is for a service systemd starts.
        pytest.skip("this test runs with a login uid set; a systemd service has none")
    inaccessible = tmp_path / "inaccessible"
    inaccessible.touch(mode=0)
    bounding = ",".join(["-all", *("+" + c.removeprefix("CAP_").lower() for c in capabilities)])
    argv = [
        "unshare", "--mount", "sh", "-c", SERVICE_MOUNTS, "service-mounts",
        "setpriv", "--no-new-privs", f"--bounding-set={bounding}", "--inh-caps=-all",
        sys.executable, "-c", PROBE, ",".join(operations), *args,
    ]  # fmt: skip
    result = run(argv, cwd=REPO, env={**os.environ, "INACCESSIBLE": str(inaccessible)})
    assert result.returncode == 0, result.stderr
    outcome: dict[str, str | None] = json.loads(result.stdout)
    return outcome


def test_every_capability_in_the_bounding_set_has_an_operation_that_needs_it() -> None:
    assert sorted(capability_bounding_set()) == sorted(NEEDED_FOR)


@needs_root
def test_the_daemon_builds_a_full_sandbox_with_only_the_units_capabilities(tmp_path: Path) -> None:
    outcome = run_as_service(capability_bounding_set(), OPERATIONS, tmp_path)
    assert outcome == dict.fromkeys(OPERATIONS)


@needs_root
@pytest.mark.parametrize("capability", sorted(NEEDED_FOR))
def test_every_kept_capability_is_needed(capability: str, tmp_path: Path) -> None:
    without = [c for c in capability_bounding_set() if c != capability]
    operation, failure = NEEDED_FOR[capability]
    outcome = run_as_service(without, [operation], tmp_path)
    error = outcome[operation]
    assert error is not None, f"{operation} works without {capability}"
    assert failure in error


@pytest.fixture
def workspace() -> Iterator[Path]:
    """A workspace as tmpfiles.d makes it: 0700, owned by the run-as identity,
    below directories anyone may traverse (and not under /tmp, which the
    child's own tmpfs hides)."""
    parent = Path(tempfile.mkdtemp(prefix="hostcap-srv-", dir="/var/tmp"))
    try:
        parent.chmod(0o755)
        path = parent / "workspace"
        path.mkdir(mode=0o700)
        os.chown(path, 65534, 65534)
        yield path
    finally:
        shutil.rmtree(parent)


@needs_root
def test_a_child_starts_in_its_0700_workspace_without_dac_capabilities(
    workspace: Path, tmp_path: Path
) -> None:
    outcome = run_as_service(
        capability_bounding_set(), ["cwd_in_workspace"], tmp_path, str(workspace)
    )
    assert outcome == {"cwd_in_workspace": None}


# --- the system-call allow list --------------------------------------------------------

#: What the daemon's own work and its children's set-up call.
DAEMON_CALLS = (
    "clone", "clone3", "unshare", "setns", "mount", "umount2", "pivot_root",
    "mount_setattr", "open_tree", "move_mount", "sethostname", "setresuid",
    "setresgid", "setgroups", "capset", "capget", "prctl", "seccomp",
    "landlock_create_ruleset", "landlock_add_rule", "landlock_restrict_self",
    "execve", "execveat", "close_range", "prlimit64", "wait4", "waitid",
    "pidfd_open", "pidfd_send_signal", "kill", "openat2", "sendmsg", "recvmsg",
    "socket", "bind", "listen", "accept4", "ioctl", "fchown", "fchmod",
    "fsync", "fdatasync", "renameat2", "statx", "epoll_wait", "eventfd2",
)  # fmt: skip
#: What ordinary programs in a child call (git, compilers, Python, Node, make).
PROGRAM_CALLS = (
    "mmap", "mprotect", "munmap", "brk", "futex", "rseq", "getrandom",
    "memfd_create", "mincore", "pkey_alloc", "pkey_mprotect", "madvise",
    "setpriority", "sched_setaffinity", "personality", "vfork", "pipe2",
    "dup3", "getdents64", "inotify_init1", "flock", "utimensat", "fchmodat",
    "symlinkat", "linkat", "setsid", "setpgid", "connect", "sendto",
)  # fmt: skip
#: What nothing of ours needs and an attacker wants.
REFUSED_CALLS = (
    "ptrace", "pidfd_getfd", "perf_event_open",
    "bpf", "kexec_load", "kexec_file_load", "reboot", "init_module",
    "finit_module", "delete_module", "swapon", "swapoff", "clock_settime",
    "settimeofday", "adjtimex", "iopl", "ioperm", "modify_ldt",
    "open_by_handle_at", "acct", "syslog", "quotactl", "uselib", "vhangup",
)  # fmt: skip


@cache
def syscall_group(name: str) -> frozenset[str]:
    """The calls in a @group, nested groups expanded, from systemd's own tables."""
    assert SYSTEMD_ANALYZE is not None
    result = run([SYSTEMD_ANALYZE, "syscall-filter", "--no-pager", name])
    assert result.returncode == 0, result.stderr
    calls: set[str] = set()
    for line in result.stdout.splitlines()[1:]:
        entry = line.strip()
        if not entry or entry.startswith("#"):
            continue
        calls |= syscall_group(entry) if entry.startswith("@") else {entry}
    return frozenset(calls)


def expand(items: list[str]) -> set[str]:
    calls: set[str] = set()
    for item in items:
        calls |= syscall_group(item) if item.startswith("@") else {item}
    return calls


@cache
def allowed_calls() -> frozenset[str]:
    # The first assignment is an allow list; each later ~assignment removes.
    lines = service()["SystemCallFilter"]
    assert not lines[0].startswith("~"), "the filter must be an allow list"
    allowed = expand(lines[0].split())
    for line in lines[1:]:
        assert line.startswith("~"), f"a second allow list widens the first: {line}"
        allowed -= expand(line[1:].split())
    return frozenset(allowed)


@needs_systemd_analyze
@pytest.mark.parametrize("call", DAEMON_CALLS + PROGRAM_CALLS)
def test_the_system_call_filter_allows_what_the_daemon_and_its_children_need(call: str) -> None:
    assert call in allowed_calls()


@needs_systemd_analyze
@pytest.mark.parametrize("call", REFUSED_CALLS)
def test_the_system_call_filter_refuses_what_nothing_of_ours_needs(call: str) -> None:
    assert call not in allowed_calls()


# --- sysusers.d, tmpfiles.d and the example config ------------------------------------


@pytest.fixture(scope="module")
def scratch_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A root with this host's users plus those sysusers.d creates, and the
    directories tmpfiles.d creates."""
    for tool in ("systemd-sysusers", "systemd-tmpfiles"):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} is not installed")
    root = tmp_path_factory.mktemp("root")
    (root / "etc").mkdir()
    for name in ("passwd", "group", "shadow", "gshadow"):
        if Path("/etc", name).exists():
            shutil.copy(Path("/etc", name), root / "etc" / name)
    result = run(["systemd-sysusers", f"--root={root}", str(SYSUSERS)])
    assert result.returncode == 0, result.stderr
    result = run(["systemd-tmpfiles", f"--root={root}", "--create", str(TMPFILES)])
    assert result.returncode == 0, result.stderr
    return root


def entries(path: Path) -> dict[str, list[str]]:
    """name -> fields of a passwd or group file."""
    return {line.split(":")[0]: line.split(":") for line in path.read_text().splitlines() if line}


def test_sysusers_creates_the_groups_and_an_unprivileged_run_as_user(scratch_root: Path) -> None:
    users = entries(scratch_root / "etc" / "passwd")
    groups = entries(scratch_root / "etc" / "group")
    assert {"hostcap", "hostcap-admin", "hostcap-run"} <= groups.keys()
    run_as = users["hostcap-run"]
    assert run_as[2] != "0" and run_as[3] != "0"
    assert run_as[6].endswith("nologin")
    # A sandboxed child must not reach a tenant or the admin socket.
    for group in ("hostcap", "hostcap-admin"):
        assert "hostcap-run" not in groups[group][3].split(",")


def test_tmpfiles_makes_the_example_workspace_private_to_its_tenant(scratch_root: Path) -> None:
    run_as = entries(scratch_root / "etc" / "passwd")["hostcap-run"]
    workspace = (scratch_root / "srv/hostcap/example/workspace").stat()
    assert (workspace.st_uid, workspace.st_gid) == (int(run_as[2]), int(run_as[3]))
    assert workspace.st_mode & 0o7777 == 0o700
    reference = (scratch_root / "srv/hostcap/example/reference").stat()
    assert (reference.st_uid, reference.st_mode & 0o022) == (0, 0)
    config_dir = (scratch_root / "etc/hostcap").stat()
    assert config_dir.st_mode & 0o007 == 0


LOAD_CONFIG = textwrap.dedent(
    """
    import json, sys
    from pathlib import Path
    from hostcapd.config import load_config
    config = load_config(Path(sys.argv[1]))
    print(json.dumps({
        "state_dir": str(config.daemon.state_dir),
        "runtime_dir": str(config.daemon.runtime_dir),
        "audit": str(config.audit.path),
        "audit_group": config.audit.group,
        "admin_socket": str(config.admin.socket),
        "admin_group": config.admin.group,
        "tenants": [{
            "socket": str(t.socket),
            "socket_gid": t.socket_gid,
            "uid": t.uid,
            "gid": t.gid,
            "roots": [str(r.path) for r in t.roots],
            "oom_score_adj": t.sandbox.oom_score_adj,
            "open_files": t.limits.ceiling.open_files,
            "allow_host_network": t.sandbox.allow_host_network,
        } for t in config.tenants],
    }))
    """
)


@pytest.fixture(scope="module")
def example_config(scratch_root: Path) -> dict[str, Any]:
    """The example config as load_config reads it on a host where sysusers.d
    has run: the scratch root's user database is bind-mounted over this
    host's for the one process that loads it."""
    if os.geteuid() != 0:
        pytest.skip("bind-mounting the scratch user database needs root")
    etc = scratch_root / "etc"
    script = (
        f'mount --bind "{etc}/passwd" /etc/passwd && mount --bind "{etc}/group" /etc/group'
        ' && exec "$@"'
    )
    result = run(
        ["unshare", "--mount", "--propagation", "private", "sh", "-c", script, "load",
         sys.executable, "-c", LOAD_CONFIG, str(EXAMPLE_CONFIG)],
        cwd=REPO,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    loaded: dict[str, Any] = json.loads(result.stdout)
    return loaded


def test_the_example_config_loads_with_the_sysusers_identities(
    scratch_root: Path, example_config: dict[str, Any]
) -> None:
    users = entries(scratch_root / "etc" / "passwd")
    groups = entries(scratch_root / "etc" / "group")
    [tenant] = example_config["tenants"]
    assert (tenant["uid"], tenant["gid"]) == (
        int(users["hostcap-run"][2]),
        int(groups["hostcap-run"][2]),
    )
    assert tenant["socket_gid"] == int(groups["hostcap"][2])
    assert example_config["admin_group"] in groups
    assert example_config["audit_group"] in groups


def test_the_example_config_fits_the_units_directories_and_limits(
    example_config: dict[str, Any],
) -> None:
    runtime = Path("/run") / setting("RuntimeDirectory")
    assert Path(str(example_config["runtime_dir"])) == runtime
    assert Path(str(example_config["state_dir"])) == Path("/var/lib") / setting("StateDirectory")
    assert Path(str(example_config["audit"])).parent == Path("/var/log") / setting("LogsDirectory")
    assert Path(str(example_config["admin_socket"])).parent == runtime
    # ExecStart reads the config from a directory tmpfiles.d creates.
    config_path = setting("ExecStart").split("--config", 1)[1].split()[0]
    created = {line.split()[1] for line in TMPFILES.read_text().splitlines() if line[:1] == "d"}
    assert str(Path(config_path).parent) in created
    writable = [Path(p.lstrip("-")) for p in setting("ReadWritePaths").split()]
    for tenant in example_config["tenants"]:
        assert Path(tenant["socket"]).parent == runtime
        for root in tenant["roots"]:
            # Under ProtectSystem=strict only these trees can be written.
            assert any(Path(root).is_relative_to(w) for w in writable), root
            assert root in created, f"{root} is not made by tmpfiles.d"
        # Children raise their oom_score_adj, never lower it below the unit's.
        assert tenant["oom_score_adj"] >= int(setting("OOMScoreAdjust"))
        # Lowering an rlimit needs no privilege; raising past the hard one would.
        assert tenant["open_files"] <= int(setting("LimitNOFILE"))
        # PrivateNetwork=yes: no host network without the documented drop-in.
        assert tenant["allow_host_network"] is False


# --- the containers of deploy/: the unit's confinement, carried over -----------------


def deploy_capabilities() -> dict[str, list[str]]:
    """The capabilities each container of deploy/ adds to an empty set."""
    import yaml

    with (REPO / "deploy" / "kubernetes" / "hostcapd.yaml").open() as f:
        documents = [d for d in yaml.safe_load_all(f) if d]
    ds = next(d for d in documents if d["kind"] == "DaemonSet")
    (container,) = ds["spec"]["template"]["spec"]["containers"]
    job = json.loads((REPO / "deploy" / "nomad" / "hostcapd.nomad.json").read_text())["Job"]
    task = next(t for t in job["TaskGroups"][0]["Tasks"] if t["Name"] == "hostcapd")
    return {
        "kubernetes": container["securityContext"]["capabilities"]["add"],
        "nomad": task["Config"]["cap_add"],
    }


@pytest.mark.parametrize("where", ["kubernetes", "nomad"])
def test_the_containers_get_exactly_the_units_capabilities(where: str) -> None:
    added = deploy_capabilities()[where]
    assert len(added) == len(set(added))
    assert sorted("CAP_" + c for c in added) == sorted(capability_bounding_set())


@needs_systemd_analyze
def test_the_containers_seccomp_profile_allows_exactly_what_the_unit_allows() -> None:
    profile = json.loads((REPO / "deploy" / "seccomp" / "hostcapd.json").read_text())
    (rule,) = profile["syscalls"]
    assert rule["action"] == "SCMP_ACT_ALLOW"
    assert set(rule["names"]) == allowed_calls()
    # SystemCallErrorNumber=EPERM
    assert (profile["defaultAction"], profile["defaultErrnoRet"]) == ("SCMP_ACT_ERRNO", 1)
    assert setting("SystemCallErrorNumber") == "EPERM"


@needs_root
def test_the_daemon_builds_a_full_sandbox_with_the_containers_capabilities(
    tmp_path: Path,
) -> None:
    # The sandbox probe above, under the DaemonSet's capability set.
    added = ["CAP_" + c for c in deploy_capabilities()["kubernetes"]]
    outcome = run_as_service(added, OPERATIONS, tmp_path)
    assert outcome == dict.fromkeys(OPERATIONS)
