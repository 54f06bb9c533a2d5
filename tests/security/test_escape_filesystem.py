"""Sandboxed programs try to read and write what is not theirs.

The daemon's state and every tenant's roots lie outside /tmp (see
escape_attempts.py), visible to the sandbox's mount namespace, and the
planted targets are open by DAC (world-readable, world-writable, or owned by
the run-as uid): what refuses is the sandbox, landlock above all.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Callable
from pathlib import Path

from escape_attempts import SecurityHost, attack
from support.daemon import Daemon
from support.process import Client, outcome, request

#: Refused: the path is not in the sandbox's root at all (ENOENT), or a
#: read-only mount (EROFS) or landlock (EACCES) refuses it.
REFUSED = {"ENOENT", "EROFS", "EACCES"}


async def test_etc_shadow_cannot_be_read(alpha: Client) -> None:
    found = await attack(
        alpha,
        """
report(shadow=attempt(lambda: open("/etc/shadow", "rb").read()),
       via_proc_root=attempt(lambda: open("/proc/self/root/etc/shadow", "rb").read()),
       gshadow=attempt(lambda: open("/etc/gshadow", "rb").read()),
       passwd=attempt(lambda: open("/etc/passwd", "rb").read()))
""",
    )
    # /etc is a read-execute system dir: passwd reads, so the refusal of
    # shadow is the uid drop with no CAP_DAC_OVERRIDE left, not a missing /etc.
    assert found == {
        "shadow": "EACCES",
        "via_proc_root": "EACCES",
        "gshadow": "EACCES",
        "passwd": "ok",
    }


async def test_daemon_config_and_state_dir_cannot_be_read(
    alpha: Client, host: SecurityHost
) -> None:
    config = host.daemon.config_path
    # DAC alone would let the run-as user read the config and enter the state dir.
    assert config.stat().st_mode & 0o004 and host.state.stat().st_mode & 0o001
    found = await attack(
        alpha,
        f"""
report(config=attempt(lambda: open({str(config)!r}, "rb").read()),
       state_dir=attempt(os.listdir, {str(host.state)!r}),
       audit_dir=attempt(os.listdir, {str(host.daemon.audit_path.parent)!r}),
       audit_log=attempt(lambda: open({str(host.daemon.audit_path)!r}, "rb").read()),
       runtime_dir=attempt(os.listdir, {str(host.socket("alpha").parent)!r}),
       daemon_log=attempt(lambda: open({str(host.state / "daemon.log")!r}, "rb").read()))
""",
    )
    assert set(found.values()) <= REFUSED, found
    assert len(found) == 6


async def test_another_tenants_root_cannot_be_read_or_written(
    alpha: Client, beta: Client, host: SecurityHost
) -> None:
    secret = host.workspace("beta") / "secret.txt"
    attempt_beta = f"""
secret = {str(secret)!r}
def write(path):
    with open(path, "w") as f:
        f.write("planted by alpha")
report(read=attempt(lambda: open(secret, "rb").read()),
       list=attempt(os.listdir, os.path.dirname(secret)),
       overwrite=attempt(write, secret),
       create=attempt(write, os.path.join(os.path.dirname(secret), "planted")),
       read_reference=attempt(lambda: open({str(host.reference("beta") / "doc.txt")!r}, "rb").read()))
"""
    # Control: beta itself reads its secret with the very same program's read.
    own = await attack(beta, f"report(read=attempt(lambda: open({str(secret)!r}, 'rb').read()))")
    assert own == {"read": "ok"}
    found = await attack(alpha, attempt_beta)
    assert set(found.values()) <= REFUSED, found
    assert secret.read_text() == "beta-private-canary\n"
    assert sorted(os.listdir(secret.parent)) == ["secret.txt"]


async def test_nothing_outside_the_roots_can_be_written(alpha: Client, host: SecurityHost) -> None:
    outside, workspace = host.outside, host.workspace("alpha")
    victim = outside / "victim"
    os.chown(victim, 65534, 65534)  # owned by the run-as uid: protected_hardlinks cannot help
    (workspace / "mine.txt").write_text("mine\n")
    os.chown(workspace / "mine.txt", 65534, 65534)
    found = await attack(
        alpha,
        f"""
