"""The worker process itself: its identity and confinement (each checked by
attempting what it forbids), its refusal to start weaker than required, and
its life cycle (death, hangs, shutdown, a full disk mid-write)."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from dataclasses import asdict, replace
from pathlib import Path

import pytest
from fs_worker_support import OUTSIDE_CONTENT, Roots, WorkerClient, settings_for, start_worker
from hostcapd.fs.client import FsWorkerUnavailable
from hostcapd.sandbox import landlock
from support.identity import as_user

needs_root = pytest.mark.skipif(os.getuid() != 0, reason="needs root (uid change, mounts, prlimit)")
needs_landlock = pytest.mark.skipif(
    landlock.probe().abi == 0, reason="landlock unavailable on this kernel"
)


def status_of(pid: int) -> dict[str, str]:
    lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    return {key: value.strip() for key, _, value in (line.partition(":") for line in lines)}


def gone(pid: int, deadline_s: float = 10.0) -> bool:
    """Whether `pid` has exited (and been reaped, or become a zombie) within the deadline."""
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        try:
            state = status_of(pid)["State"]
        except FileNotFoundError:
            return True
        if state.startswith("Z"):
            return True
        time.sleep(0.05)
    return False


# --- identity and confinement -------------------------------------------


@needs_root
async def test_worker_runs_as_the_tenant_with_no_groups_capabilities_or_new_privileges(
    fs: WorkerClient, roots: Roots
) -> None:
    assert fs.worker.pid is not None
    status = status_of(fs.worker.pid)
    assert status["Uid"].split() == [str(roots.uid)] * 4
    assert status["Gid"].split() == [str(roots.gid)] * 4
    assert status["Groups"] == ""
    assert int(status["CapEff"], 16) == 0 and int(status["CapPrm"], 16) == 0
    assert status["NoNewPrivs"] == "1"
    applied = {p.name: p.applied for p in fs.worker.protections}
    assert applied["uid_drop"] and applied["no_new_privs"]


@needs_root
async def test_another_process_of_the_tenant_cannot_read_the_workers_memory(
    fs: WorkerClient, roots: Roots
) -> None:
    # The tenant's spawns run as the worker's uid; without PR_SET_DUMPABLE 0
    # they could read its memory or ptrace it out of landlock's reach.
    for entry in ("mem", "environ"):
        result = subprocess.run(
            as_user(roots.uid, roots.gid, ["cat", f"/proc/{fs.worker.pid}/{entry}"]),
            capture_output=True,
            text=True,
        )
        assert result.returncode != 0 and "Permission denied" in result.stderr, entry


@needs_root
@needs_landlock
def test_landlock_confines_the_worker_to_its_roots(roots: Roots) -> None:
    """The worker's own confinement sequence, then direct opens that only
    landlock can stop: the uid may read them (or write them) by its DAC."""
    roots.as_tenant(roots.ref)  # writable by the uid: only the read-only tier stops it
    settings = replace(settings_for(roots), landlock="required")
    hello = {key: value for key, value in settings.to_hello().items()}
    script = textwrap.dedent(
        f"""
        import json, os, sys
        from hostcapd.fs.worker import WorkerSettings, confine, prepare_handover
        settings = WorkerSettings.from_hello(json.loads(sys.argv[1]))
        settings = settings.__class__(**{{**settings.__dict__, "parent_pid": os.getppid()}})
        applied, _ = confine(settings, prepare_handover(settings))
        results = {{}}
        def attempt(name, path, flags):
            try:
                os.close(os.open(path, flags, 0o644))
                results[name] = "allowed"
            except PermissionError:
                results[name] = "denied"
        attempt("etc", "/etc/hostname", os.O_RDONLY)
        attempt("outside", {str(roots.outside / "secret.txt")!r}, os.O_RDONLY)
        attempt("ref_write", {str(roots.ref / "planted.txt")!r}, os.O_WRONLY | os.O_CREAT)
        attempt("ref_read", {str(roots.ref / "doc.md")!r}, os.O_RDONLY)
        attempt("ws_write", {str(roots.ws / "ok.txt")!r}, os.O_WRONLY | os.O_CREAT)
        print(json.dumps(results))
        """
    )
    result = subprocess.run(
        [sys.executable, "-I", "-c", script, json.dumps(hello)],
        capture_output=True,
        text=True,
        check=True,
    )
    assert json.loads(result.stdout) == {
        "etc": "denied",
        "outside": "denied",
        "ref_write": "denied",
        "ref_read": "allowed",
        "ws_write": "allowed",
    }
    assert (roots.outside / "secret.txt").read_bytes() == OUTSIDE_CONTENT
    assert not (roots.ref / "planted.txt").exists()


async def test_a_required_landlock_the_host_cannot_apply_refuses_to_serve(roots: Roots) -> None:
    settings = settings_for(roots, landlock="required", simulate_unavailable=("landlock",))
    with pytest.raises(FsWorkerUnavailable, match="landlock is required"):
        await start_worker(settings)


async def test_a_best_effort_landlock_that_is_missing_is_reported_not_claimed(roots: Roots) -> None:
    worker = await start_worker(settings_for(roots, simulate_unavailable=("landlock",)))
    try:
        by_name = {p.name: p for p in worker.protections}
        assert by_name["landlock"].applied is False and "simulated" in by_name["landlock"].reason
        _, data = await WorkerClient(worker).read(str(roots.ref / "doc.md"))
        assert data == b"# reference\n"
    finally:
        await worker.close()


@needs_root
async def test_the_worker_never_runs_as_root(roots: Roots) -> None:
    with pytest.raises(FsWorkerUnavailable, match="never runs as root"):
        await start_worker(settings_for(roots, uid=0, gid=0))
    with pytest.raises(FsWorkerUnavailable, match="never runs as root"):
        await start_worker(settings_for(roots, simulate_unavailable=("uid_drop",)))


@needs_root
async def test_a_root_the_tenant_cannot_open_refuses_start_up_naming_it(roots: Roots) -> None:
    os.chown(roots.ws, 0, 0)
    roots.ws.chmod(0o700)
    with pytest.raises(FsWorkerUnavailable, match=str(roots.ws)):
        await start_worker(settings_for(roots))


@needs_root
async def test_roots_beneath_a_directory_the_tenant_cannot_traverse_are_served(
    roots: Roots,
) -> None:
    # the front-end opens the roots: only what is beneath them is the tenant's to reach
    roots.base.chmod(0o700)
    worker = await start_worker(settings_for(roots))
    try:
        (roots.ws / "a.txt").write_text("reachable\n")
        _, data = await WorkerClient(worker).read("a.txt")
        assert data == b"reachable\n"
        outside = await WorkerClient(worker).refusal(
            WorkerClient(worker).read(str(roots.outside / "secret.txt"))
        )
        assert outside.reason == "PATH_ESCAPES_ROOT"
    finally:
        await worker.close()


def test_the_hello_frame_round_trips(roots: Roots) -> None:
    from hostcapd.fs.worker import WorkerSettings

    settings = settings_for(roots, simulate_unavailable=("landlock",))
    assert WorkerSettings.from_hello(json.loads(json.dumps(settings.to_hello()))) == settings
    assert asdict(settings)["roots"][0]["read_only"] is False


# --- life cycle ------------------------------------------------------------


async def test_a_worker_killed_mid_request_fails_that_request_and_is_replaced(roots: Roots) -> None:
    worker = await start_worker(settings_for(roots))
    client = WorkerClient(worker)
    try:
        first = worker.pid
        assert first is not None
        os.kill(first, signal.SIGSTOP)
        in_flight = asyncio.create_task(client.stat("."))
        await asyncio.sleep(0.2)  # ordering only: let the request reach the socket
        os.kill(first, signal.SIGKILL)
        with pytest.raises(FsWorkerUnavailable):
            await asyncio.wait_for(in_flight, 30)
        assert gone(first)
        assert (await client.stat("."))["type"] == "directory"
        assert worker.pid not in (None, first) and worker.starts == 2
    finally:
        await worker.close()


async def test_a_hung_worker_is_killed_after_the_timeout_and_replaced(roots: Roots) -> None:
    worker = await start_worker(settings_for(roots), op_timeout_s=1.0)
    client = WorkerClient(worker)
    try:
        hung = worker.pid
        assert hung is not None
        os.kill(hung, signal.SIGSTOP)
        with pytest.raises(FsWorkerUnavailable, match="did not answer"):
            await asyncio.wait_for(client.stat("."), 30)
        assert gone(hung)
        assert (await client.stat("."))["type"] == "directory"
    finally:
        await worker.close()


async def test_close_leaves_no_process(roots: Roots) -> None:
    worker = await start_worker(settings_for(roots))
    pid = worker.pid
    assert pid is not None
    await worker.close()
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    with pytest.raises(FsWorkerUnavailable):
        await WorkerClient(worker).stat(".")


def test_the_worker_dies_with_its_front_end(roots: Roots) -> None:
    settings = settings_for(roots)
    front_end = textwrap.dedent(
        """
        import asyncio, json, os, sys
        from hostcapd.fs.client import FsWorker
        from hostcapd.fs.worker import WorkerSettings
        async def main():
            settings = WorkerSettings.from_hello(json.loads(sys.argv[1]))
            settings = settings.__class__(**{**settings.__dict__, "parent_pid": os.getpid()})
            worker = FsWorker(settings, op_timeout_s=30)
            await worker.start()
            print(worker.pid, flush=True)
            await asyncio.sleep(3600)
        asyncio.run(main())
        """
    )
    proc = subprocess.Popen(
        [sys.executable, "-I", "-c", front_end, json.dumps(settings.to_hello())],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        worker_pid = int(proc.stdout.readline())
        proc.kill()
        proc.wait()
        assert gone(worker_pid), "the fs worker outlived its front-end"
    finally:
        proc.kill()
        proc.wait()


# --- a write that fails midway ---------------------------------------------


def leftovers(directory: Path) -> list[str]:
    return sorted(name for name in os.listdir(directory) if name != "lost+found")


@needs_root
async def test_a_write_cut_by_the_file_size_limit_leaves_the_original(
    fs: WorkerClient, roots: Roots
) -> None:
    original = os.urandom(4096)
    (roots.ws / "data.bin").write_bytes(original)
    roots.as_tenant(roots.ws / "data.bin")
    assert fs.worker.pid is not None
    # as the tenant's uid: this host's root may lack CAP_SYS_RESOURCE
    subprocess.run(
        as_user(roots.uid, roots.gid, ["prlimit", f"--pid={fs.worker.pid}", f"--fsize={64 << 10}"]),
        check=True,
    )
    refused = await fs.refusal(fs.write("data.bin", os.urandom(1 << 20)))
    assert refused.reason == "TOO_LARGE"
    assert (
        hashlib.sha256((roots.ws / "data.bin").read_bytes()).digest()
        == hashlib.sha256(original).digest()
    )
    assert leftovers(roots.ws) == ["data.bin"]
    # the worker is fine afterwards
    await fs.write("small.txt", b"fits\n")
    assert (roots.ws / "small.txt").read_bytes() == b"fits\n"


@needs_root
async def test_a_write_that_fills_the_disk_leaves_the_original_and_frees_its_space(
    fs: WorkerClient, roots: Roots
) -> None:
    small = roots.ws / "small"
    small.mkdir()
    subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=512k,mode=0755", "tmpfs", str(small)], check=True
    )
    try:
        roots.as_tenant(small)
        original = os.urandom(64 << 10)
        (small / "data.bin").write_bytes(original)
        roots.as_tenant(small / "data.bin")
        free_before = os.statvfs(small).f_bfree
        refused = await fs.refusal(fs.write("small/data.bin", os.urandom(1 << 20)))
        assert refused.reason == "QUOTA_EXCEEDED" and "ENOSPC" in refused.message
        assert (small / "data.bin").read_bytes() == original
        assert leftovers(small) == ["data.bin"]
        assert os.statvfs(small).f_bfree == free_before
    finally:
        subprocess.run(["umount", "--lazy", str(small)], check=True)
