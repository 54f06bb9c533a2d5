"""The front-end's confinement: hostile code under exactly `confine()`.

Each test starts a fresh interpreter as nobody (uid and gid 65534, no
supplementary groups) that confines itself with `confine()` and the read
paths of `interpreter_paths()`, as a front-end does, then attempts what one
tenant's front-end must not do to another's, to the root side or to the
host, and prints what happened (an errno name, or "ok") as JSON. Where
the errno alone could not tell, a control runs the same attempt as nobody
unconfined and shows it succeeding: the target is reachable, and the
confinement is what refuses it.

The children are started with setpriv (`support.identity.as_user`) rather
than subprocess's user=, which forks the test process (see there) and
execs as nobody: setpriv execs with root's capabilities still held (the
exec drops them), so it also starts an interpreter installed where nobody
cannot reach it. What the child runs with after the exec is the same.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hostcapd.sandbox import seccomp
from support.identity import as_user

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the front-end runs as another user")

NOBODY = 65534
REPO = Path(__file__).resolve().parents[3]
SYS_PATH = [str(REPO / "daemon"), str(REPO / "proto")]
PROTECTIONS = ("uid_drop", "not_dumpable", "no_new_privs", "no_capabilities", "landlock", "seccomp")
CLONE_NEWUSER = 0x10000000
CAP_SYS_ADMIN = 21

#: The hostile front-end: confine (unless told not to), then each attempt.
CHILD = r"""
import ctypes, errno, importlib, json, os, resource, signal, socket, sys, threading
spec = json.loads(sys.argv[1])
sys.path[:0] = spec["sys_path"]
import prctl
from hostcapd.frontend.confine import Confinement, confine, interpreter_paths
from hostcapd.applied import Unavailable

libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
L = ctypes.c_long

def checked(rc):
    if rc < 0:
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code))

def unix(kind=socket.SOCK_STREAM):
    return socket.socket(socket.AF_UNIX, kind)

def bind_unlink(path):
    with unix() as s:
        s.bind(path)
        s.listen()
    os.unlink(path)

def sendto(path):
    with unix(socket.SOCK_DGRAM) as s:
        s.sendto(b"forged", path)

def thread():
    t = threading.Thread(target=lambda: None)
    t.start()
    t.join()

def fork():
    pid = os.fork()
    if pid == 0:
        os._exit(7)
    if os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) != 7:
        raise OSError(errno.ECHILD, "the fork did not exit 7")

def syscall(nr, args):
    def c(a):
        return ctypes.c_char_p(a.encode("latin-1")) if isinstance(a, str) else L(a)
    checked(libc.syscall(L(nr), *[c(a) for a in args]))

ATTEMPTS = {
    "ptrace_attach": lambda pid: checked(libc.ptrace(L(16), L(pid), L(0), L(0))),
    "ptrace_seize": lambda pid: checked(libc.ptrace(L(0x4206), L(pid), L(0), L(0))),
    "kill": lambda a: os.kill(a[0], a[1]),
    "connect": lambda path: unix().connect(path),
    "connect_abstract": lambda name: unix().connect("\0" + name),
    "socket": lambda a: socket.socket(a[0], a[1]).close(),
    "socketpair": lambda a: [s.close() for s in socket.socketpair(a[0], a[1])],
    "sendto": sendto,
    "read": lambda path: open(path, "rb").close(),
    "listdir": os.listdir,
    "create": lambda path: os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)),
    "mkdir": os.mkdir,
    "symlink": lambda path: os.symlink("/", path),
    "bind_unlink": bind_unlink,
    "setuid": os.setuid,
    "exec": lambda path: os.execv(path, [path]),
    "unshare": lambda flags: checked(libc.unshare(flags)),
    "ambient_raise": lambda cap: checked(libc.prctl(L(47), L(2), L(cap), L(0), L(0))),
    "open_mem": lambda pid: open(f"/proc/{pid}/mem", "rb").close(),
    "prlimit": lambda pid: resource.prlimit(pid, resource.RLIMIT_NOFILE),
    "renice": lambda pid: os.setpriority(os.PRIO_PROCESS, pid, 19),
    "renice_user": lambda _: os.setpriority(os.PRIO_USER, 0, 19),
    "own_limits": lambda _: resource.setrlimit(resource.RLIMIT_NOFILE, resource.getrlimit(resource.RLIMIT_NOFILE)),
    "thread": lambda _: thread(),
    "fork": lambda _: fork(),
    "import": importlib.import_module,
    "syscall": lambda a: syscall(a[0], a[1]),
}

