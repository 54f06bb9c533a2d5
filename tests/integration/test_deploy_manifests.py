"""The deployment files in deploy/: valid for the Kubernetes API (strict, two
versions, with the schemas kubernetes-validate ships: no network), and
confined as the systemd unit is: no privileged container, the unit's
capabilities and no others (test_systemd_unit.py compares the sets), its
system-call allow list as a seccomp profile, an AppArmor profile of its own,
Pod Security labels, a priority class, a memory request from the formula of
docs/deploy.md, probes without an interpreter, and engine pods that see only
their own tenant's socket directory. The config they carry is
deploy/hostcapd.toml, which hostcapd itself accepts."""

from __future__ import annotations

import copy
import json
import math
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from hostcapd.config import Config, parse_config
from support.daemon import REPO

DEPLOY = REPO / "deploy"
CONFIG_TEXT = (DEPLOY / "hostcapd.toml").read_text()
CONFIG = parse_config(tomllib.loads(CONFIG_TEXT), "deploy/hostcapd.toml")
SOCKETS = Path("/run/hostcap")
SECCOMP = DEPLOY / "seccomp" / "hostcapd.json"
APPARMOR = DEPLOY / "apparmor" / "hostcapd"
#: The oldest and the newest API the manifests are checked against.
KUBERNETES_VERSIONS = ("1.33.0", "1.37.0")
MIB = 2**20


def memory_request_mib(config: Config) -> int:
    """docs/deploy.md, Sizing: the daemon (64 MiB, and 40 MiB per tenant for
    its front-end, fs worker and warm children), plus every tenant's spawns
    at their memory ceiling, as many as it may run at once."""
    spawns = sum(
        t.max_concurrent_spawns * (t.limits.ceiling.memory_bytes or 0) for t in config.tenants
    )
    return 64 + 40 * len(config.tenants) + math.ceil(spawns / MIB)


def test_the_deploy_config_is_a_config_hostcapd_accepts() -> None:
    assert CONFIG.daemon.runtime_dir == SOCKETS
    assert CONFIG.audit.journal == "on"  # shipped through the node's journal
    assert all(t.uid != 0 and t.gid != 0 for t in CONFIG.tenants)
    assert all(t.socket_mode & 0o007 == 0 for t in CONFIG.tenants)
    assert all(t.limits.ceiling.memory_bytes for t in CONFIG.tenants)  # the sizing needs it


def test_each_tenant_socket_is_alone_in_its_own_directory() -> None:
    # What an engine pod mounts is its tenant's directory: nothing else may be there.
    assert CONFIG.admin is not None and CONFIG.metrics is not None
    others = {CONFIG.admin.socket, CONFIG.metrics.socket}
    directories = [t.socket.parent for t in CONFIG.tenants]
    assert len(set(directories)) == len(directories)
    for tenant in CONFIG.tenants:
        assert tenant.socket.parent == SOCKETS / "tenants" / tenant.name
        assert not any(s.is_relative_to(tenant.socket.parent) for s in others)


# --- Kubernetes ---------------------------------------------------------------------


def documents() -> list[dict[str, Any]]:
    with (DEPLOY / "kubernetes" / "hostcapd.yaml").open() as f:
        return [d for d in yaml.safe_load_all(f) if d]


@pytest.fixture(scope="module")
def k8s() -> dict[tuple[str, str], dict[str, Any]]:
    return {(d["kind"], d["metadata"]["name"]): d for d in documents()}


def pod_of(k8s: dict[tuple[str, str], dict[str, Any]]) -> dict[str, Any]:
    spec: dict[str, Any] = k8s[("DaemonSet", "hostcapd")]["spec"]["template"]["spec"]
    return spec


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
def test_every_manifest_is_valid_for_the_api_strictly(version: str) -> None:
    for document in documents():
        kubernetes_validate.validate(document, version, strict=True)


def test_the_validation_is_strict() -> None:
    # A field the API does not have is refused (a typo would be silently dropped otherwise).
    ds = next(d for d in documents() if d["kind"] == "DaemonSet")
    typo = copy.deepcopy(ds)
    typo["spec"]["template"]["spec"]["containers"][0]["securityContext"]["capabilites"] = {}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(typo, KUBERNETES_VERSIONS[-1], strict=True)


def test_the_namespaces_carry_pod_security_labels(k8s: dict[tuple[str, str], Any]) -> None:
    labels = k8s[("Namespace", "hostcap")]["metadata"]["labels"]
    prefix = "pod-security.kubernetes.io/"
    # hostPath and the capabilities are admitted only at privileged; the rest is warned.
    assert labels[prefix + "enforce"] == "privileged"
    assert labels[prefix + "warn"] == labels[prefix + "audit"] == "baseline"
    engines = k8s[("Namespace", "hostcap-engines")]["metadata"]["labels"]
    assert engines[prefix + "enforce"] == "privileged"  # the socket directory's hostPath
    assert engines[prefix + "warn"] == engines[prefix + "audit"] == "restricted"
    for namespace in (labels, engines):
        assert {namespace[prefix + m + "-version"] for m in ("enforce", "warn", "audit")} == {
            "latest"
        }


