"""Sandboxed programs try to outlive their spawn or starve the host: a
setsid double fork, SIGTERM ignored, leaving the cgroup, a fork bomb under a
pids limit, a memory hog under a memory limit. Each must end, leave nothing
behind, and leave the daemon serving."""

from __future__ import annotations

import pytest
from escape_attempts import SecurityHost, attack, program
from support.daemon import processes_with, wait_gone
from support.process import Client, outcome

MiB = 1 << 20

DOUBLE_FORK = """
import signal, time
r, w = os.pipe()
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
        os.write(w, str(os.getpid()).encode())
        while True:
            time.sleep(1)
    os._exit(0)
os.wait()
grandchild = int(os.read(r, 32))
time.sleep(0.1)
report(grandchild_alive=attempt(os.kill, grandchild, 0), session=os.getsid(grandchild) != os.getsid(0))
"""


@pytest.mark.parametrize("tenant", ["alpha", "layers"])
async def test_setsid_double_fork_does_not_survive_the_spawn(
    tenant: str, alpha: Client, layers: Client, marker: str
) -> None:
    client = {"alpha": alpha, "layers": layers}[tenant]
    found = await attack(client, DOUBLE_FORK, env={"TEST_MARKER": marker})
    # Control: when the main process exited, the grandchild was alive in its
    # own session, ignoring SIGTERM and SIGHUP, reparented away from it.
    assert found == {"grandchild_alive": "ok", "session": True}
    # alpha: the pid namespace dies with its init; layers (no pid namespace):
    # the spawn's cgroup is killed whole.
    assert wait_gone(marker, 2.0) == []


async def test_a_process_ignoring_sigterm_is_killed_at_the_deadline(
    alpha: Client, marker: str
) -> None:
    result = await alpha.run(
        *program("""
import signal, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
if os.fork() == 0:
    os.setsid()
while True:
    time.sleep(0.05)
"""),
        env={"TEST_MARKER": marker},
        limits={"wall_seconds": 1},
    )
    assert outcome(result) == "TIMEOUT"
    assert wait_gone(marker, 2.0) == []


async def test_leaving_the_spawn_cgroup_is_refused(alpha: Client, layers: Client) -> None:
    escape = """
import glob
targets = ["/sys/fs/cgroup/cgroup.procs", *glob.glob("/sys/fs/cgroup/*/cgroup.procs"),
           "/sys/fs/cgroup/pids/tasks"]
def move(path):
    with open(path, "w") as f:
        f.write(str(os.getpid()))
report(**{t: attempt(move, t) for t in targets})
"""
    for client in (alpha, layers):
        found = await attack(client, escape)
        # /sys is not in the sandbox's root (ENOENT); were it, a read-only mount
        # (EROFS) and landlock (EACCES) would refuse the write.
        assert found and set(found.values()) <= {"ENOENT", "EROFS", "EACCES"}, found


async def test_fork_bomb_ends_within_the_pids_limit_and_leaves_nothing(
    alpha: Client, marker: str
) -> None:
    pids = 32
    # Every process forks as fast as it can; each success writes one byte.
    # The main process exits non-zero once the kernel refuses it a fork.
    bomb = """
import time
out, main = sys.stdout.fileno(), os.getpid()
while True:
    try:
        pid = os.fork()
    except OSError:
        if os.getpid() == main:
            os._exit(3)
        while True:
            time.sleep(1)
    if pid == 0:
        os.write(out, b"x")
"""
    result = await alpha.run(
        *program(bomb),
        env={"TEST_MARKER": marker},
        limits={"pids": pids, "wall_seconds": 30},
    )
    assert outcome(result) == "PIDS_LIMIT", result.exited.message
    assert f"pids limit of {pids}" in result.exited.message
    # The kernel never let the tree grow past the limit (the main process is one).
    forks = result.stdout.count(b"x")
    assert 0 < forks < pids
    assert wait_gone(marker, 2.0) == []
    assert outcome(await alpha.run("true")) == "EXITED"


async def test_memory_hog_ends_memory_limit_and_the_daemon_is_unharmed(
    alpha: Client, host: SecurityHost, marker: str
) -> None:
    limit = 64 * MiB
    hog = """
chunks = []
while True:
    chunk = bytearray(MiB)
    for i in range(0, MiB, 4096):
        chunk[i] = 1  # touch every page: resident, not just reserved
    chunks.append(chunk)
""".replace("MiB", str(MiB))
    result = await alpha.run(
        *program(hog),
        env={"TEST_MARKER": marker},
        limits={"memory_bytes": limit, "wall_seconds": 60},
    )
    assert outcome(result) == "MEMORY_LIMIT", result.exited.message
    assert result.exited.HasField("peak_memory_bytes")
    assert limit // 2 < result.exited.peak_memory_bytes <= limit + 4 * MiB
    assert result.exited.oom_kills >= 1
    assert wait_gone(marker, 2.0) == []
    # The daemon is unharmed: alive, and the next spawn runs normally.
    assert host.daemon.proc is not None and host.daemon.proc.poll() is None
    after = await alpha.run("sh", "-c", "echo still-serving")
    assert (outcome(after), after.stdout) == ("EXITED", b"still-serving\n")
    assert processes_with(marker) == []


async def test_memory_limit_does_not_break_a_large_address_space_reservation(alpha: Client) -> None:
    """With cgroups the memory limit is on resident memory, not on the address
    space, so a runtime that reserves a large virtual range (Go, the JVM) runs."""
    found = await attack(
        alpha,
        """
import mmap
MAP_NORESERVE = 0x4000
reserved = mmap.mmap(-1, 8 << 30, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | MAP_NORESERVE)
reserved[0] = 1
report(reserved_gib=len(reserved) >> 30)
""",
        limits={"memory_bytes": 64 * MiB},
    )
    assert found == {"reserved_gib": 8}


async def test_rlimits_bound_file_size_and_open_files_and_cannot_be_raised(alpha: Client) -> None:
    found = await attack(
        alpha,
        f"""
import resource
def write_big():
    with open("big.bin", "wb") as f:
        f.write(b"x" * (2 * {MiB}))
def open_many():
    fds = []
    try:
        for _ in range(200):
            fds.append(os.open("/dev/null", os.O_RDONLY))
    finally:
        for fd in fds:
            os.close(fd)
def raise_hard():
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (100000, 100000))
    except ValueError:
        raise OSError(errno.EPERM, "raise")
report(write_big=attempt(write_big), open_many=attempt(open_many), raise_hard=attempt(raise_hard),
       core=resource.getrlimit(resource.RLIMIT_CORE), size=os.path.getsize("big.bin"))
os.unlink("big.bin")
""",
        limits={"file_size_bytes": MiB, "open_files": 64},
    )
    assert found == {
        "write_big": "EFBIG",
        "open_many": "EMFILE",
        "raise_hard": "EPERM",
        "core": [0, 0],
        "size": MiB,
    }
