"""hostcapctl's interactive spawns (issue 31, item 5) against a real daemon:
`run --tty` driven through a pseudo-terminal pair as an operator's keyboard
and screen (raw mode and its restoration, Ctrl-C reaching the spawn, the
window size and SIGWINCH as Resize), `attach` and its detach key, `run
--detach --stdin-open` with `write --close`, `resize`, and `run
--stdin-open` fed by a pipe."""

from __future__ import annotations

import fcntl
import json
import os
import re
import select
import signal
import struct
import subprocess
import sys
import termios
import time
from pathlib import Path

from ops_support import hostcapctl
from support.daemon import REPO, Daemon, audit_records, wait_gone

#: Generous correctness deadline for a screen to show something on a loaded machine.
SCREEN_DEADLINE_S = 30.0


class Screen:
    """hostcapctl on the far side of a pty pair: its stdin, stdout and
    stderr are the pty's terminal, which is its controlling terminal."""

    def __init__(self, daemon: Daemon, *args: str, rows: int = 30, cols: int = 90) -> None:
        self.master, slave = os.openpty()
        self.set_size(rows, cols, fd=slave)
        self.before = termios.tcgetattr(slave)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "hostcap.ctl.main", "--socket", str(daemon.socket), *args],
            stdin=slave, stdout=slave, stderr=slave, cwd=REPO, start_new_session=True,
            preexec_fn=lambda: fcntl.ioctl(0, termios.TIOCSCTTY, 0),
            env={"PATH": "/usr/bin:/bin", "PYTHONPATH": os.environ.get("PYTHONPATH", "")},
        )  # fmt: skip
        self.slave = slave  # kept open: the terminal's attributes are read through it
        self.seen = b""

    def set_size(self, rows: int, cols: int, fd: int | None = None) -> None:
        """Set the window size; the terminal's foreground group gets SIGWINCH."""
        packed = struct.pack("HHHH", rows, cols, 0, 0)
        fcntl.ioctl(self.master if fd is None else fd, termios.TIOCSWINSZ, packed)

    def type(self, keys: bytes) -> None:
        os.write(self.master, keys)

    def until(self, pattern: bytes) -> bytes:
        """Read the screen until `pattern` shows up after what was matched last."""
        start = len(self.seen)
        deadline = time.monotonic() + SCREEN_DEADLINE_S
        while not re.search(pattern, self.seen[start:]):
            left = deadline - time.monotonic()
            assert left > 0, f"{pattern!r} not on the screen: {self.seen[start:]!r}"
            ready, _, _ = select.select([self.master], [], [], min(left, 0.5))
            if ready:
                try:
                    self.seen += os.read(self.master, 65536)
                except OSError:  # every side of the terminal closed
                    assert re.search(pattern, self.seen[start:]), self.seen[start:]
        return self.seen[start:]

    def raw(self) -> bool:
        return not termios.tcgetattr(self.slave)[3] & termios.ICANON

    def wait(self) -> int:
        code = self.proc.wait(timeout=SCREEN_DEADLINE_S)
        with_rest = self.seen
        try:
            while select.select([self.master], [], [], 0.2)[0]:
                with_rest += os.read(self.master, 65536)
        except OSError:
            pass
        self.seen = with_rest
        return code

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        os.close(self.master)
        os.close(self.slave)


def test_run_tty_is_an_interactive_terminal_restored_at_its_end(daemon: Daemon) -> None:
    screen = Screen(daemon, "run", "--tty", "--", "sh", rows=30, cols=90)
    try:
        screen.type(b"stty size; tty\r")
        assert b"30 90" in screen.until(rb"30 90.*\n.*/dev/pts/\d+")
        assert screen.raw()  # hostcapctl's own terminal is raw while it runs

        # Ctrl-C reaches the spawn's foreground job; the shell and hostcapctl go on.
        screen.type(b"sleep 30; echo not-interrupted\r")
        time.sleep(1.0)
        screen.type(b"\x03")
        screen.type(b"echo alive-$((6*7))\r")
        after = screen.until(rb"alive-42")
        assert b"\nnot-interrupted" not in after and b"^C" in after and screen.proc.poll() is None

        # A new window size is the spawn's (SIGWINCH, then Resize).
        screen.set_size(40, 100)
        deadline = time.monotonic() + SCREEN_DEADLINE_S
        while True:
            screen.type(b"stty size\r")
            if b"40 100" in screen.until(rb"\d+ \d+\r?\n"):
                break
            assert time.monotonic() < deadline, "the new size never reached the spawn"
            time.sleep(0.5)

        screen.type(b"exit 3\r")
        assert screen.wait() == 3
        assert b"EXITED" in screen.seen
        assert termios.tcgetattr(screen.slave) == screen.before  # restored
    finally:
        screen.close()


