"""The Prometheus endpoint of a real daemon, scraped with prometheus_client's
own parser: off by default, on a Unix socket or a loopback port, and its
counts move with real spawns, refusals, file operations and audit records."""

from __future__ import annotations

import http.client
import socket
import stat
from collections.abc import Callable
from pathlib import Path

import grpc
import pytest
from hostcap_proto.v1 import fs_pb2, fs_pb2_grpc
from ops_support import hostcapctl, wait_admin, wait_until
from prometheus_client.parser import text_string_to_metric_families
from support.daemon import Daemon
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
    # The daemon process itself.
    assert value(after, "hostcapd_process_resident_memory_bytes") > 0
    assert value(after, "hostcapd_process_open_fds") > 0
    assert value(after, "hostcapd_process_cpu_seconds_total") > 0


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
