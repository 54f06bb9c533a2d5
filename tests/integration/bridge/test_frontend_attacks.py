"""Attacks from inside a tenant's front-end.

The root side runs here, in the test's process, exactly as hostcapd runs
it (`Daemon.start`), with two tenants: "victim" and "attacker". A test
replaces the front-end program with tests/support/hostile_frontend.py and
kills the attacker's real front-end: the daemon's restart starts the
hostile one with the attacker's channel, as the front-end user, and it
confines itself with the front-end's own function before it attacks. Each
attack must fail for its own reason; what reaches the root side over the
channel is refused there with a `policy.deny` naming the attacker.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import psutil
import pytest
from hostcap_proto.v1 import fs_pb2, fs_pb2_grpc, process_pb2
from hostcapd.bridge.frontends import FrontendProcess, frontend_identity
from hostcapd.config import load_config
from hostcapd.daemon import Daemon
from support import toml
from support.daemon import (
    NOBODY,
    GiB,
    MiB,
    audit_records,
    daemon_config,
    prepare_roots,
    tenant_config,
)

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0, reason="the split runs front-ends as another user"
)

HOSTILE = Path(__file__).resolve().parents[2] / "support" / "hostile_frontend.py"


class Split:
    def __init__(self, daemon: Daemon, state: Path, config: dict[str, Any]) -> None:
        self.daemon = daemon
        self.state = state
        self.config = config

    @property
    def audit(self) -> Path:
        return Path(self.config["audit"]["path"])

    def frontend(self, tenant: str) -> FrontendProcess:
        frontend = self.daemon.tenants[tenant].frontend
        assert frontend is not None and frontend.pid
        return frontend

    def records(self, event: str, **match: Any) -> list[dict[str, Any]]:
        return [
            r
            for r in audit_records(self.audit)
            if r["event"] == event and all(r.get(k) == v for k, v in match.items())
        ]

    async def hostile(
        self, monkeypatch: pytest.MonkeyPatch, attack: str, targets: dict[str, Any]
    ) -> dict[str, Any]:
        """Run `attack` as the attacker's front-end; what it reported."""
        read_end, write_end = os.pipe()
        real = FrontendProcess.command
        monkeypatch.setattr(
            FrontendProcess,
            "command",
            [sys.executable, "-I", str(HOSTILE), attack, json.dumps(targets)],
        )
        monkeypatch.setattr(FrontendProcess, "stdout", write_end)
        frontend = self.frontend("attacker")
        before = frontend.pid
        try:
            os.kill(before, signal.SIGKILL)
            line = await asyncio.wait_for(
                asyncio.get_running_loop().run_in_executor(None, _line, read_end), 30
            )
        finally:
            # Later restarts run the real front-end again.
            monkeypatch.setattr(FrontendProcess, "command", real)
            monkeypatch.setattr(FrontendProcess, "stdout", None)
            os.close(write_end)
            os.close(read_end)
        assert frontend.pid != before
        # What it reported first: an attack may print again before it is killed.
        result: dict[str, Any] = json.loads(line.split(b"\n", 1)[0])
        return result


async def _wait(check: Any, timeout: float) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not check():
        assert asyncio.get_running_loop().time() < deadline, "timed out"
        await asyncio.sleep(0.05)


def _line(fd: int) -> bytes:
    data = b""
    while not data.endswith(b"\n"):
        chunk = os.read(fd, 65536)
        if not chunk:
            break
        data += chunk
    return data


@pytest.fixture
async def split(state_dir: Path) -> AsyncIterator[Split]:
    config = daemon_config(
        state_dir,
        {name: tenant_config(state_dir, name) for name in ("victim", "attacker")},
    )
    prepare_roots(config)
    path = state_dir / "hostcapd.toml"
    path.write_text(toml.dumps(config))
    daemon = Daemon(load_config(path), path)
    await daemon.start()
    try:
        yield Split(daemon, state_dir, config)
    finally:
        await daemon.stop()


@pytest.mark.parametrize(
    "extra",
    [
        {"tenant": "victim"},
        {"uid": 0},
        {"gid": 0},
        {"run_as_user": "root"},
        {"roots": [{"path": "/", "tier": "read-write"}]},
        {"landlock": False},
        {"seccomp": "off"},
        {"namespaces": []},
        {"exe_path": "/bin/sh"},
        {"audit": False},
        {"limits": {"memory_bytes": GiB, "ceiling": {"memory_bytes": 1 << 50}}},
    ],
    ids=lambda extra: next(iter(extra)),
)
async def test_an_order_naming_what_the_root_side_decides_is_refused_and_audited(
    split: Split, monkeypatch: pytest.MonkeyPatch, extra: dict[str, Any]
) -> None:
    result = await split.hostile(monkeypatch, "forged_fields", {"extra": extra})
    assert next(iter(extra)) in result["sent"]
    # No answer: the channel is cut and the sender killed (and restarted).
    hostile = result["pid"]  # (the tenant's front-end may be its successor by now)
    await _wait(lambda: split.frontend("attacker").pid != hostile, 15)
    denials = split.records("policy.deny", tenant="attacker", method="frontend.channel")
    assert denials, "no policy.deny for the forged order"
    assert any(next(iter(extra)) in d["message"] for d in denials)
    # Nothing ran: no exec record of the attacker at all.
    assert not split.records("process.exec", tenant="attacker")
    assert not split.records("policy.deny", tenant="victim")


