"""The Prometheus endpoint of a real daemon, scraped with prometheus_client's
own parser: off by default, on a Unix socket or a loopback port, and its
counts move with real spawns, refusals, file operations and audit records."""

from __future__ import annotations

import contextlib
import http.client
import os
import re
import socket
import stat
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import grpc
import pytest
from hostcap_proto.v1 import fs_pb2, fs_pb2_grpc
from ops_support import hostcapctl, wait_admin, wait_until
from prometheus_client.parser import text_string_to_metric_families
from support.daemon import REPO, Daemon
from support.process import Client, outcome, request

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def parse(text: str) -> Samples:
    samples: Samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples


def scrape(daemon: Daemon) -> Samples:
    done = hostcapctl("metrics", admin=daemon.admin_socket)
    assert done.returncode == 0, done.stderr
    return parse(done.stdout)


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


@pytest.fixture
def metered(start_daemon: Callable[..., Daemon], state_dir: Path) -> Daemon:
    return wait_admin(start_daemon(metrics={"socket": str(state_dir / "run" / "metrics.sock")}))


def test_metrics_are_off_by_default(daemon: Daemon) -> None:
    wait_admin(daemon)
    assert not (daemon.state / "run" / "metrics.sock").exists()
    done = hostcapctl("metrics", admin=daemon.admin_socket)
    assert done.returncode == 2 and "cannot read the metrics" in done.stderr


def test_the_socket_is_root_and_the_admin_groups_only(metered: Daemon) -> None:
    st = (metered.state / "run" / "metrics.sock").lstat()
    assert stat.S_ISSOCK(st.st_mode)
    assert (st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)) == (0, 0, 0o600)


async def test_counts_move_with_real_spawns(metered: Daemon, marker: str) -> None:
    before = scrape(metered)
    client = Client(metered.socket)
    try:
        assert outcome(await client.run("true")) == "EXITED"
        assert outcome(await client.run("sh", "-c", "exit 3")) == "EXITED"
        assert outcome(await client.run("sleep", "30", limits={"wall_seconds": 0.3})) == "TIMEOUT"
        assert await client.refusal("/no/such/program") != ""
        # One running spawn: the gauge sees it.
        call = client.stub.Spawn(request(["sleep", "1000"], env={"TEST_MARKER": marker}))
        async for event in call:
            assert event.WhichOneof("event") == "started"
            break
        during = scrape(metered)
        assert value(during, "hostcapd_spawns_running", tenant="dev") == 1
        assert value(during, "hostcapd_spawn_quota", tenant="dev") == 64
        call.cancel()
        async with grpc.aio.insecure_channel(f"unix:{metered.socket}") as channel:
            fs = fs_pb2_grpc.FsServiceStub(channel)  # type: ignore[no-untyped-call]
            await fs.WriteFile(fs_pb2.WriteFileRequest(path="m.txt", data=b"x"))
            await fs.ReadFile(fs_pb2.ReadFileRequest(path="m.txt"))
            with pytest.raises(grpc.aio.AioRpcError):
                await fs.ReadFile(fs_pb2.ReadFileRequest(path="../../etc/shadow"))
    finally:
        await client.close()
    wait_until(
        lambda: value(scrape(metered), "hostcapd_spawns_running", tenant="dev") == 0,
        "the cancelled spawn ends",
    )
    after = scrape(metered)

    def moved(name: str, **labels: str) -> float:
        return value(after, name, **labels) - value(before, name, **labels)

    assert moved("hostcapd_spawns_total", tenant="dev", outcome="EXITED") == 2
    assert moved("hostcapd_spawns_total", tenant="dev", outcome="TIMEOUT") == 1
    assert moved("hostcapd_spawns_total", tenant="dev", outcome="CANCELLED") == 1
    assert moved("hostcapd_spawn_duration_seconds_count", tenant="dev") == 4
    assert moved("hostcapd_spawn_setup_seconds_count", tenant="dev") == 4
    assert moved("hostcapd_audit_records_total", event="process.exec") == 4
    assert moved("hostcapd_audit_records_total", event="process.exit") == 4
    assert moved("hostcapd_audit_records_total", event="file.write") == 1
    assert moved("hostcapd_audit_fsync_seconds_count") >= 1
    refused = {
        dict(labels)["reason"]: v - before.get((name, labels), 0.0)
        for (name, labels), v in after.items()
        if name == "hostcapd_refusals_total" and dict(labels)["tenant"] == "dev"
    }
    assert sum(refused.values()) >= 2, refused  # the missing program and the escape
    assert moved("hostcapd_fs_operations_total", tenant="dev", op="WriteFile", result="OK") == 1
    assert moved("hostcapd_fs_operations_total", tenant="dev", op="ReadFile", result="OK") == 1
    # The default tenant has a pid namespace: its spawns take warm children
    # (the last may find none ready yet: each is replaced once its command runs).
    taken = moved("hostcapd_warm_spawns_total", tenant="dev", result="taken")
    missed = moved("hostcapd_warm_spawns_total", tenant="dev", result="missed")
    assert taken + missed == 4 and taken >= 2, (taken, missed)
    wait_until(
        lambda: value(scrape(metered), "hostcapd_warm_children", tenant="dev") == 2,
        "the pool to fill again",
    )
    failed_reads = sum(
        v - before.get((name, labels), 0.0)
        for (name, labels), v in after.items()
        if name == "hostcapd_fs_operations_total"
        and dict(labels)["op"] == "ReadFile"
        and dict(labels)["result"] != "OK"
    )
    assert failed_reads == 1
    assert value(after, "hostcapd_journal_records_dropped_total") == 0
    assert value(after, "hostcapd_audit_deferred_exit_records") == 0
    # Started beside ended: the four that ran (the missing program was refused).
    assert moved("hostcapd_spawns_started_total", tenant="dev") == 4
    # The daemon process itself, under the standard names.
    assert value(after, "process_resident_memory_bytes") > 0
    assert value(after, "process_open_fds") > 0
    assert value(after, "process_cpu_seconds_total") > 0
    assert not any(name.startswith("hostcapd_process_") for name, _ in after)


