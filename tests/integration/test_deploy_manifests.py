"""The deployment files in deploy/ parse, and hold the fields that matter:
one privileged hostcapd per node, its sockets on a hostPath the engines on
that node share, the config mounted where the command reads it, the audit
log on the node and the node's journal socket mounted; and the config they
carry is deploy/hostcapd.toml, which hostcapd itself accepts."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml
from hostcapd.config import parse_config
from support.daemon import REPO

DEPLOY = REPO / "deploy"
CONFIG_TEXT = (DEPLOY / "hostcapd.toml").read_text()
SOCKETS = "/run/hostcap"


def test_the_deploy_config_is_a_config_hostcapd_accepts() -> None:
    config = parse_config(tomllib.loads(CONFIG_TEXT), "deploy/hostcapd.toml")
    assert config.daemon.runtime_dir == Path(SOCKETS)
    assert all(t.socket.parent == Path(SOCKETS) for t in config.tenants)
    assert config.admin is not None and config.admin.socket.parent == Path(SOCKETS)
    assert config.audit.journal == "on"  # shipped through the node's journal
    assert all(t.uid != 0 and t.gid != 0 for t in config.tenants)
    assert all(t.socket_mode & 0o007 == 0 for t in config.tenants)


# --- Kubernetes ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def k8s() -> dict[str, dict[str, Any]]:
    with (DEPLOY / "kubernetes" / "hostcapd.yaml").open() as f:
        documents = [d for d in yaml.safe_load_all(f) if d]
    return {d["kind"]: d for d in documents}


def test_the_daemonset_runs_one_privileged_hostcapd_per_node(k8s: dict[str, Any]) -> None:
    ds = k8s["DaemonSet"]
    assert ds["apiVersion"] == "apps/v1"
    pod = ds["spec"]["template"]["spec"]
    assert ds["spec"]["selector"]["matchLabels"].items() <= (
        ds["spec"]["template"]["metadata"]["labels"].items()
    )
    assert ds["spec"]["updateStrategy"]["rollingUpdate"]["maxUnavailable"] == 1
    (container,) = pod["containers"]
    assert container["securityContext"]["privileged"] is True
    assert container["securityContext"]["runAsUser"] == 0
    assert container["command"][:2] == ["hostcapd", "serve"]
    assert not pod.get("hostNetwork") and not pod.get("hostPID")
    # Health over the admin socket.
    probe = container["livenessProbe"]["exec"]["command"]
    assert probe[0] == "hostcapctl" and probe[-1] == "health"
    assert pod["terminationGracePeriodSeconds"] >= 10


def test_the_daemonset_mounts_the_config_and_the_node_paths(k8s: dict[str, Any]) -> None:
    pod = k8s["DaemonSet"]["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    config_path = Path(container["command"][container["command"].index("--config") + 1])
    # The config: the ConfigMap's key, where the command reads it.
    config_volume = volumes[mounts[str(config_path.parent)]]
    assert config_volume["configMap"]["name"] == k8s["ConfigMap"]["metadata"]["name"]
    assert config_path.name in k8s["ConfigMap"]["data"]
    assert k8s["ConfigMap"]["data"][config_path.name] == CONFIG_TEXT
    # Sockets, roots, audit log and state on the node; the node's journal socket.
    for path in (SOCKETS, "/srv/hostcap", "/var/log/hostcap", "/var/lib/hostcap"):
        assert volumes[mounts[path]]["hostPath"]["path"] == path, path
    journal = volumes[mounts["/run/systemd/journal/socket"]]["hostPath"]
    assert journal == {"path": "/run/systemd/journal/socket", "type": "Socket"}


def test_an_engine_pod_reaches_the_socket_through_the_same_host_path(
    k8s: dict[str, Any],
) -> None:
    engine = k8s["Pod"]["spec"]
    config = parse_config(tomllib.loads(CONFIG_TEXT))
    tenant = config.tenants[0]
    assert tenant.socket_gid in engine["securityContext"]["supplementalGroups"]
    assert engine["securityContext"]["runAsUser"] not in (0, tenant.uid)
    (volume,) = engine["volumes"]
    assert volume["hostPath"]["path"] == SOCKETS
    env = {e["name"]: e["value"] for e in engine["containers"][0]["env"]}
    assert Path(env["HOSTCAP_SOCKET"]) == tenant.socket
    assert "privileged" not in json.dumps(engine)


# --- Nomad --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def nomad() -> dict[str, Any]:
    job: dict[str, Any] = json.loads((DEPLOY / "nomad" / "hostcapd.nomad.json").read_text())
    return job["Job"]


def test_the_nomad_job_is_a_privileged_system_job(nomad: dict[str, Any]) -> None:
    assert nomad["Type"] == "system"  # one allocation on every client node
    (group,) = nomad["TaskGroups"]
    tasks = {t["Name"]: t for t in group["Tasks"]}
    daemon = tasks["hostcapd"]
    assert daemon["Driver"] == "docker"
    assert daemon["Config"]["privileged"] is True
    assert daemon["Config"]["command"] == "hostcapd"
    assert daemon["KillSignal"] == "SIGTERM" and daemon["KillTimeout"] >= 10 * 10**9
    assert tasks["roots"]["Lifecycle"]["Hook"] == "prestart"


def test_the_nomad_job_mounts_the_config_and_the_node_paths(nomad: dict[str, Any]) -> None:
    daemon = next(t for t in nomad["TaskGroups"][0]["Tasks"] if t["Name"] == "hostcapd")
    args = daemon["Config"]["args"]
    config_path = args[args.index("--config") + 1]
    (template,) = daemon["Templates"]
    # The task's local/ directory is /local in the container.
    assert "/" + template["DestPath"] == config_path
    assert template["EmbeddedTmpl"] == CONFIG_TEXT
    volumes = dict(v.split(":", 1) for v in daemon["Config"]["volumes"])
    for path in (
        SOCKETS,
        "/srv/hostcap",
        "/var/log/hostcap",
        "/var/lib/hostcap",
        "/run/systemd/journal/socket",
    ):
        assert volumes[path] == path, path