outside, victim, ws = {str(outside)!r}, {str(victim)!r}, {str(workspace)!r}
def write(path, mode="w"):
    with open(path, mode) as f:
        f.write("pwned")
report(overwrite=attempt(write, victim),
       append=attempt(write, victim, "a"),
       truncate=attempt(os.truncate, victim, 0),
       create=attempt(write, outside + "/new"),
       mkdir=attempt(os.mkdir, outside + "/dir"),
       mkfifo=attempt(os.mkfifo, outside + "/fifo"),
       symlink=attempt(os.symlink, "/etc/passwd", outside + "/link"),
       unlink=attempt(os.unlink, victim),
       move_in=attempt(os.rename, ws + "/mine.txt", outside + "/moved"),
       link_out=attempt(os.link, victim, ws + "/victim-link"),
       var_tmp=attempt(write, "/var/tmp/hostcap-planted"),
       dev_shm=attempt(write, "/dev/shm/hostcap-planted"),
       etc=attempt(write, "/etc/hostcap-planted"),
       workspace=attempt(write, ws + "/allowed.txt"))
""",
    )
    # Control: the primary root is writable.
    assert found.pop("workspace") == "ok"
    # Linking an outside file in would give it the root's rights: landlock
    # refuses the reparenting (EXDEV). Everything else is refused by the
    # read-only host mounts (EROFS) or, where a mount allows it, landlock.
    assert found.pop("link_out") in REFUSED | {"EXDEV"}
    # The sandbox's /dev/shm is its own empty tmpfs: writing there is allowed
    # and never reaches the host's (checked below).
    assert found.pop("dev_shm") == "ok"
    # Moving a file out of the root crosses from the root's own mount (EXDEV).
    assert found.pop("move_in") in REFUSED | {"EXDEV"}
    assert set(found.values()) <= REFUSED, found
    assert victim.read_text() == "outside-original\n"
    assert sorted(os.listdir(outside)) == ["victim"]
    assert not Path("/var/tmp/hostcap-planted").exists()
    assert not Path("/dev/shm/hostcap-planted").exists()


async def test_read_only_root_refuses_every_write(alpha: Client, host: SecurityHost) -> None:
    ref = host.reference("alpha")
    doc = ref / "doc.txt"
    found = await attack(
        alpha,
        f"""
ref, doc = {str(ref)!r}, {str(doc)!r}
def write(path, mode="w"):
    with open(path, mode) as f:
        f.write("pwned")
report(read=attempt(lambda: open(doc, "rb").read()),
       list=attempt(os.listdir, ref),
       overwrite=attempt(write, doc),
       append=attempt(write, doc, "a"),
       truncate=attempt(os.truncate, doc, 0),
       create=attempt(write, ref + "/new"),
       mkdir=attempt(os.mkdir, ref + "/dir"),
       unlink=attempt(os.unlink, doc),
       rename=attempt(os.rename, doc, ref + "/renamed"))
""",
    )
    # Control: reading works; DAC would allow every write (see _plant).
    assert (found.pop("read"), found.pop("list")) == ("ok", "ok")
    assert set(found.values()) <= REFUSED, found
    assert doc.read_text() == "alpha-reference\n"
    assert sorted(os.listdir(ref)) == ["doc.txt"]


async def test_another_tenants_files_metadata_cannot_change(
    alpha: Client, host: SecurityHost
) -> None:
    secret = host.workspace("beta") / "secret.txt"
    before = secret.stat()
    try:
        found = await attack(
            alpha,
            f"""
secret = {str(secret)!r}
report(chmod=attempt(os.chmod, secret, 0),
       utime=attempt(os.utime, secret, (0, 0)),
       setxattr=attempt(os.setxattr, secret, "user.hostcap", b"pwned"))