async def test_limits_above_the_ceiling_are_refused_by_the_root_side(
    split: Split, monkeypatch: pytest.MonkeyPatch
) -> None:
    request = {"argv": ["/usr/bin/true"], "limits": {"memory_bytes": 64 * GiB}}
    result = await split.hostile(monkeypatch, "spawn", {"request": request})
    (answer,) = result["answer"]
    assert answer["op"] == "abort" and "memory_bytes" in answer["message"]
    (denial,) = split.records("policy.deny", tenant="attacker")
    assert denial["reason"] == "LIMIT_INVALID"
    assert not split.records("process.exec", tenant="attacker")


async def test_a_cwd_outside_the_tenants_roots_is_refused_by_the_root_side(
    split: Split, monkeypatch: pytest.MonkeyPatch
) -> None:
    victim_root = str(split.daemon.tenants["victim"].tenant.roots[0].path)
    request = {"argv": ["/usr/bin/true"], "cwd": victim_root}
    result = await split.hostile(monkeypatch, "spawn", {"request": request})
    (answer,) = result["answer"]
    assert answer["op"] == "abort"
    (denial,) = split.records("policy.deny", tenant="attacker")
    assert denial["reason"] == "PATH_ESCAPES_ROOT"
    assert not split.records("process.exec", tenant="attacker")


async def test_a_spawn_it_orders_runs_as_the_tenant_with_the_root_sides_exec_record(
    split: Split, monkeypatch: pytest.MonkeyPatch
) -> None:
    request = {"argv": ["/usr/bin/id", "-u"], "env": {"LD_PRELOAD": "/tmp/x.so"}}
    result = await split.hostile(monkeypatch, "spawn", {"request": request})
    # LD_PRELOAD is not on any allowlist: refused, with a deny.
    (answer,) = result["answer"]
    assert answer["op"] == "abort"
    assert split.records("policy.deny", tenant="attacker")
    request = {"argv": ["/usr/bin/id", "-u"]}
    result = await split.hostile(monkeypatch, "spawn", {"request": request})
    (answer,) = result["answer"]
    assert answer["op"] == "reply"
    run = process_pb2.RunResult.FromString(bytes.fromhex(answer["payload"]))
    assert run.stdout == f"{NOBODY}\n".encode()  # the tenant's run-as uid, from the root's config
    (exec_record,) = split.records("process.exec", tenant="attacker")
    (exit_record,) = split.records("process.exit", tenant="attacker")
    assert exec_record["spawn_id"] == run.started.spawn_id == exit_record["spawn_id"]
    assert exec_record["seq"] < exit_record["seq"]
    assert exec_record["uid"] == NOBODY


async def test_the_kernel_refuses_it_the_audit_log_other_sockets_processes_and_privilege(
    split: Split, monkeypatch: pytest.MonkeyPatch
) -> None:
    daemon = split.daemon
    victim = daemon.tenants["victim"]
    spawner = daemon.spawner.pid
    fs_worker = victim.fs.worker.pid
    targets = {
        "audit": str(split.audit),
        "config": str(daemon.config_path),
        "sockets": {
            "victim": str(victim.tenant.socket),
            "admin": str(split.config["admin"]["socket"]),
            "own": str(daemon.tenants["attacker"].tenant.socket),
        },
        "pids": {
            "root": os.getpid(),
            "spawner": spawner,
            "victim_frontend": split.frontend("victim").pid,
            "victim_fs_worker": fs_worker,
        },
    }
    result = await split.hostile(monkeypatch, "kernel", targets)
    assert result["protections"] == {
        name: True
        for name in (
            "uid_drop",
            "no_new_privs",
            "not_dumpable",
            "no_capabilities",
            "landlock",
            "seccomp",
        )
    }
    assert result["read_audit"] == result["append_audit"] == "EACCES"
    assert result["read_config"] == "EACCES"
    for name in targets["sockets"]:
        assert result[f"connect_{name}"] == "EPERM", name
    assert result["tcp_socket"] == "EAFNOSUPPORT"
    for name in targets["pids"]:
        assert result[f"signal_{name}"] == "EPERM", name
        assert result[f"ptrace_{name}"] == "EPERM", name
        assert result[f"mem_{name}"] in {"EACCES", "EPERM"}, name
    assert result["setuid_root"] == "EPERM"
    assert result["exec"] == "EPERM"
    assert result["userns"] == "EPERM"
    # It holds its channel, its listening socket, its read link to its fs
    # worker (decision 0034), and nothing of the root side.
    held = {fd for fd, _ in result["fds"]}
    assert result["channel_fd"] in held and result["read_link_fd"] in held, result["fds"]
    assert len(held) <= 3, result["fds"]
    # And it is the front-end user, not root.
    assert frontend_identity()[0] != 0


