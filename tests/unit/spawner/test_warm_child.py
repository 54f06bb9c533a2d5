"""The C set-up's warm child, driven directly: it waits after its filters,
runs the request it is given once, refuses a request whose layout does not
fit (nothing runs), and ends without running anything when its channel is
closed."""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import socket
import struct
import time
from collections.abc import Iterator

import pytest
from hostcapd import _childsetup, childsetup
from hostcapd.spawner import init_report
from support.childplans import bare_plan

CLONE_NEWPID = 0x20000000


def _made_warm(init: bool) -> tuple[int, socket.socket, int]:
    """A warm child (with an init as pid 1 of a new pid namespace, if
    `init`), waiting: its pid, our end of its channel, its report pipe."""
    ours, theirs = socket.socketpair()
    plan = bare_plan(
        warm_channel=theirs.fileno(),
        roots=[b"/tmp"],
        ids=(65534, 65534),
        drop_caps=True,
        no_new_privs=True,
        clone_flags=CLONE_NEWPID if init else 0,
        init=init,
    )
    pid, report = childsetup.spawn(plan)
    theirs.close()
    assert init_report.parse_ready(os.read(report, 24)) is None  # it waits
    return pid, ours, report


def _end(pid: int) -> None:
    """Kill and reap `pid` if it is still there."""
    try:
        os.kill(pid, 9)
        os.waitpid(pid, 0)
    except (ProcessLookupError, ChildProcessError):
        pass


@pytest.fixture(params=[False, True], ids=["no_init", "init"])
def warm(request: pytest.FixtureRequest) -> Iterator[tuple[int, socket.socket, int, bool]]:
    init: bool = request.param
    pid, ours, report = _made_warm(init)
    yield pid, ours, report, init
    ours.close()
    os.close(report)
    _end(pid)


def _fds(out: int, exe: int | None) -> list[int]:
    devnull = os.open("/dev/null", os.O_RDONLY | os.O_CLOEXEC)
    fds = [devnull, out, out, os.eventfd(0, os.EFD_CLOEXEC), os.eventfd(1, os.EFD_CLOEXEC)]
    return fds + ([exe] if exe is not None else [])


def _outcome(pid: int, report: int, init: bool) -> tuple[str, int] | None:
    data = os.read(report, 24)
    if not init and data == b"":
        return None
    return init_report.parse_exec(data)


def test_it_runs_its_request_as_set_up(warm: tuple[int, socket.socket, int, bool]) -> None:
    pid, channel, report, init = warm
    r, w = os.pipe2(os.O_CLOEXEC)
    payload = childsetup.pack_request(
        by_fd=False,
        root=0,
        cwd=b".",
        exe_path=b"/bin/sh",
        rlimits=[(4, 0, 0)],
        argv=[b"sh", b"-c", b"pwd; id -u; ulimit -c"],
        envp=[b"PATH=/usr/bin:/bin"],
    )
    fds = _fds(w, None)
    childsetup.go(channel.fileno(), payload, fds)
    for fd in set(fds):
        os.close(fd)
    assert _outcome(pid, report, init) is None
    out = b""
    while chunk := os.read(r, 4096):
        out += chunk
    os.close(r)
    assert out == b"/tmp\n65534\n0\n"
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0


def _raw(words: list[int], strings: bytes = b"\0") -> bytes:
    data = struct.pack(f"={len(words)}q", *words) + strings
    return data + bytes(-len(data) % 8)


@pytest.mark.parametrize(
    "payload",
    [
        # by_fd, root, cwd, exe, n_rlimits, argc, envc, then argv / envp offsets
        _raw([0, -1, -1, 4096, 0, 1, 0, 80, -1, -1]),  # exe_path outside the buffer
        _raw([0, 5, -1, 80, 0, 1, 0, 80, -1, -1], b"/bin/true\0"),  # no root 5
        _raw([0, -1, -1, 80, 0, 0, 0, -1, -1], b"/bin/true\0"),  # no argv
        _raw([0, -1, -1, 80, 0, 1, 0, 80, 80, -1], b"/bin/true\0"),  # argv not ended
        _raw([0, -1, -1, 80, 99, 1, 0, 80, -1, -1], b"/bin/true\0"),  # too many rlimits
        _raw([0, -1, -1, 80, 0, 1, 0, 80, -1, -1], b"/bin/tru"),  # the last string not ended
    ],
    ids=["offset_outside", "unknown_root", "no_argv", "argv_unterminated", "rlimits", "nul"],
)
def test_a_request_that_does_not_fit_its_layout_runs_nothing(
    warm: tuple[int, socket.socket, int, bool], payload: bytes
) -> None:
    pid, channel, report, init = warm
    fds = _fds(os.open("/dev/null", os.O_WRONLY | os.O_CLOEXEC), None)
    childsetup.go(channel.fileno(), payload, fds)
    for fd in set(fds):
        os.close(fd)
    assert _outcome(pid, report, init) == ("warm", errno.EINVAL)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 127


def test_a_closed_channel_ends_it_without_running_anything(
    warm: tuple[int, socket.socket, int, bool],
) -> None:
    pid, channel, report, _ = warm
    channel.close()
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 127
    assert os.read(report, 24) == b""  # no record: it never ran