def test_attach_joins_a_detached_terminal_and_ctrl_bracket_leaves_it_running(
    daemon: Daemon,
) -> None:
    started = hostcapctl("run", "--detach", "--tty", "--", "sh", tenant=daemon.socket)
    assert started.returncode == 0, started.stderr
    spawn_id = started.stdout.strip()
    screen = Screen(daemon, "attach", spawn_id, rows=25, cols=70)
    try:
        screen.until(rb"attached to")
        screen.type(b"echo hi-$((6*7)); stty size\r")
        assert b"25 70" in screen.until(rb"hi-42.*\n.*25 70")  # attach resized it to this terminal
        screen.type(b"\x1d")
        assert screen.wait() == 0
        assert b"detached" in screen.seen
        assert termios.tcgetattr(screen.slave) == screen.before
    finally:
        screen.close()
    later = json.loads(hostcapctl("output", spawn_id, "--json", tenant=daemon.socket).stdout)
    assert later["running"] is True  # left running
    # It can be joined again and ended from there.
    again = Screen(daemon, "attach", "--no-replay", spawn_id)
    try:
        again.until(rb"attached to")
        again.type(b"exit 4\r")
        assert again.wait() == 4
    finally:
        again.close()


def test_write_close_resize_and_a_piped_stdin(daemon: Daemon) -> None:
    started = hostcapctl("run", "--detach", "--stdin-open", "--", "cat", tenant=daemon.socket)
    assert started.returncode == 0, started.stderr
    spawn_id = started.stdout.strip()
    big = b"x" * (200 * 1024)  # more than one 64 KiB write
    written = subprocess.run(
        [sys.executable, "-m", "hostcap.ctl.main", "--socket", str(daemon.socket),
         "write", spawn_id, "--close", "--json"],
        input=b"line\n" + big, capture_output=True, cwd=REPO, timeout=60,
    )  # fmt: skip
    assert written.returncode == 0, written.stderr
    answer = json.loads(written.stdout)
    assert answer["bytes_written"] == 5 + len(big) and answer["closed"] is True
    # In pieces of at most 64 KiB, each its own audited write.
    inputs = [
        r for r in audit_records(daemon.audit_path)
        if r["event"] == "process.input" and r["spawn_id"] == spawn_id
    ]  # fmt: skip
    pieces = [r["bytes"] for r in inputs if r["bytes"]]
    assert answer["writes"] == len(pieces) >= 4
    assert sum(pieces) == 5 + len(big) and max(pieces) <= 64 * 1024
    assert inputs[-1]["close"] is True
    out = json.loads(
        hostcapctl("output", spawn_id, "--wait-ms", "10000", "--json", tenant=daemon.socket).stdout
    )
    assert out["stdout"].startswith("line\nxxxx")
    refused = hostcapctl("resize", spawn_id, "10", "10", tenant=daemon.socket)
    assert refused.returncode == 125
    assert "NOT_A_TERMINAL" in refused.stderr or "SPAWN_ENDED" in refused.stderr
    bad = hostcapctl("resize", spawn_id, "0", "10", tenant=daemon.socket)
    assert bad.returncode == 2 and "1-1000" in bad.stderr
    missing = hostcapctl("write", "no-such-spawn", tenant=daemon.socket)
    assert missing.returncode == 127

    piped = subprocess.run(
        [sys.executable, "-m", "hostcap.ctl.main", "--socket", str(daemon.socket),
         "run", "--stdin-open", "--", "sh", "-c", "cat; echo end"],
        input=b"a\nb\n", capture_output=True, cwd=REPO, timeout=60,
    )  # fmt: skip
    assert piped.returncode == 0, piped.stderr
    assert piped.stdout == b"a\nb\nend\n"


def test_resize_of_a_tty_spawn_is_what_it_sees(daemon: Daemon) -> None:
    started = hostcapctl(
        "run", "--detach", "--tty", "--rows", "30", "--cols", "90", "--",
        "sh", "-c", "read a; stty size; read b; stty size",
        tenant=daemon.socket,
    )  # fmt: skip
    spawn_id = started.stdout.strip()
    feed = [sys.executable, "-m", "hostcap.ctl.main", "--socket", str(daemon.socket), "write"]
    subprocess.run([*feed, spawn_id], input=b"\n", check=True, cwd=REPO, timeout=60)
    assert hostcapctl("resize", spawn_id, "50", "132", tenant=daemon.socket).returncode == 0
    subprocess.run([*feed, spawn_id], input=b"\n", check=True, cwd=REPO, timeout=60)
    deadline = time.monotonic() + SCREEN_DEADLINE_S
    while True:
        out = json.loads(
            hostcapctl(
                "output", spawn_id, "--wait-ms", "2000", "--json", tenant=daemon.socket
            ).stdout
        )
        if not out["running"] or time.monotonic() > deadline:
            break
    assert re.search(r"30 90\r?\n.*50 132", out["stdout"], re.S), out
    assert out["outcome"] == "EXITED" and out["exit_code"] == 0