async def test_it_cannot_reach_another_front_ends_inner_socket(
    split: Split, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Decision 0033: each front-end's gRPC server listens on an abstract
    socket in the front-end's own network namespace; the relay's connect()
    is the only one its filter allows, by address length."""
    daemon = split.daemon
    targets = {
        "victim_frontend": split.frontend("victim").pid,
        "victim_socket": str(daemon.tenants["victim"].tenant.socket),
    }
    result = await split.hostile(monkeypatch, "inner", targets)
    # Not in its namespace: the victim's is another.
    assert result["abstract"] == "ECONNREFUSED"
    assert result["open_netns"] in {"EACCES", "EPERM"}
    assert result["setns"] == "EPERM"
    # The allowed length cuts a path to two characters; any other is refused.
    assert result["padded_path"] == "ENOENT"
    assert result["long_path"] == "EPERM"
    # The control: an abstract socket of its own namespace and domain is reachable.
    assert result["own_abstract"] == "OK"
    attacker = split.frontend("attacker").pid
    assert os.readlink(f"/proc/{attacker}/ns/net") != os.readlink(
        f"/proc/{split.frontend('victim').pid}/ns/net"
    )


# --- what the channel reads before it knows what it is ------------------------------


def _rss(pid: int) -> int:
    return int(psutil.Process(pid).memory_info().rss)


async def _violation(split: Split, hostile: int, words: str) -> dict[str, Any]:
    """The channel was cut for a violation naming `words`, and the hostile
    front-end killed (and replaced)."""
    await _wait(lambda: split.frontend("attacker").pid != hostile, 15)
    with pytest.raises(psutil.NoSuchProcess):
        psutil.Process(hostile).status()
    denials = split.records("policy.deny", tenant="attacker", method="frontend.channel")
    named = [d for d in denials if words in d["message"]]
    assert named, denials
    assert not split.records("process.exec", tenant="attacker")
    assert split.frontend("attacker").bridge.in_flight.used == 0  # nothing held for it
    return named[0]


async def test_a_sparse_one_gib_memfd_is_refused_unread_and_its_frontend_killed(
    split: Split, monkeypatch: pytest.MonkeyPatch
) -> None:
    before = _rss(os.getpid())  # the root side runs in this process
    result = await split.hostile(monkeypatch, "sparse_memfd", {"size": GiB})
    assert result["sent"] == "sparse memfd"
    hostile = result["pid"]  # (the tenant's front-end may be its successor by now)
    denial = await _violation(split, hostile, "announces")
    assert str(GiB) in denial["message"]
    # Had the root read it, it would hold 1 GiB (of zeros).
    assert _rss(os.getpid()) - before < 64 * MiB


@pytest.mark.parametrize("kind", ["pipe", "socket", "unsealed"])
async def test_an_fd_that_is_not_a_sealed_memfd_is_a_violation(
    split: Split, monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    result = await split.hostile(monkeypatch, "not_a_memfd", {"kind": kind})
    assert result["sent"] == kind
    hostile = result["pid"]  # (the tenant's front-end may be its successor by now)
    await _violation(split, hostile, "sealed memfd")
    # The victim is served all along.
    assert split.frontend("victim").pid


_FLOOD = """
import asyncio, sys
import grpc
from hostcap_proto.v1 import process_pb2, process_pb2_grpc

async def main():
    async with grpc.aio.insecure_channel("unix:" + sys.argv[1]) as channel:
        stub = process_pb2_grpc.ProcessServiceStub(channel)
        request = process_pb2.SpawnRequest(argv=[], stdin=b"x" * (64 << 20))
        async def one():
            try:
                await stub.Run(request, timeout=60)
            except grpc.aio.AioRpcError as error:
                return error.code().name
            return "OK"
        print(",".join([await one() for _ in range(6)]), flush=True)

asyncio.run(main())
"""


async def test_six_refused_64_mib_runs_leave_the_root_and_the_frontend_as_they_were(
    split: Split,
) -> None:
    """The flood an ordinary client can make: six Run calls with 64 MiB of
    stdin and an empty argv, all refused. Nothing of them stays alive in
    the root or in the front-end (no payload in a reference cycle until
    the garbage collector happens to run). One after another: six at once
    pass the front-end's own memory limit (its tenant's cost, 512 MiB here),
    and the kernel ends it, which is that limit's job and not this test's."""
    socket_path = split.daemon.tenants["attacker"].tenant.socket
    frontend = split.frontend("attacker").pid

    async def flood() -> str:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-c", _FLOOD, str(socket_path), stdout=asyncio.subprocess.PIPE
        )
        out, _ = await asyncio.wait_for(proc.communicate(), 120)
        return out.decode().strip()

    root, front = _rss(os.getpid()), _rss(frontend)
    for _ in range(2):
        assert await flood() == ",".join(["INVALID_ARGUMENT"] * 6)
    assert _rss(os.getpid()) - root < 64 * MiB
    assert _rss(frontend) - front < 64 * MiB
    assert split.frontend("attacker").pid == frontend  # an ordinary client: no violation


async def test_a_call_past_the_tenants_in_flight_budget_is_refused_unread(
    split: Split, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The budget of request bytes the root side holds for a tenant's calls
    in flight (four of its largest requests; here made 12 MiB, so two 8 MiB
    ones pass it): the second call is refused QUOTA_EXCEEDED, audited, and
    its payload is never read; the first runs. Not a violation."""
    from hostcapd.bridge.channel import InFlight

    bridge = split.frontend("attacker").bridge
    monkeypatch.setattr(bridge, "in_flight", InFlight(12 * MiB))
    targets = {"argv": ["/usr/bin/sleep", "1"], "stdin": 8 * MiB}
    result = await split.hostile(monkeypatch, "over_budget", targets)
    (second,) = result["second"]
    assert second["op"] == "abort" and second["reason"] == "QUOTA_EXCEEDED"
    assert "budget of 12582912 bytes" in second["message"]
    (first,) = result["first"]
    assert first["op"] == "reply"
    (denial,) = split.records("policy.deny", tenant="attacker")
    assert denial["reason"] == "QUOTA_EXCEEDED" and denial["method"] == "ProcessService.Run"
    assert len(split.records("process.exec", tenant="attacker")) == 1
    await _wait(lambda: bridge.in_flight.used == 0, 10)


