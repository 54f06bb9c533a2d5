"""python -m bench.breakdown [--rounds N]

Where the wall time of one spawn goes, step by step, measured on the daemon's
own code called directly from here (nothing in the daemon is changed), each
step interleaved with the others round by round:

- the write-ahead `process.exec` audit record (AuditLog.write_durable: JSON,
  hash chain, write, fdatasync on its thread) and the `process.exit` record;
- the per-spawn cgroup: create with limits, open cgroup.procs, join (a parked
  process is moved in, as the child does with "0"), stats, the kill sweep of
  an empty cgroup (what every exit pays), remove; back to back and with 50 ms
  idle before each join (cgroup v1's synchronize_rcu);
- the landlock ruleset built per spawn, executable resolution (hash cached),
  limits merged into the pydantic model;
- the spawner and the C set-up: an order sent over the spawner channel until
  `started` (the child exec'd) and until `exited` (reaped), for the default
  profile without cgroup and for the minimal profile, next to the C
  posix_spawn floor;
- a gRPC unary round trip to a bare grpc.aio server and to the daemon.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import tomllib
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path

import prctl
from hostcapd.audit import AuditLog
from hostcapd.config import AuditSettings, Tenant, parse_config
from hostcapd.process import environment, executable
from hostcapd.process import limits as limits_mod
from hostcapd.process.executable import HashCache
from hostcapd.sandbox import identity, rlimits
from hostcapd.sandbox.cgroups import CgroupHost
from hostcapd.sandbox.profile import TenantProfile, prepare, probe_host
from hostcapd.spawner.client import SpawnerClient
from hostcapd.spawner.messages import SpawnOrder

from bench.audit_bench import exit_fields
from bench.baselines import Baselines
from bench.client import TenantClient
from bench.daemon import BenchDaemon, state_parent, to_toml
from bench.native import BenchError

SPACING = 0.05

Step = Callable[[], Awaitable[dict[str, float]]]


def _timed(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


class SpawnerSteps:
    """Orders for the real spawner, as Spawn.run builds them (cgroup-less)."""

    def __init__(self, spawner: SpawnerClient, tenant: Tenant, profile: TenantProfile) -> None:
        self.spawner = spawner
        self.tenant = tenant
        self.profile = profile
        self.cache = HashCache()
        spawner.register_profile(profile.spawner_message(tenant.name))

    async def spawn(self) -> tuple[float, float]:
        """Seconds until the child exec'd and until it was reaped."""
        p, t = self.profile, self.tenant
        exe = executable.resolve("/bin/true", t.path, (), self.cache)
        applied = limits_mod.apply({}, t.limits)
        out_r, out_w = os.pipe2(os.O_CLOEXEC)
        err_r, err_w = os.pipe2(os.O_CLOEXEC)
        in_r = os.open("/dev/null", os.O_RDONLY | os.O_CLOEXEC)
        cancel = os.eventfd(0, os.EFD_CLOEXEC | os.EFD_NONBLOCK)
        ruleset = p.new_ruleset()
        ident = identity.plan(t.uid, t.gid, set(p.applied))
        order = SpawnOrder(
            id=uuid.uuid4().hex,
            profile=t.name,
            by_fd=p.has("exec_by_fd"),
            exe_path=exe.path.encode(),
            argv=[b"/bin/true"],
            envp=environment.encode(dict(t.env)),
            # As Spawn.run sends it (the spawner's order format of this commit).
            cwd_root=str(t.primary_root.path).encode(),
            cwd=b".",
            rlimits=rlimits.plan(applied, False, False) if p.has("rlimits") else [],
            ids=ident.ids,
            loginuid=ident.loginuid,
            landlock=ruleset >= 0,
        )
        fds = [exe.fd, in_r, out_w, err_w, cancel, *([ruleset] if ruleset >= 0 else [])]
        start = time.perf_counter()
        try:
            started, exited = self.spawner.spawn(order, fds)
            for fd in fds[1:]:
                os.close(fd)
            exe.close()
            await started
            to_exec = time.perf_counter() - start
            await exited
            to_reaped = time.perf_counter() - start
        finally:
            os.close(out_r)
            os.close(err_r)
        return to_exec, to_reaped