def attempt(op, arg):
    try:
        ATTEMPTS[op](arg)
    except OSError as error:
        return errno.errorcode.get(error.errno, str(error.errno))
    return "ok"

out = {"pid": os.getpid(), "dumpable_before": prctl.get_dumpable()}
if spec.get("thread_before"):
    threading.Thread(target=threading.Event().wait, daemon=True).start()
if spec["confine"]:
    if spec.get("import_grpc"):
        import asyncio, grpc
        from grpc_health.v1 import health, health_pb2_grpc
    parent = spec.get("parent_pid") or os.getppid()
    try:
        applied = confine(Confinement(spec["bind_dir"], interpreter_paths(), parent))
    except Unavailable as error:
        print(json.dumps({"unavailable": str(error)}), flush=True)
        sys.exit(3)
    out["applied"] = {a.name: [a.applied, a.required] for a in applied}
out["dumpable"] = prctl.get_dumpable()
out["results"] = [attempt(op, arg) for op, arg in spec["attempts"]]

if spec.get("serve"):
    # A front-end's server: grpc.aio, on a relative name in its bind directory.
    async def serve():
        server = grpc.aio.server()
        health_pb2_grpc.add_HealthServicer_to_server(health.aio.HealthServicer(), server)
        if server.add_insecure_port("unix:" + spec["serve"]) == 0:
            raise SystemExit("cannot bind")
        await server.start()
        print(json.dumps(out), flush=True)
        closed = asyncio.Event()
        asyncio.get_running_loop().add_reader(0, closed.set)
        await closed.wait()
        await server.stop(None)
    asyncio.run(serve())
    sys.exit(0)
print(json.dumps(out), flush=True)
if spec.get("hold"):
    sys.stdin.read()
