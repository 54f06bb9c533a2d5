"""The init's exit record as the spawner parses it: exactly one valid record."""

from __future__ import annotations

import dataclasses
import errno
import os
import struct

import pytest
from hostcapd import childsetup
from hostcapd.spawner import init_report
from support.childplans import bare_plan

CLONE_NEWPID = 0x20000000

RECORD = struct.Struct("=9q")


def record(status: int = 0x0F00, magic: int = init_report.EXIT_MAGIC) -> bytes:
    return RECORD.pack(magic, status, 1_500_000, 250_000, 2048, 3, 4, 5, 6)


def test_a_record_is_the_commands_status_and_rusage() -> None:
    parsed = init_report.parse(record())
    assert parsed == init_report.CommandExit(0x0F00, 1.5, 0.25, 2048, 3, 4, 5, 6)


def test_anything_but_one_valid_record_is_none() -> None:
    assert init_report.parse(b"") is None
    assert init_report.parse(record()[:-1]) is None
    assert init_report.parse(record() + b"x") is None
    assert init_report.parse(record(magic=0x31534348)) is None  # the set-up record's magic
    assert init_report.parse(record(status=-1)) is None
    assert init_report.parse(record(status=0x10000)) is None


def test_read_and_close_reads_what_an_init_wrote_and_closes() -> None:
    r, w = os.pipe2(os.O_CLOEXEC)
    os.write(w, record(status=9))
    os.close(w)
    parsed = init_report.read_and_close(r)
    assert parsed is not None and os.WIFSIGNALED(parsed.status) and os.WTERMSIG(parsed.status) == 9
    try:
        os.fstat(r)
    except OSError:
        pass
    else:
        raise AssertionError("the report pipe was not closed")


def test_an_init_killed_before_its_record_gives_none() -> None:
    r, w = os.pipe2(os.O_CLOEXEC)
    os.close(w)
    assert init_report.read_and_close(r) is None


needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="a pid namespace needs root")

BASE = bare_plan(
    exe_path=b"/bin/sh",
    argv=[b"sh", b"-c", b"exit 3"],
    envp=[],
    umask=0o022,
    clone_flags=CLONE_NEWPID,
    no_new_privs=True,
    pdeathsig=9,
    init=True,
)


def test_an_init_needs_a_pid_namespace() -> None:
    with pytest.raises(ValueError, match="CLONE_NEWPID"):
        childsetup.spawn(dataclasses.replace(BASE, clone_flags=0))


@needs_root
def test_an_init_reports_the_commands_exit_on_its_pipe() -> None:
    pid, report = childsetup.spawn(BASE)
    _, status = os.waitpid(pid, 0)
    command = init_report.read_and_close(report)
    assert os.waitstatus_to_exitcode(status) == 3
    assert command is not None and os.waitstatus_to_exitcode(command.status) == 3


@needs_root
def test_a_signalled_command_is_told_by_the_record() -> None:
    pid, report = childsetup.spawn(dataclasses.replace(BASE, argv=[b"sh", b"-c", b"kill -TERM $$"]))
    _, status = os.waitpid(pid, 0)
    command = init_report.read_and_close(report)
    assert os.waitstatus_to_exitcode(status) == 128 + 15  # a pid 1 cannot die by it
    assert command is not None and os.waitstatus_to_exitcode(command.status) == -15


@needs_root
def test_the_step_that_failed_comes_from_the_commands_process() -> None:
    with pytest.raises(childsetup.SetupError) as failed:
        childsetup.spawn(dataclasses.replace(BASE, exe_path=b"/nonexistent/cmd"))
    assert failed.value.args == ("exec", errno.ENOENT)
    cancel = os.eventfd(1, os.EFD_CLOEXEC)
    try:
        with pytest.raises(childsetup.SetupError) as cancelled:
            childsetup.spawn(dataclasses.replace(BASE, cancel_fd=cancel))
    finally:
        os.close(cancel)
    assert cancelled.value.args[0] == "cancelled"