""",
        )
        after = secret.stat()
    finally:
        secret.chmod(0o644)
        os.utime(secret, ns=(before.st_atime_ns, before.st_mtime_ns))
        with contextlib.suppress(OSError):
            os.removexattr(secret, "user.hostcap")
    assert "ok" not in found.values(), found
    assert (after.st_mode, after.st_mtime_ns) == (before.st_mode, before.st_mtime_ns)


async def test_read_only_root_metadata_cannot_change(alpha: Client, host: SecurityHost) -> None:
    doc = host.reference("alpha") / "doc.txt"
    before = doc.stat()
    try:
        found = await attack(
            alpha,
            f"""
doc = {str(doc)!r}
report(chmod=attempt(os.chmod, doc, 0o600),
       utime=attempt(os.utime, doc, (0, 0)),
       setxattr=attempt(os.setxattr, doc, "user.hostcap", b"pwned"))
""",
        )
        after = doc.stat()
    finally:
        doc.chmod(0o666)
        os.utime(doc, ns=(before.st_atime_ns, before.st_mtime_ns))
        with contextlib.suppress(OSError):
            os.removexattr(doc, "user.hostcap")
    assert "ok" not in found.values(), found
    assert (after.st_mode, after.st_mtime_ns) == (before.st_mode, before.st_mtime_ns)


async def test_tmp_is_private_per_spawn_and_gone_afterwards(alpha: Client, marker: str) -> None:
    name = f"/tmp/{marker}"
    writer = alpha.stub.Spawn(
        request(["sh", "-c", f"echo sandbox-tmp > {name} && echo written && sleep 30"])
    )
    pid = 0
    async for event in writer:
        kind = event.WhichOneof("event")
        if kind == "started":
            pid = event.started.pid
        elif kind == "output" and b"written" in event.output.data:
            break
    assert pid
    # Control: the file exists, in the spawn's own /tmp...
    assert Path(f"/proc/{pid}/root{name}").read_text() == "sandbox-tmp\n"
    namespace = os.readlink(f"/proc/{pid}/ns/mnt")
    # ... but not in the host's /tmp, nor in another spawn's /tmp.
    assert not Path(name).exists()
    other = await alpha.run(
        "sh", "-c", f"test -e {name} && echo visible || echo absent; ls -A /tmp"
    )
    assert other.stdout.startswith(b"absent\n")
    assert marker.encode() not in other.stdout
    writer.cancel()
    # Gone afterwards: no process is left in that mount namespace, so its
    # tmpfs is unmounted with it, and the host's /tmp never had the file.
    for _ in range(100):
        holders = [p for p in _pids() if _mount_ns(p) == namespace]
        if not holders:
            break
        await asyncio.sleep(0.02)
    assert holders == []
    assert not Path(name).exists()
    assert outcome(await alpha.run("true")) == "EXITED"


def _pids() -> list[int]:
    return [int(p) for p in os.listdir("/proc") if p.isdigit()]


def _mount_ns(pid: int) -> str:
    try:
        return os.readlink(f"/proc/{pid}/ns/mnt")
    except OSError:
        return ""


async def test_cwd_lives_in_the_sandboxs_own_mount_tree(
    start_daemon: Callable[..., Daemon],
) -> None:
    """With roots beneath /tmp (kept visible inside the private /tmp), the
    working directory must be the sandbox's view of the root: climbing `..`
    from it must not reach the host's /tmp, where the daemon's state is."""
    daemon = start_daemon()
    config = daemon.config_path
    workspace = daemon.root()
    assert config.exists() and workspace.parent.parent == config.parent
    client = Client(daemon.socket)
    try:
        found = await attack(
            client,
            f"""
report(cwd=os.getcwd(),
       relative=attempt(os.stat, "../../{config.name}"),
       absolute=attempt(os.stat, {str(config)!r}))
""",
        )
    finally:
        await client.close()
    assert found == {"cwd": str(workspace), "relative": "ENOENT", "absolute": "ENOENT"}