def _read_at(fd: int) -> float:
    """When an eventfd became readable, as the thread that waited saw it."""
    os.eventfd_read(fd)
    return time.perf_counter()


class CgroupSteps:
    def __init__(self, host: CgroupHost, parked: int) -> None:
        self.host = host
        self.parked = parked
        self.parent_procs = [h.subtree / "cgroup.procs" for h in host.hierarchies]

    def run(self) -> dict[str, float]:
        out: dict[str, float] = {}
        name = uuid.uuid4().hex
        start = time.perf_counter()
        cg = self.host.create(name, 4 << 30, 1024)
        out["cgroup create + limits"] = time.perf_counter() - start
        start = time.perf_counter()
        fds = cg.procs_fds()
        out["cgroup open cgroup.procs"] = time.perf_counter() - start
        start = time.perf_counter()
        for fd in fds:
            os.write(fd, str(self.parked).encode())
        out["cgroup join (all hierarchies)"] = time.perf_counter() - start
        for fd in fds:
            os.close(fd)
        for path in self.parent_procs:  # out again, as if the member had exited
            path.write_text(str(self.parked))
        out["cgroup stats"] = _timed(cg.stats)
        out["cgroup kill sweep (empty)"] = _timed(cg.kill)
        out["cgroup remove"] = _timed(cg.remove)
        # A fresh spawn's cgroup taken from the pool (process/cgroup_pool.py):
        # made ahead, unlimited; only its limits are on the spawn's path.
        pooled = self.host.create(uuid.uuid4().hex, None, None, ahead=True)
        pooled.open_stats()
        out["cgroup limits on one made ahead (pool)"] = _timed(
            lambda: self.host.set_limits(pooled, 4 << 30, 1024)
        )
        out["cgroup stats, its files opened ahead (pool)"] = _timed(pooled.stats)
        pooled.remove()
        return out