def get(sock: Path, target: str, method: str = "GET") -> tuple[int, str]:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(str(sock))
    connection = http.client.HTTPConnection("localhost")
    connection.sock = s
    connection.request(method, target)
    response = connection.getresponse()
    body = response.read().decode()
    connection.close()
    return response.status, body


def test_only_get_metrics_is_served(metered: Daemon) -> None:
    sock = metered.state / "run" / "metrics.sock"
    assert get(sock, "/metrics")[0] == 200
    assert get(sock, "/")[0] == 404
    assert get(sock, "/metrics", "POST")[0] == 405
    # Garbage and a client that never finishes its request do not hurt it.
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(str(sock))
    s.sendall(b"\x00" * 100 + b"\r\n\r\n")
    assert s.recv(100).startswith(b"HTTP/1.1 400")
    s.close()
    assert get(sock, "/metrics")[0] == 200


def test_a_loopback_port(start_daemon: Callable[..., Daemon]) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    daemon = wait_admin(start_daemon(metrics={"listen": f"127.0.0.1:{port}"}))
    done = hostcapctl("metrics", "--url", f"http://127.0.0.1:{port}/metrics")
    assert done.returncode == 0, done.stderr
    assert "hostcapd_spawns_running" in parse_names(done.stdout)
    assert daemon.proc is not None and daemon.proc.poll() is None


def parse_names(text: str) -> set[str]:
    return {f.name for f in text_string_to_metric_families(text)}


@pytest.mark.parametrize("listen", ["0.0.0.0:9464", "192.168.1.1:80", "localhost:9464"])
def test_a_non_loopback_address_is_refused(
    start_daemon: Callable[..., Daemon], listen: str
) -> None:
    with pytest.raises(RuntimeError) as refused:
        start_daemon(metrics={"listen": listen})
    assert "must be 127.0.0.1:PORT" in str(refused.value)


def test_the_dev_config_serves_metrics(tmp_path: Path) -> None:
    from hostcapd.config import dev_config

    config = dev_config(tmp_path / "state")
    assert config.metrics is not None
    assert config.metrics.socket == (tmp_path / "state" / "run" / "metrics.sock").resolve()


# --- what an SRE expects beside the counts ---------------------------------------------