async def test_reads_it_asks_the_fs_worker_directly_are_checked_and_audited(
    split: Split, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Decision 0034: the worker trusts nothing from the front-end. A path
    outside the roots, another tenant's file and a max_bytes past the
    ceiling are refused, each refusal audited by the root naming the
    attacker; an unknown field is a violation: the front-end is killed."""
    victim_file = split.daemon.tenants["victim"].tenant.roots[0].path / "secret.txt"
    victim_file.write_text("the victim's\n")
    own = split.daemon.tenants["attacker"].tenant.roots[0].path / "own.txt"
    own.write_text("mine\n")
    os.chown(own, NOBODY, NOBODY)
    result = await split.hostile(monkeypatch, "direct_reads", {"victim_file": str(victim_file)})
    answers = result["answers"]
    assert answers["1"]["reason"] == "PATH_ESCAPES_ROOT", answers
    assert answers["2"]["reason"] == "PATH_ESCAPES_ROOT", answers
    assert answers["3"]["reason"] == "LIMIT_INVALID", answers
    assert answers["4"]["reason"] == "INVALID_ARGUMENT", answers
    assert bytes.fromhex(answers["5"]["data"]) == b"mine\n"  # the control
    denied = {
        (r["path"], r["reason"])
        for r in split.records("policy.deny", tenant="attacker", method="ReadFile")
    }
    assert {
        ("../../../../etc/shadow", "PATH_ESCAPES_ROOT"),
        (str(victim_file), "PATH_ESCAPES_ROOT"),
        ("own.txt", "LIMIT_INVALID"),
    } <= denied, denied
    assert not split.records("policy.deny", tenant="victim")
    hostile = result["pid"]  # (the tenant's front-end may be its successor by now)
    await _violation(split, hostile, "fs read link")
    # The real front-end started in its place reads over a new link.
    socket_path = split.daemon.tenants["attacker"].tenant.socket
    deadline = asyncio.get_running_loop().time() + 20
    while True:
        try:
            async with grpc.aio.insecure_channel(f"unix:{socket_path}") as channel:
                stub = fs_pb2_grpc.FsServiceStub(channel)  # type: ignore[no-untyped-call]
                reply = await stub.ReadFile(fs_pb2.ReadFileRequest(path="own.txt"), timeout=2)
            break
        except grpc.aio.AioRpcError:
            assert asyncio.get_running_loop().time() < deadline, "the attacker's socket is down"
            await asyncio.sleep(0.1)
    assert reply.data == b"mine\n"
