"""The journal mirror, against a datagram socket the test binds in journald's
place: fixed MESSAGE_ID per event type, HOSTCAP_* fields, the record itself;
large records go as a sealed memfd; a journal that is absent or not reading
never blocks or fails the audit write."""

from __future__ import annotations

import array
import json
import os
import socket
import struct
from collections.abc import Iterator
from pathlib import Path

import pytest
from audit_helpers import SettingsFactory, exec_fields
from hostcap_proto.audit import JOURNAL_MESSAGE_IDS
from hostcapd.audit import AuditLog


def parse_native(data: bytes) -> dict[str, str]:
    """Decode journald's native protocol (the test's own reader)."""
    fields: dict[str, str] = {}
    pos = 0
    while pos < len(data):
        newline = data.index(b"\n", pos)
        equals = data.find(b"=", pos, newline)
        if equals >= 0:
            fields[data[pos:equals].decode()] = data[equals + 1 : newline].decode()
            pos = newline + 1
        else:
            name = data[pos:newline].decode()
            (size,) = struct.unpack("<Q", data[newline + 1 : newline + 9])
            start = newline + 9
            fields[name] = data[start : start + size].decode()
            assert data[start + size : start + size + 1] == b"\n"
            pos = start + size + 1
    return fields


@pytest.fixture
def journal(tmp_path: Path) -> Iterator[socket.socket]:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(str(tmp_path / "journal.sock"))
    sock.settimeout(10)
    yield sock
    sock.close()


def receive(sock: socket.socket) -> dict[str, str]:
    data, ancillary, _, _ = sock.recvmsg(1 << 20, socket.CMSG_SPACE(4))
    if not data and ancillary:  # a sealed memfd carrying the entry
        fds = array.array("i")
        fds.frombytes(ancillary[0][2][:4])
        with os.fdopen(fds[0], "rb") as memfd:
            memfd.seek(0)  # the sender's write left the shared offset at the end
            data = memfd.read()
    return parse_native(data)


async def test_records_are_mirrored_with_message_ids_and_fields(
    make_settings: SettingsFactory, journal: socket.socket, tmp_path: Path
) -> None:
    log = AuditLog.open(
        make_settings(journal="auto"), "boot-7", journal_socket=tmp_path / "journal.sock"
    )
    record = await log.write_durable("process.exec", **exec_fields("sp1"))
    await log.close()
    entry = receive(journal)
    assert entry["MESSAGE_ID"] == JOURNAL_MESSAGE_IDS["process.exec"]
    assert entry["HOSTCAP_EVENT"] == "process.exec"
    assert entry["HOSTCAP_SEQ"] == "1"
    assert entry["HOSTCAP_HASH"] == record["hash"]
    assert entry["HOSTCAP_TENANT"] == "dev"
    assert entry["HOSTCAP_SPAWN_ID"] == "sp1"
    assert entry["HOSTCAP_BOOT_ID"] == "boot-7"
    assert entry["SYSLOG_IDENTIFIER"] == "hostcapd"
    assert "git status --short" in entry["MESSAGE"]
    assert json.loads(entry["HOSTCAP_RECORD"]) == record


async def test_a_record_too_large_for_a_datagram_goes_as_a_memfd(
    make_settings: SettingsFactory, journal: socket.socket, tmp_path: Path
) -> None:
    journal.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)
    log = AuditLog.open(make_settings(journal="on"), "b", journal_socket=tmp_path / "journal.sock")
    labels = {f"label{i}": "v" * 1000 for i in range(400)}  # ~400 kB, above a datagram's limit
    record = await log.write_durable("process.exec", **exec_fields("big", labels=labels))
    await log.close()
    entry = receive(journal)
    assert json.loads(entry["HOSTCAP_RECORD"]) == record


async def test_a_journal_that_does_not_read_never_blocks_the_log(
    make_settings: SettingsFactory, journal: socket.socket, tmp_path: Path
) -> None:
    log = AuditLog.open(make_settings(journal="on"), "b", journal_socket=tmp_path / "journal.sock")
    for i in range(2000):
        log.write("daemon.reload", version=str(i))
    assert log.journal is not None
    assert (
        log.journal.dropped > 0
    )  # the socket's queue filled; entries were dropped, not waited for
    await log.close()
    assert len(log.path.read_bytes().splitlines()) == 2000


async def test_no_journal_is_no_problem(make_settings: SettingsFactory, tmp_path: Path) -> None:
    absent = tmp_path / "no-journal.sock"
    log = AuditLog.open(make_settings(journal="auto"), "b", journal_socket=absent)
    assert log.journal is None  # auto: mirror only when journald is present
    log.write("daemon.start", version="0.1.0")
    await log.close()
    log = AuditLog.open(make_settings(journal="on"), "b", journal_socket=absent)
    log.write("daemon.start", version="0.1.0")
    assert log.journal is not None and log.journal.dropped == 1
    await log.close()