def test_ctrl_bracket_ends_run_tty_and_a_pipe_can_drive_it(daemon: Daemon, marker: str) -> None:
    screen = Screen(daemon, "run", "--tty", "--", "sh", "-c", f"echo ready; sleep 300; : {marker}")
    try:
        screen.until(rb"ready")
        screen.type(b"\x1d")
        assert screen.wait() == 130 and b"ended on Ctrl-]" in screen.seen
        assert termios.tcgetattr(screen.slave) == screen.before
    finally:
        screen.close()
    assert wait_gone(marker, 30) == []  # the daemon ended the tree

    piped = subprocess.run(
        [sys.executable, "-m", "hostcap.ctl.main", "--socket", str(daemon.socket),
         "run", "--tty", "--", "sh"],
        input=b"test -t 0 && echo tty-$((6*7))\nexit 5\n", capture_output=True, cwd=REPO,
        timeout=60,
    )  # fmt: skip
    assert piped.returncode == 5, piped.stderr
    assert b"tty-42" in piped.stdout
    missing = hostcapctl("attach", "no-such-spawn", tenant=daemon.socket)
    assert missing.returncode == 127 and "NOT_FOUND" in missing.stderr


def test_attach_to_a_pipe_spawn_sends_lines_and_ctrl_d_leaves(daemon: Daemon) -> None:
    started = hostcapctl("run", "--detach", "--stdin-open", "--", "cat", tenant=daemon.socket)
    spawn_id = started.stdout.strip()
    screen = Screen(daemon, "attach", spawn_id)
    try:
        screen.until(rb"attached to")
        assert not screen.raw()  # a pipe takes lines: this terminal edits and echoes them
        screen.type(b"hello-pipe\r")
        # Echoed here, then cat's copy: a line, as the program reads it.
        assert screen.until(rb"hello-pipe\r?\n(.|\n)*hello-pipe\r?\n")
        screen.type(b"\x04")
        assert screen.wait() == 0 and b"detached" in screen.seen
    finally:
        screen.close()
    later = json.loads(hostcapctl("output", spawn_id, "--json", tenant=daemon.socket).stdout)
    assert later["running"] is True and later["stdout"] == "hello-pipe\n"
    assert hostcapctl("stop", spawn_id, tenant=daemon.socket).returncode == 0


def test_sigterm_restores_the_terminal_and_ends_run_tty(daemon: Daemon, marker: str) -> None:
    screen = Screen(daemon, "run", "--tty", "--", "sh", "-c", f"echo ready; sleep 300; : {marker}")
    try:
        screen.until(rb"ready")
        assert screen.raw()
        screen.proc.send_signal(signal.SIGTERM)
        assert screen.wait() == 128 + signal.SIGTERM
        assert termios.tcgetattr(screen.slave) == screen.before
    finally:
        screen.close()
    assert wait_gone(marker, 30) == []  # its call was cancelled: the daemon ended the tree


def test_run_stdin_open_from_a_keyboard_sends_lines_and_ctrl_d_ends_its_input(
    daemon: Daemon, tmp_path: Path
) -> None:
    screen = Screen(daemon, "run", "--stdin-open", "--", "sh", "-c", "echo ready; cat; echo done")
    try:
        screen.until(rb"ready")
        assert not screen.raw()  # pipes take lines: this terminal edits and echoes them
        screen.type(b"typed-line\r")
        screen.until(rb"typed-line\r?\n(.|\n)*typed-line")
        screen.type(b"\x04")
        assert screen.wait() == 0 and b"done" in screen.seen
    finally:
        screen.close()

    # `write` from a regular file (a file epoll cannot watch).
    started = hostcapctl("run", "--detach", "--stdin-open", "--", "cat", tenant=daemon.socket)
    spawn_id = started.stdout.strip()
    source = tmp_path / "input.txt"
    source.write_bytes(b"from a file\n" * 10000)
    with source.open("rb") as stdin:
        written = subprocess.run(
            [sys.executable, "-m", "hostcap.ctl.main", "--socket", str(daemon.socket),
             "write", spawn_id, "--close", "--json"],
            stdin=stdin, capture_output=True, cwd=REPO, timeout=60,
        )  # fmt: skip
    assert written.returncode == 0, written.stderr
    assert json.loads(written.stdout)["bytes_written"] == 120000