async def run(rounds: int) -> int:
    state = Path(tempfile.mkdtemp(prefix="state-", dir=state_parent()))
    daemon = BenchDaemon(state / "bd", ("full", "nocg", "minimal"))
    config = parse_config(tomllib.loads(to_toml(daemon.config)))
    daemon.write_config()
    host = probe_host(config.daemon.cgroup_parent)
    profiles = {t.name: prepare(t, host) for t in config.tenants}
    audit = AuditLog.open(
        AuditSettings(path=state / "bd" / "log" / "breakdown.jsonl", group="root", journal="off"),
        "",
    )
    spawner = SpawnerClient()
    parked = subprocess.Popen(["sleep", "3600"])
    samples: dict[str, list[float]] = {}
    base: Baselines | None = None
    client: TenantClient | None = None
    try:
        await spawner.start()
        steps = {
            t.name: SpawnerSteps(spawner, t, profiles[t.name])
            for t in config.tenants
            if t.name != "full"
        }
        cgroups = CgroupSteps(host.cgroups, parked.pid)
        daemon.start()
        client = TenantClient(daemon.socket("minimal"))
        bin_dir = state / "bin"
        bin_dir.mkdir()
        base = await Baselines.start(state, bin_dir, 0.0)
        tenant = config.tenants[0]
        record = {
            "tenant": "full",
            "spawn_id": "x" * 32,
            "request_id": "",
            "labels": {},
            "argv": ["/bin/true"],
            "env_names": ["HOME", "LANG", "PATH"],
            "executable": {"path": "/usr/bin/true", "sha256": "0" * 64, "device": 1, "inode": 2},
            "cwd": str(tenant.primary_root.path),
            "uid": 65534,
            "gid": 65534,
            "limits": {"wall_seconds": 120},
            "protections": [
                {"name": s.name, "applied": s.applied, "reason": s.reason}
                for s in profiles["full"].protections
            ],
        }
        exit_record = exit_fields(0, "x" * 32)  # what the daemon passes (audit_bench)
        cache = HashCache()

        def add(name: str, seconds: float) -> None:
            samples.setdefault(name, []).append(seconds)

        async def audit_step() -> None:
            start = time.perf_counter()
            await audit.write_durable("process.exec", **record)
            add("audit process.exec (durable: fdatasync)", time.perf_counter() - start)
            # What a spawn's child waits for: its go, written by the fsync
            # thread once the record is durable (seen by a thread as by the child).
            go = os.eventfd(0, os.EFD_CLOEXEC)
            seen = asyncio.get_running_loop().run_in_executor(None, _read_at, go)
            await asyncio.sleep(0.001)  # the reader waits
            start = time.perf_counter()
            _, durable = audit.write_pending("process.exec", release_fd=go, **record)
            add("audit process.exec: appended to its go", await seen - start)
            await durable
            os.close(go)
            add(
                "audit process.exit (batched fsync)",
                _timed(lambda: audit.write("process.exit", **exit_record)),
            )

        async def small_steps() -> None:
            ruleset = -1

            def build() -> None:
                nonlocal ruleset
                ruleset = profiles["full"].new_ruleset()

            add("landlock ruleset per spawn", _timed(build))
            os.close(ruleset)
            add(
                "executable resolve (hash cached)",
                _timed(lambda: executable.resolve("/bin/true", tenant.path, (), cache).close()),
            )
            add("limits merged (pydantic)", _timed(lambda: limits_mod.apply({}, tenant.limits)))

        async def spawner_step() -> None:
            for name, step in steps.items():
                to_exec, to_reaped = await step.spawn()
                add(f"spawner + C set-up, {name}: until exec", to_exec)
                add(f"spawner + C set-up, {name}: until reaped", to_reaped)
            add("C posix_spawn floor (until reaped)", base.floor_true() if base else 0.0)
            add("bwrap (until its tree is reaped)", base.bwrap() if base else 0.0)

        async def cgroup_step() -> None:
            for key, value in cgroups.run().items():
                add(key, value)

        async def cgroup_spaced() -> None:
            await asyncio.sleep(SPACING)
            for key, value in cgroups.run().items():
                add(f"{key}, spaced 50 ms", value)

        async def rpc_step() -> None:
            assert base is not None and client is not None
            add("gRPC unary round trip, bare grpc.aio", await base.grpc_rtt())
            add("gRPC unary round trip, daemon Health.Check", await client.health_rtt())
            add("asyncio Unix-socket echo round trip", await base.echo_rtt())

        order = [audit_step, small_steps, spawner_step, cgroup_step, rpc_step]
        for fn in order:  # warm-up
            await fn()
        samples.clear()
        for index in range(rounds):
            k = index % len(order)
            for fn in order[k:] + order[:k]:
                await fn()
        for _ in range(max(10, rounds // 4)):
            await cgroup_spaced()
    finally:
        if client is not None:
            await client.close()
        if base is not None:
            await base.close()
        daemon.stop()
        await spawner.close()
        await audit.close()
        parked.kill()
        parked.wait()
        for p in profiles.values():
            p.close()
        host.cgroups.release()
        shutil.rmtree(state, ignore_errors=True)
    width = max(len(k) for k in samples)
    print(f"{'step':<{width}}  {'p50':>9}  {'p95':>9}  n")
    for name, values in samples.items():
        values.sort()
        p95 = values[min(len(values) - 1, int(len(values) * 0.95))]
        print(
            f"{name:<{width}}  {statistics.median(values) * 1e3:7.3f}ms  {p95 * 1e3:7.3f}ms  {len(values)}"
        )
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.breakdown")
    parser.add_argument("--rounds", type=int, default=100)
    args = parser.parse_args(argv)
    if os.geteuid() != 0:
        print("bench.breakdown: needs root (cgroups, namespaces)", file=sys.stderr)
        return 2
    prctl.set_child_subreaper(True)
    try:
        return asyncio.run(run(args.rounds))
    except BenchError as error:
        print(f"bench.breakdown: {error}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        sys.exit(main())