def test_build_info_says_the_version_and_the_commit(metered: Daemon) -> None:
    from hostcap_proto import build

    samples = scrape(metered)
    builds = [dict(labels) for name, labels in samples if name == "hostcapd_build_info"]
    assert len(builds) == 1, builds
    # The one source of both (setuptools-scm's, as `hostcapd --version` says).
    assert builds[0] == {"version": build.VERSION, "commit": build.COMMIT}
    assert value(samples, "hostcapd_build_info", **builds[0]) == 1
    if build.COMMIT != build.UNKNOWN:
        assert re.fullmatch(r"[0-9a-f]{7,40}", build.COMMIT), build.COMMIT
        known = subprocess.run(
            ["git", "-C", str(REPO), "cat-file", "-e", f"{build.COMMIT}^{{commit}}"],
            capture_output=True,
            check=False,
        )
        assert known.returncode == 0, f"{build.COMMIT} is not a commit of this repository"


def test_no_created_series_and_every_counter_ends_in_total(metered: Daemon) -> None:
    done = hostcapctl("metrics", admin=metered.admin_socket)
    assert done.returncode == 0, done.stderr
    assert "_created" not in done.stdout
    for family in text_string_to_metric_families(done.stdout):
        if family.type == "counter":
            assert all(s.name.endswith("_total") for s in family.samples), family.name


def test_reloads_are_reported_successful_or_not_with_the_time(metered: Daemon) -> None:
    started = scrape(metered)
    assert value(started, "hostcapd_config_last_reload_successful") == 1
    applied_at = value(started, "hostcapd_config_last_reload_success_timestamp_seconds")
    assert 0 < applied_at <= time.time()

    good = dict(metered.config)
    metered.config_path.write_text("[daemon]\nstate_dir = 1\n")  # refused
    assert hostcapctl("reload", admin=metered.admin_socket).returncode == 125
    refused = scrape(metered)
    assert value(refused, "hostcapd_config_last_reload_successful") == 0
    assert value(refused, "hostcapd_config_last_reload_success_timestamp_seconds") == applied_at

    metered.config = good
    metered.write_config()
    assert hostcapctl("reload", admin=metered.admin_socket).returncode == 0
    applied = scrape(metered)
    assert value(applied, "hostcapd_config_last_reload_successful") == 1
    assert value(applied, "hostcapd_config_last_reload_success_timestamp_seconds") > applied_at


async def test_a_full_audit_volume_shows_in_free_bytes_and_write_errors(
    start_daemon: Callable[..., Daemon], state_dir: Path
) -> None:
    volume = state_dir / "audit-volume"
    volume.mkdir()
    subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=256k,mode=0755", "tmpfs", str(volume)], check=True
    )
    try:
        daemon = wait_admin(
            start_daemon(
                metrics={"socket": str(state_dir / "run" / "metrics.sock")},
                audit={"path": str(volume / "audit.jsonl"), "group": "root", "journal": "off"},
            )
        )
        before = scrape(daemon)
        free = value(before, "hostcapd_audit_volume_free_bytes")
        st = os.statvfs(volume)
        assert free > 0 and abs(free - st.f_bfree * st.f_frsize) <= 64 * 1024
        assert value(before, "hostcapd_audit_errors_total", operation="write") == 0
        assert ("hostcapd_audit_errors_total", (("operation", "fsync"),)) in before
        filler = volume / "filler"
        with open(filler, "wb", buffering=0) as out:
            for step in (65536, 4096, 512, 1):
                with contextlib.suppress(OSError):
                    while True:
                        out.write(b"\0" * step)
        client = Client(daemon.socket)
        try:
            reason = ""
            for _ in range(8):  # the log's last page may take a line or two
                try:
                    reason = await client.refusal("true")
                except AssertionError:  # it ran
                    continue
                break
            assert reason == "AUDIT_UNAVAILABLE"
        finally:
            await client.close()
        full = scrape(daemon)
        assert value(full, "hostcapd_audit_volume_free_bytes") == 0
        assert value(full, "hostcapd_audit_errors_total", operation="write") >= 1
        filler.unlink()
        assert value(scrape(daemon), "hostcapd_audit_volume_free_bytes") > 0
        daemon.stop()
    finally:
        subprocess.run(["umount", "-l", str(volume)], check=False)