def test_the_daemonset_is_confined_as_the_unit(k8s: dict[tuple[str, str], Any]) -> None:
    ds = k8s[("DaemonSet", "hostcapd")]
    assert ds["metadata"]["namespace"] == "hostcap"
    pod = pod_of(k8s)
    assert ds["spec"]["updateStrategy"]["rollingUpdate"]["maxUnavailable"] == 1
    assert not pod["hostNetwork"] and not pod["hostPID"] and not pod["hostIPC"]
    assert pod["automountServiceAccountToken"] is False
    (container,) = pod["containers"]
    sc = container["securityContext"]
    assert sc["privileged"] is False and sc["runAsUser"] == 0
    assert sc["capabilities"]["drop"] == ["ALL"]  # the added ones: test_systemd_unit.py
    assert sc["readOnlyRootFilesystem"] is True
    assert sc["seccompProfile"] == {
        "type": "Localhost",
        "localhostProfile": "hostcap/hostcapd.json",
    }
    assert Path(sc["seccompProfile"]["localhostProfile"]).name == SECCOMP.name
    assert sc["appArmorProfile"] == {"type": "Localhost", "localhostProfile": "hostcapd"}
    assert f"profile {sc['appArmorProfile']['localhostProfile']} " in APPARMOR.read_text()
    assert "privileged: true" not in (DEPLOY / "kubernetes" / "hostcapd.yaml").read_text()
    # The init container: what creating the roots takes, nothing more.
    (init,) = pod["initContainers"]
    assert init["securityContext"]["capabilities"] == {"drop": ["ALL"], "add": ["CHOWN", "FOWNER"]}
    assert init["securityContext"]["allowPrivilegeEscalation"] is False


def test_the_daemonset_is_sized_and_prioritised_so_its_spawns_survive(
    k8s: dict[tuple[str, str], Any],
) -> None:
    pod = pod_of(k8s)
    assert pod["priorityClassName"] == "system-node-critical"
    (container,) = pod["containers"]
    resources = container["resources"]
    assert resources["requests"]["memory"] == f"{memory_request_mib(CONFIG)}Mi"
    # No memory limit: one limit over the daemon and every spawn would let
    # one tenant's spawns take the daemon down with them.
    assert "memory" not in resources.get("limits", {})
    assert pod["terminationGracePeriodSeconds"] >= 10


def probe_command(container: dict[str, Any], name: str) -> list[str]:
    command: list[str] = container[name]["exec"]["command"]
    return command


def test_the_probes_start_no_interpreter_and_ask_the_daemon(
    k8s: dict[tuple[str, str], Any],
) -> None:
    (container,) = pod_of(k8s)["containers"]
    assert CONFIG.metrics is not None
    for name in ("startupProbe", "livenessProbe"):
        command = probe_command(container, name)
        assert command[0] == "curl", command  # a C binary, not Python
        assert command[command.index("--unix-socket") + 1] == str(CONFIG.metrics.socket)
        assert command[-1].endswith("/healthz") and "-f" in command[1]
        # curl's own deadline falls within the probe's.
        assert int(command[command.index("--max-time") + 1]) < container[name]["timeoutSeconds"]
    liveness = container["livenessProbe"]
    # A restart ends every spawn on the node: only minutes of silence restart it.
    assert liveness["periodSeconds"] * liveness["failureThreshold"] >= 120
    assert "readinessProbe" not in container


