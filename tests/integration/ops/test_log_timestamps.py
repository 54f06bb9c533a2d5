"""Daemon log lines carry a timestamp when stderr is a file or a terminal,
and none when it is the journal (JOURNAL_STREAM names stderr's own file), which
gets a syslog priority instead."""

from __future__ import annotations

import datetime as dt
import os
import re
from collections.abc import Callable
from pathlib import Path

from ops_support import hostcapctl, wait_admin, wait_until
from support.daemon import Daemon

STAMPED = re.compile(
    r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z) hostcapd INFO hostcapd: reloaded: "
)


def reload_line(daemon: Daemon) -> str:
    assert hostcapctl("reload", admin=daemon.admin_socket).returncode == 0
    wait_until(lambda: "reloaded: " in daemon.output(), "the reload is logged")
    return next(line for line in daemon.output().splitlines() if "reloaded: " in line)


def test_log_lines_to_a_file_are_stamped(daemon: Daemon) -> None:
    wait_admin(daemon)
    before = dt.datetime.now(dt.UTC) - dt.timedelta(seconds=5)
    line = reload_line(daemon)
    found = STAMPED.match(line)
    assert found, line
    stamp = dt.datetime.strptime(found.group(1), "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=dt.UTC)
    assert before <= stamp <= dt.datetime.now(dt.UTC) + dt.timedelta(seconds=5)


def test_log_lines_to_the_journal_are_not(
    start_daemon: Callable[..., Daemon], state_dir: Path
) -> None:
    # The support daemon's stderr is this file: make JOURNAL_STREAM name it,
    # as systemd names the journal's stream.
    log = state_dir / "daemon.log"
    log.touch()
    st = os.stat(log)
    daemon = wait_admin(start_daemon(env={"JOURNAL_STREAM": f"{st.st_dev}:{st.st_ino}"}))
    # With its syslog priority (6: info) first, which journald takes off.
    assert reload_line(daemon).startswith("<6>hostcapd INFO hostcapd: reloaded: ")


def test_a_journal_stream_of_another_file_is_not_the_journal(
    start_daemon: Callable[..., Daemon],
) -> None:
    daemon = wait_admin(start_daemon(env={"JOURNAL_STREAM": "1:1"}))
    assert STAMPED.match(reload_line(daemon))