def test_pack_request_refuses_a_nul_in_a_string() -> None:
    with pytest.raises(ValueError):
        childsetup.pack_request(
            by_fd=True, root=-1, cwd=None, exe_path=None, rlimits=[], argv=[b"a\0b"], envp=[]
        )


def _init_warm() -> tuple[int, socket.socket, int]:
    return _made_warm(init=True)


@pytest.fixture
def preclone() -> Iterator[None]:
    """The command's process cloned ahead (on by default: see warm.c)."""
    was = _childsetup._warm_preclone(True)
    try:
        yield
    finally:
        _childsetup._warm_preclone(was)


def _children(pid: int) -> list[int]:
    with open(f"/proc/{pid}/task/{pid}/children") as f:
        return [int(c) for c in f.read().split()]


@pytest.mark.parametrize("cwd", [b".", b"no-such-directory"], ids=["exec", "chdir_fails"])
def test_an_init_waits_with_its_command_process_cloned_ahead(cwd: bytes, preclone: None) -> None:
    """With an init, the command's process is cloned before the request and
    waits for it in its own session; given it, it runs it (the init says so
    once it exec'd, while it runs), or the init says which step failed, once,
    and nothing ran."""
    pid, channel, report = _init_warm()
    try:
        [command] = _children(pid)  # cloned ahead, waiting for the request
        assert _children(command) == []
        assert os.getsid(command) == command != os.getsid(pid)
        r, w = os.pipe2(os.O_CLOEXEC)
        stdin, hold = os.pipe2(os.O_CLOEXEC)
        payload = childsetup.pack_request(
            by_fd=False,
            root=0,
            cwd=cwd,
            exe_path=b"/bin/sh",
            rlimits=[],
            argv=[b"sh", b"-c", b"read line; echo ran $line"],
            envp=[b"PATH=/usr/bin:/bin"],
        )
        fds = _fds(w, None)
        os.close(fds[0])
        fds[0] = stdin
        childsetup.go(channel.fileno(), payload, fds)
        for fd in set(fds):
            os.close(fd)
        said = init_report.parse_exec(os.read(report, 24))
        running = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is None
        with contextlib.suppress(BrokenPipeError):  # nothing ran to read it
            os.write(hold, b"go\n")
        os.close(hold)
        out = b""
        while chunk := os.read(r, 4096):
            out += chunk
        _, status = os.waitpid(pid, 0)
        os.close(r)
        if cwd == b".":
            assert (said, running, out) == (None, True, b"ran go\n")
            command_exit = init_report.read_and_close(report)
            assert command_exit is not None and command_exit.status == 0
            assert os.waitstatus_to_exitcode(status) == 0
        else:
            assert (said, out) == (("chdir", errno.ENOENT), b"")
            assert os.read(report, 100) == b""  # one record: the init's
            os.close(report)
            assert os.waitstatus_to_exitcode(status) == 127
        report = -1
    finally:
        channel.close()
        if report >= 0:
            os.close(report)
        _end(pid)


def test_an_init_whose_command_process_is_killed_waiting_says_so_and_ends(preclone: None) -> None:
    """Killed from outside while it waits, the command's process ends its
    init, which says "init" (not that the command exec'd)."""
    pid, channel, report = _init_warm()
    try:
        [command] = _children(pid)
        os.kill(command, 9)
        _, status = os.waitpid(pid, 0)
        assert init_report.parse_exec(os.read(report, 24)) == ("init", 0)
        assert os.waitstatus_to_exitcode(status) == 127
    finally:
        channel.close()
        os.close(report)


_libc = ctypes.CDLL(None, use_errno=True)
SYS_KCMP = {"x86_64": 312, "aarch64": 272}[os.uname().machine]
KCMP_VM = 1


def _state(pid: int) -> str:
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0]


def test_an_init_waiting_for_its_command_process_cloned_ahead_sleeps_interruptibly(
    preclone: None,
) -> None:
    """The init waits for the exec of its command's process, which waits for
    the request: for as long as that lasts it sleeps interruptibly ("S"), not
    in the kernel's uninterruptible vfork wait ("D", 1 in the host's load
    average the whole time), and still goes on to run the request."""
    pid, channel, report = _init_warm()
    try:
        [command] = _children(pid)
        # It shares the init's memory (no copy of an address space per
        # waiting child): kcmp(KCMP_VM) is 0 for one mm.
        assert _libc.syscall(SYS_KCMP, pid, command, KCMP_VM, 0, 0) == 0
        # The init holds its report pipe and nothing else while it waits.
        assert len(os.listdir(f"/proc/{pid}/fd")) == 1
        states = []
        for _ in range(20):
            states.append((_state(pid), _state(command)))
            time.sleep(0.005)
        assert states[-1] == ("S", "S"), states
        assert all("D" not in s for s in states), states
        r, w = os.pipe2(os.O_CLOEXEC)
        payload = childsetup.pack_request(
            by_fd=False,
            root=0,
            cwd=b".",
            exe_path=b"/bin/echo",
            rlimits=[],
            argv=[b"echo", b"ran"],
            envp=[],
        )
        fds = _fds(w, None)
        childsetup.go(channel.fileno(), payload, fds)
        for fd in set(fds):
            os.close(fd)
        assert init_report.parse_exec(os.read(report, 24)) is None
        assert os.read(r, 100) == b"ran\n"
        os.close(r)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
    finally:
        channel.close()
        os.close(report)
        _end(pid)