def test_the_daemonset_mounts_the_config_and_the_node_paths(
    k8s: dict[tuple[str, str], Any],
) -> None:
    pod = pod_of(k8s)
    (container,) = pod["containers"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    script = container["command"][-1]
    config_path = Path(script.split("--config ", 1)[1].split()[0])
    assert script.rstrip().endswith(f"exec hostcapd serve --config {config_path}")
    config_volume = volumes[mounts[str(config_path.parent)]]
    assert config_volume["configMap"]["name"] == "hostcapd-config"
    assert k8s[("ConfigMap", "hostcapd-config")]["data"][config_path.name] == CONFIG_TEXT
    for path in (str(SOCKETS), "/srv/hostcap", "/var/log/hostcap", "/var/lib/hostcap"):
        assert volumes[mounts[path]]["hostPath"]["path"] == path, path
    journal = volumes[mounts["/run/systemd/journal/socket"]]["hostPath"]
    assert journal == {"path": "/run/systemd/journal/socket", "type": "Socket"}
    assert "emptyDir" in volumes[mounts["/tmp"]]


def test_an_engine_pod_sees_only_its_tenants_socket_directory(
    k8s: dict[tuple[str, str], Any],
) -> None:
    engine = k8s[("Pod", "engine-example")]
    assert engine["metadata"]["namespace"] == "hostcap-engines"
    spec = engine["spec"]
    (tenant,) = CONFIG.tenants
    (volume,) = spec["volumes"]
    assert volume["hostPath"] == {"path": str(tenant.socket.parent), "type": "Directory"}
    (container,) = spec["containers"]
    (mount,) = container["volumeMounts"]
    assert mount["readOnly"] is True
    env = {e["name"]: e["value"] for e in container["env"]}
    assert Path(env["HOSTCAP_SOCKET"]) == Path(mount["mountPath"]) / tenant.socket.name
    # Connects as a member of the socket's group; never root, never the run-as user.
    sc = spec["securityContext"]
    assert tenant.socket_gid in sc["supplementalGroups"]
    assert sc["runAsNonRoot"] is True and sc["runAsUser"] not in (0, tenant.uid)
    # Restricted in every field but the hostPath.
    assert sc["seccompProfile"] == {"type": "RuntimeDefault"}
    csc = container["securityContext"]
    assert csc["allowPrivilegeEscalation"] is False and csc["capabilities"] == {"drop": ["ALL"]}


# --- seccomp and AppArmor -----------------------------------------------------------


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="needs systemd-analyze")
def test_the_seccomp_profile_is_what_its_generator_writes() -> None:
    done = subprocess.run(
        [sys.executable, "-c", "import generate; print(generate.render(), end='')"],
        cwd=SECCOMP.parent, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout == SECCOMP.read_text(), "run python3 deploy/seccomp/generate.py"
    profile = json.loads(SECCOMP.read_text())
    assert profile["defaultAction"] == "SCMP_ACT_ERRNO" and profile["defaultErrnoRet"] == 1


@pytest.mark.skipif(shutil.which("apparmor_parser") is None, reason="needs apparmor_parser")
def test_the_apparmor_profile_parses() -> None:
    done = subprocess.run(
        ["apparmor_parser", "--preprocess", str(APPARMOR)],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    text = APPARMOR.read_text()
    for rule in ("mount,", "pivot_root,", "deny @{PROC}/sysrq-trigger rwklx,"):
        assert f"  {rule}" in text


# --- Nomad --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def nomad() -> dict[str, Any]:
    job: dict[str, Any] = json.loads((DEPLOY / "nomad" / "hostcapd.nomad.json").read_text())
    return job["Job"]


def nomad_task(nomad: dict[str, Any], name: str) -> dict[str, Any]:
    task: dict[str, Any] = next(t for t in nomad["TaskGroups"][0]["Tasks"] if t["Name"] == name)
    return task


def test_the_nomad_job_is_a_confined_system_job(nomad: dict[str, Any]) -> None:
    assert nomad["Type"] == "system"  # one allocation on every client node
    daemon = nomad_task(nomad, "hostcapd")
    config = daemon["Config"]
    assert daemon["Driver"] == "docker" and config["privileged"] is False
    assert config["cap_drop"] == ["ALL"]  # the added ones: test_systemd_unit.py
    assert config["readonly_rootfs"] is True and config["network_mode"] == "none"
    options = config["security_opt"]
    assert f"seccomp=/etc/hostcap/seccomp/{SECCOMP.name}" in options
    assert "apparmor=hostcapd" in options and "no-new-privileges" in options
    assert daemon["KillSignal"] == "SIGTERM" and daemon["KillTimeout"] >= 10 * 10**9
    roots = nomad_task(nomad, "roots")
    assert roots["Lifecycle"]["Hook"] == "prestart"
    assert roots["Config"]["cap_add"] == ["CHOWN", "FOWNER"]


def test_the_nomad_task_is_sized_by_the_formula_and_checked_without_an_interpreter(
    nomad: dict[str, Any],
) -> None:
    daemon = nomad_task(nomad, "hostcapd")
    # The task's memory is a hard limit over the daemon and its spawns: sized
    # so that every spawn at its ceiling fits (docs/deploy.md, Sizing).
    assert daemon["Resources"]["MemoryMB"] == memory_request_mib(CONFIG)
    (service,) = daemon["Services"]
    (check,) = service["Checks"]
    assert check["Type"] == "script" and check["Command"] == "curl"
    assert CONFIG.metrics is not None
    assert check["Args"][check["Args"].index("--unix-socket") + 1] == str(CONFIG.metrics.socket)
    assert check["Args"][-1].endswith("/healthz")
    assert check["CheckRestart"]["Grace"] >= 60 * 10**9


def test_the_nomad_job_mounts_the_config_and_the_node_paths(nomad: dict[str, Any]) -> None:
    daemon = nomad_task(nomad, "hostcapd")
    script = daemon["Config"]["args"][-1]
    config_path = script.split("--config ", 1)[1].split()[0]
    (template,) = daemon["Templates"]
    # The task's local/ directory is /local in the container.
    assert "/" + template["DestPath"] == config_path
    assert template["EmbeddedTmpl"] == CONFIG_TEXT
    volumes = dict(v.split(":", 1) for v in daemon["Config"]["volumes"])
    for path in (
        str(SOCKETS),
        "/srv/hostcap",
        "/var/log/hostcap",
        "/var/lib/hostcap",
        "/run/systemd/journal/socket",
    ):
        assert volumes[path] == path, path