"""


@dataclass
class Area:
    """A directory outside every read path, open to everyone: what a
    confined front-end must not reach although nobody may."""

    base: Path
    #: The front-end's bind directory, nobody's, 0700.
    bind: Path
    #: A file anyone may read (0644, in the 0755 base).
    public: Path
    #: A directory anyone may write (0777).
    world: Path


@pytest.fixture
def area() -> Iterator[Area]:
    base = Path(tempfile.mkdtemp(prefix="hostcap-confine-"))
    try:
        base.chmod(0o755)
        bind, public, world = base / "bind", base / "public.txt", base / "world"
        bind.mkdir(mode=0o700)
        os.chown(bind, NOBODY, NOBODY)
        public.write_text("readable by everyone\n")
        public.chmod(0o644)
        world.mkdir()
        world.chmod(0o777)
        yield Area(base, bind, public, world)
    finally:
        shutil.rmtree(base)


def _spec(
    attempts: list[tuple[str, Any]], confined: bool, bind_dir: Path | None, **extra: Any
) -> str:
    return json.dumps(
        {
            "sys_path": SYS_PATH,
            "confine": confined,
            "bind_dir": "" if bind_dir is None else str(bind_dir),  # "": confine() refuses
            "attempts": attempts,
            **extra,
        }
    )


def _argv(spec: str, as_nobody: bool, uid: int = NOBODY, gid: int = NOBODY) -> list[str]:
    argv = [sys.executable, "-I", "-c", CHILD, spec]
    return as_user(uid, gid, argv) if as_nobody else argv


def run(
    attempts: list[tuple[str, Any]],
    *,
    confined: bool = True,
    bind_dir: Path | None = None,
    as_nobody: bool = True,
    **extra: Any,
) -> dict[str, Any]:
    """Run CHILD (as nobody, confined) once; its JSON, whose "results" has one
    outcome per attempt."""
    done = subprocess.run(
        _argv(_spec(attempts, confined, bind_dir, **extra), as_nobody),
        cwd="/",
        env={"LC_ALL": "C.UTF-8"},
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert done.returncode in (0, 3), done.stderr
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def results(attempts: list[tuple[str, Any]], **options: Any) -> list[str]:
    outcome = run(attempts, **options)
    assert "unavailable" not in outcome, outcome
    got: list[str] = outcome["results"]
    return got


class Held:
    """A CHILD that waits, confined, until closed: for looking at it from outside."""

    def __init__(
        self, attempts: list[tuple[str, Any]], bind_dir: Path, cwd: str = "/", **extra: Any
    ) -> None:
        self.proc = subprocess.Popen(
            _argv(_spec(attempts, True, bind_dir, hold=True, **extra), as_nobody=True),
            cwd=cwd,
            env={"LC_ALL": "C.UTF-8"},
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            self.proc.kill()
            _, err = self.proc.communicate(timeout=10)
            raise AssertionError(f"the confined child did not start: {err}")
        self.out: dict[str, Any] = json.loads(line)
        assert "unavailable" not in self.out, self.out

    def close(self) -> str:
        """Let it exit; its stderr."""
        _, err = self.proc.communicate(timeout=15)
        assert self.proc.returncode == 0, err
        return err


@pytest.fixture
def held() -> Iterator[list[Held]]:
    started: list[Held] = []
    yield started
    for child in started:
        if child.proc.poll() is None:
            child.proc.kill()
            child.proc.communicate()


@pytest.fixture
def sibling() -> Iterator[subprocess.Popen[bytes]]:
    """A process of nobody's, unconfined and dumpable: another tenant's front-end."""
    proc = subprocess.Popen(as_user(NOBODY, NOBODY, ["/bin/sleep", "60"]))
    try:
        yield proc
    finally:
        proc.kill()
        proc.wait()


@pytest.fixture
def listeners(area: Area) -> Iterator[dict[str, str]]:
    """Sockets anyone may reach: a pathname stream socket (0777), an abstract
    one, and a datagram socket (0777), all listening in the test."""
    stream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    abstract = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    dgram = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    paths = {
        "stream": str(area.base / "listening.sock"),
        "abstract": f"hostcap-confine-{uuid.uuid4().hex}",
        "dgram": str(area.base / "dgram.sock"),
    }
    try:
        stream.bind(paths["stream"])
        stream.listen(8)
        abstract.bind("\0" + paths["abstract"])
        abstract.listen(8)
        dgram.bind(paths["dgram"])
        for name in ("stream", "dgram"):
            os.chmod(paths[name], 0o777)
        yield paths
    finally:
        for s in (stream, abstract, dgram):
            s.close()


def _status(pid: int) -> dict[str, str]:
    lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    return {k: v.strip() for k, _, v in (line.partition(":") for line in lines)}


# --- what confine() applies ----------------------------------------------------


def test_every_protection_is_applied_and_required(area: Area) -> None:
    outcome = run([], bind_dir=area.bind)
    assert outcome["applied"] == {name: [True, True] for name in PROTECTIONS}
    assert list(outcome["applied"]) == list(PROTECTIONS)  # in the order applied


def test_its_status_shows_no_new_privs_no_capabilities_and_a_filter(
    area: Area, held: list[Held]
) -> None:
    child = Held([], area.bind)
    held.append(child)
    status = _status(child.out["pid"])
    assert status["Uid"].split() == [str(NOBODY)] * 4
    assert status["Gid"].split() == [str(NOBODY)] * 4
    assert status["Groups"] == ""
    assert status["NoNewPrivs"] == "1"
    assert status["Seccomp"] == "2"
    assert status["Seccomp_filters"] == "1"
    for name in ("CapInh", "CapPrm", "CapEff", "CapAmb"):
        assert int(status[name], 16) == 0, name
    child.close()


def test_it_is_not_dumpable_and_its_memory_is_closed_to_its_uid(
    area: Area, held: list[Held], sibling: subprocess.Popen[bytes]
) -> None:
    child = Held([], area.bind)
    held.append(child)
    assert child.out["dumpable_before"] == 1  # it is confine() that changed it
    assert child.out["dumpable"] == 0
    # Another process of its uid, unconfined, opens the memory of a dumpable
    # process of that uid but not the front-end's.
    memory = [("open_mem", sibling.pid), ("open_mem", child.out["pid"])]
    control, attack = results(memory, confined=False)
    assert control == "ok"
    assert attack in ("EACCES", "EPERM")
    child.close()


# --- other processes -------------------------------------------------------------


def test_it_cannot_ptrace_a_process_of_its_uid(
    sibling: subprocess.Popen[bytes], area: Area
) -> None:
    # PTRACE_SEIZE is PTRACE_ATTACH's permission check without stopping the
    # target; the control's exit detaches it.
    assert results([("ptrace_seize", sibling.pid)], confined=False) == ["ok"]
    assert results([("ptrace_attach", sibling.pid)], bind_dir=area.bind) == ["EPERM"]
    assert sibling.poll() is None


def test_it_cannot_signal_a_process_of_its_uid(
    sibling: subprocess.Popen[bytes], area: Area
) -> None:
    """Only landlock's signal scope stands between them: same uid, and the
    filter allows kill."""
    assert results([("kill", [sibling.pid, 0])], confined=False) == ["ok"]
    attacks = [("kill", [sibling.pid, signal.SIGTERM]), ("kill", [sibling.pid, 0])]
    assert results(attacks, bind_dir=area.bind) == ["EPERM", "EPERM"]
    assert sibling.poll() is None


def test_it_cannot_signal_the_root_side(area: Area) -> None:
    assert results([("kill", [os.getpid(), 0])], bind_dir=area.bind) == ["EPERM"]


def test_it_cannot_change_the_limits_or_priority_of_a_process_of_its_uid(
    sibling: subprocess.Popen[bytes], area: Area
) -> None:
    """The front-ends share a uid: without the filter, one could set another's
    RLIMIT_NOFILE to 0 or renice it."""
    attempts = [("prlimit", sibling.pid), ("renice", sibling.pid)]
    assert results(attempts, confined=False) == ["ok", "ok"]
    attempts += [("renice_user", 0), ("own_limits", 0)]
    assert results(attempts, bind_dir=area.bind) == ["EPERM", "EPERM", "EPERM", "ok"]


# --- sockets -------------------------------------------------------------------------


def test_it_cannot_connect_to_any_socket(area: Area, listeners: dict[str, str]) -> None:
    reach = [
        ("connect", listeners["stream"]),
        ("connect_abstract", listeners["abstract"]),
        ("sendto", listeners["dgram"]),
    ]
    assert results(reach, confined=False) == ["ok", "ok", "ok"]
    # A datagram socket could send to a socket path without connect: none can be made.
    assert results(reach, bind_dir=area.bind) == ["EPERM", "EPERM", "ESOCKTNOSUPPORT"]


def test_it_makes_unix_stream_and_seqpacket_sockets_only(area: Area) -> None:
    s = socket
    attempts: list[tuple[str, Any]] = [
        ("socket", [s.AF_INET, s.SOCK_STREAM]),
        ("socket", [s.AF_INET6, s.SOCK_DGRAM]),
        ("socket", [s.AF_NETLINK, s.SOCK_RAW]),
        ("socket", [s.AF_PACKET, s.SOCK_RAW]),
        ("socket", [s.AF_UNIX, s.SOCK_DGRAM]),
        ("socketpair", [s.AF_UNIX, s.SOCK_DGRAM]),
        ("socket", [s.AF_UNIX, s.SOCK_STREAM | s.SOCK_NONBLOCK | s.SOCK_CLOEXEC]),
        ("socket", [s.AF_UNIX, s.SOCK_SEQPACKET]),
        ("socketpair", [s.AF_UNIX, s.SOCK_STREAM]),  # asyncio's self-pipe
    ]
    refused = ["EAFNOSUPPORT"] * 4 + ["ESOCKTNOSUPPORT"] * 2
    assert results(attempts, bind_dir=area.bind) == [*refused, "ok", "ok", "ok"]


# --- files -----------------------------------------------------------------------------


def test_it_reads_nothing_outside_its_read_paths(area: Area) -> None:
    attempts = [("read", str(area.public)), ("read", "/etc/passwd"), ("listdir", str(area.base))]
    assert results(attempts, confined=False) == ["ok", "ok", "ok"]
    assert results(attempts, bind_dir=area.bind) == ["EACCES", "EACCES", "EACCES"]


def test_its_bind_dir_takes_a_socket_and_nothing_else(area: Area) -> None:
    attempts = [
        ("create", str(area.bind / "file")),
        ("mkdir", str(area.bind / "dir")),
        ("symlink", str(area.bind / "link")),
        ("bind_unlink", str(area.bind / "frontend.sock")),
        ("listdir", str(area.bind)),
    ]
    assert results(attempts, bind_dir=area.bind) == ["EACCES"] * 3 + ["ok", "ok"]
    assert list(area.bind.iterdir()) == []  # the socket was bound, then unlinked


def test_it_writes_nowhere_else(area: Area) -> None:
    assert results([("create", str(area.world / "control"))], confined=False) == ["ok"]
    attempts = [
        ("create", str(area.world / "attack")),
        ("bind_unlink", str(area.world / "attack.sock")),
        ("create", os.path.join(tempfile.gettempdir(), f"hostcap-confine-{uuid.uuid4().hex}")),
    ]
    assert results(attempts, bind_dir=area.bind) == ["EACCES"] * 3
    assert sorted(p.name for p in area.world.iterdir()) == ["control"]


# --- identity, exec, namespaces, capabilities --------------------------------------


def test_it_cannot_change_identity_exec_or_make_namespaces(area: Area) -> None:
    # Unconfined, nobody may setuid to itself and make a user namespace.
    assert results([("setuid", NOBODY), ("unshare", CLONE_NEWUSER)], confined=False) == ["ok"] * 2
    attempts = [
        ("setuid", 0),
        ("setuid", NOBODY),
        ("exec", "/bin/true"),
        ("unshare", CLONE_NEWUSER),
        ("ambient_raise", CAP_SYS_ADMIN),
    ]
    assert results(attempts, bind_dir=area.bind) == ["EPERM"] * 5


def test_the_front_end_filter_denies_its_examples_and_only_it_does(area: Area) -> None:
    """FRONTEND_DENIED's examples: the group's errno confined, another
    outcome unconfined (as root: then no refusal is for want of privilege);
    the allowed examples fare the same. The shared DENIED_SYSCALLS examples
    are all refused too (test_sandbox_seccomp shows them unfiltered)."""
    nr = seccomp.X86_64_SYSCALLS

    def calls(group_calls: tuple[seccomp.Call, ...]) -> list[tuple[str, Any]]:
        return [
            (
                "syscall",
                [nr[c.name], [a.decode("latin-1") if isinstance(a, bytes) else a for a in c.args]],
            )
            for c in group_calls
        ]

    for group in seccomp.FRONTEND_DENIED:
        attempts = calls(group.denied) + calls(group.allowed)
        plain = results(attempts, confined=False, as_nobody=False)
        under = results(attempts, bind_dir=area.bind)
        code = errno.errorcode[group.errno]
        n = len(group.denied)
        for call, before, after in zip(group.denied, plain[:n], under[:n], strict=True):
            assert after == code, f"{call} confined: {after}"
            assert before != code, f"{call} gives {code} unconfined too"
        assert under[n:] == plain[n:], group.name
    shared = [c for g in seccomp.DENIED_SYSCALLS for c in g.denied]
    expected = [errno.errorcode[g.errno] for g in seccomp.DENIED_SYSCALLS for _ in g.denied]
    assert results(calls(tuple(shared)), bind_dir=area.bind) == expected


# --- what a front-end still does -----------------------------------------------------


def test_threads_forks_and_imports_still_work(area: Area) -> None:
    attempts = [
        ("thread", 0),
        ("fork", 0),
        ("import", "decimal"),  # the standard library, imported after confinement
        ("import", "hostcapd.bridge.messages"),
    ]
    assert results(attempts, bind_dir=area.bind) == ["ok"] * 4


def test_a_grpc_server_serves_under_the_confinement(area: Area, held: list[Held]) -> None:
    """grpc.aio on a relative name in the bind directory, as the front-end
    serves; a health check from outside gets its answer."""
    child = Held([], area.bind, cwd=str(area.bind), serve="frontend.sock", import_grpc=True)
    held.append(child)
    check = (
        "import grpc, sys\n"
        "from grpc_health.v1 import health_pb2, health_pb2_grpc\n"
        "with grpc.insecure_channel('unix:' + sys.argv[1]) as channel:\n"
        "    stub = health_pb2_grpc.HealthStub(channel)\n"
        "    print(stub.Check(health_pb2.HealthCheckRequest(), timeout=10).status)\n"
    )
    done = subprocess.run(
        [sys.executable, "-I", "-c", check, str(area.bind / "frontend.sock")],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "1"  # SERVING
    child.close()


# --- refusals ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("identity", "argv_of"),
    [
        ("root", lambda argv: argv),
        ("gid 0", lambda argv: as_user(NOBODY, 0, argv)),
        (
            "group 0",
            lambda argv: [
                "setpriv",
                f"--reuid={NOBODY}",
                f"--regid={NOBODY}",
                "--groups=0",
                "--",
                *argv,
            ],
        ),
    ],
)
def test_it_refuses_to_run_as_root(area: Area, identity: str, argv_of: Any) -> None:
    done = subprocess.run(
        argv_of(_argv(_spec([], True, area.bind), as_nobody=False)),
        cwd="/",
        env={"LC_ALL": "C.UTF-8"},
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert done.returncode == 3, (identity, done.stderr)
    assert "a front-end never runs as root" in json.loads(done.stdout)["unavailable"]


def test_it_refuses_when_the_parent_is_not_the_root_side(area: Area) -> None:
    outcome = run([], bind_dir=area.bind, parent_pid=1)
    assert "went away" in outcome["unavailable"]


def test_it_refuses_once_a_thread_exists(area: Area) -> None:
    outcome = run([], bind_dir=area.bind, thread_before=True)
    assert "before any thread exists" in outcome["unavailable"]


def test_it_refuses_a_missing_bind_dir(area: Area) -> None:
    outcome = run([], bind_dir=area.base / "absent")
    assert "bind directory" in outcome["unavailable"]
