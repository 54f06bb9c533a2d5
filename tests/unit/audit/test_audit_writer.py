"""The audit writer: chain continuity across reopen and rotation, durability
(write_durable waits for a real fsync; concurrent ones share it), file mode
and group, one writer at a time, redaction inside write, subscribers."""

from __future__ import annotations

import asyncio
import grp
import json
import os
import platform
import stat
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from audit_helpers import SettingsFactory, exec_fields, exit_fields
from hostcap_proto.audit import REDACTED, AuditRecordError, argv_sha256, verify_files
from hostcapd.audit import AuditLog, AuditSubscriptionLagged, AuditUnavailable
from hostcapd.audit.files import rotated_files


def records(path: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in path.read_bytes().splitlines()]


async def test_reopen_continues_seq_and_chain(make_settings: SettingsFactory) -> None:
    s = make_settings()
    log = AuditLog.open(s, "boot-1")
    await log.write_durable("process.exec", **exec_fields("a"))
    await log.close()
    log = AuditLog.open(s, "boot-2")
    await log.write_durable("process.exit", **exit_fields("a"))
    await log.close()
    stored = records(s.path)
    assert [r["seq"] for r in stored] == [1, 2]
    assert [r["boot_id"] for r in stored] == ["boot-1", "boot-2"]
    assert stored[1]["prev_hash"] == stored[0]["hash"]
    assert verify_files([s.path]).ok


async def test_reopen_after_a_crash_mid_write_cuts_the_torn_line_and_says_so(
    make_settings: SettingsFactory,
) -> None:
    s = make_settings()
    log = AuditLog.open(s, "boot-1")
    await log.write_durable("process.exec", **exec_fields("a"))
    await log.close()
    torn = b'{"boot_id":"boot-1","event":"process.exit","event_id":"1f'
    with s.path.open("ab") as f:
        f.write(torn)
    log = AuditLog.open(s, "boot-2")
    await log.write_durable("daemon.start", version="0.1.0", tenants=["dev"])
    await log.close()
    stored = records(s.path)
    assert [r["event"] for r in stored] == ["process.exec", "audit.recover", "daemon.start"]
    assert stored[1]["torn_bytes"] == len(torn)
    report = verify_files([s.path])
    assert report.ok and report.torn_tail is None


async def test_reopen_refuses_a_log_whose_last_line_is_garbage(
    make_settings: SettingsFactory,
) -> None:
    s = make_settings()
    log = AuditLog.open(s, "boot-1")
    log.write("daemon.start", version="0.1.0")
    await log.close()
    with s.path.open("ab") as f:
        f.write(b"not a record\n")
    with pytest.raises(AuditUnavailable, match="not an audit record"):
        AuditLog.open(s, "boot-2")


# A child process in which fsync and fdatasync fail with EIO (seccomp): the
# only way write_durable can then succeed is by not waiting for the fsync.
_FSYNC_FAILS = textwrap.dedent(
    """
    import asyncio, ctypes, errno, json, os, platform, sys
    from pathlib import Path
    from hostcapd.config import AuditSettings
    from hostcapd.audit import AuditLog, AuditUnavailable

    ARCH = {"x86_64": (0xC000003E, 74, 75), "aarch64": (0xC00000B7, 82, 83)}
    arch, nr_fsync, nr_fdatasync = ARCH[platform.machine()]

    class Insn(ctypes.Structure):
        _fields_ = [("code", ctypes.c_uint16), ("jt", ctypes.c_uint8),
                    ("jf", ctypes.c_uint8), ("k", ctypes.c_uint32)]

    class Prog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_uint16), ("filter", ctypes.POINTER(Insn))]

    def fail_fsync():
        LD, JEQ, RET = 0x20, 0x15, 0x06
        program = [Insn(LD, 0, 0, 4), Insn(JEQ, 0, 4, arch), Insn(LD, 0, 0, 0),
                   Insn(JEQ, 1, 0, nr_fsync), Insn(JEQ, 0, 1, nr_fdatasync),
                   Insn(RET, 0, 0, 0x00050000 | errno.EIO), Insn(RET, 0, 0, 0x7FFF0000)]
        insns = (Insn * len(program))(*program)
        prog = Prog(len(program), insns)
        libc = ctypes.CDLL(None, use_errno=True)
        assert libc.prctl(38, 1, 0, 0, 0) == 0  # PR_SET_NO_NEW_PRIVS
        assert libc.prctl(22, 2, ctypes.byref(prog), 0, 0) == 0  # PR_SET_SECCOMP, FILTER

    async def main():
        settings = AuditSettings(path=Path(sys.argv[1]), group=None, journal="off",
                                 fsync_interval_ms=1)
        log = AuditLog.open(settings, "boot")  # creates the file, before the filter
        if sys.argv[2] == "fail":
            fail_fsync()  # the fsync thread is created later and inherits it
        go = os.eventfd(0, os.EFD_NONBLOCK)
        futures, seen = [], []
        def settled(error):  # in the turn its future is settled, before its awaiter
            seen.append((type(error).__name__ if error else None, futures[0].done()))
        try:
            _, durable = log.write_pending(
                "daemon.start", release_fd=go, settled=settled, version="x"
            )
            futures.append(durable)
            await durable
            print("durable: returned")
        except AuditUnavailable as error:
            print("durable: AuditUnavailable", error)
        print("settled:", seen)
        try:
            print("go:", os.eventfd_read(go))
        except BlockingIOError:
            print("go: never written")
        try:
            log.write("daemon.stop", version="x")
            print("write after: ok")
        except AuditUnavailable:
            print("write after: AuditUnavailable")

    asyncio.run(main())
    """
)


@pytest.mark.skipif(platform.machine() not in ("x86_64", "aarch64"), reason="syscall numbers")
@pytest.mark.parametrize("mode", ["ok", "fail"])
def test_write_durable_returns_only_after_its_fsync_succeeded(tmp_path: Path, mode: str) -> None:
    path = tmp_path / "audit.jsonl"
    result = subprocess.run(
        [sys.executable, "-c", _FSYNC_FAILS, str(path), mode],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    if mode == "ok":
        assert "durable: returned" in result.stdout
        assert "go: 1" in result.stdout  # written once, by the fsync thread
        assert "settled: [(None, True)]" in result.stdout  # once, before the await returned
        assert "write after: ok" in result.stdout
    else:
        # Its go (what a spawn's child waits on before exec) was never written.
        assert "go: never written" in result.stdout
        # The line was appended, but fsync failed: the caller is told, and the
        # log fails closed (after a failed fsync nothing unsynced can be trusted).
        assert "durable: AuditUnavailable" in result.stdout
        assert "fsync failed" in result.stdout
        assert "settled: [('AuditUnavailable', True)]" in result.stdout
        assert "write after: AuditUnavailable" in result.stdout


async def test_concurrent_durable_writes_share_fsyncs(make_settings: SettingsFactory) -> None:
    log = AuditLog.open(make_settings(), "b")
    before = log.sync_count
    await asyncio.gather(
        *(log.write_durable("process.exec", **exec_fields(f"s{i}")) for i in range(50))
    )
    syncs = log.sync_count - before
    await log.close()
    assert 1 <= syncs < 10  # group commit: one fsync covers many callers
    assert len(records(log.path)) == 50


async def test_a_durable_write_does_not_queue_behind_a_batched_fsync_in_flight(
    make_settings: SettingsFactory,
) -> None:
    """A batched fsync in flight started before the exec record was appended,
    so it cannot cover it: the durable write starts its own at once, through
    the log's other open file description (each fsync sees the writeback
    errors of what it waited on), and no third starts while two run."""
    log = AuditLog.open(make_settings(fsync_interval_ms=1000), "b")
    log.write("daemon.start", version="0.1.0")
    log._on_flush_timer()  # the batch window ends: its fsync starts
    assert len(log._syncs) == 1
    _, first = log.write_pending("process.exec", **exec_fields("a"))
    assert len(log._syncs) == 2
    assert sorted(slot for _, slot, _ in log._syncs.values()) == [0, 1]
    _, second = log.write_pending("process.exec", **exec_fields("b"))
    assert len(log._syncs) == 2  # it waits for one of them to end
    await asyncio.gather(first, second)
    assert log._synced >= 3
    await log.close()
    assert len(records(log.path)) == 3


async def test_no_fsync_starts_beside_one_that_carries_a_rotation(
    make_settings: SettingsFactory,
) -> None:
    """The fsync that takes a rotated-out file (and the directory's new entry)
    alone makes them durable: one started beside it could end first and mark
    the old file's records durable before they are, so a durable write waits
    for it instead of starting a second."""
    log = AuditLog.open(make_settings(max_bytes=4096, fsync_interval_ms=1000), "b")
    path = log.path
    first_inode = path.stat().st_ino
    i = 0
    while path.stat().st_ino == first_inode:
        log.write("process.exit", **exit_fields(f"s{i}"))
        i += 1
    log._on_flush_timer()  # the batch's fsync takes the retired file
    assert [rotation for _, _, rotation in log._syncs.values()] == [True]
    _, durable = log.write_pending("process.exec", **exec_fields("a"))
    assert len(log._syncs) == 1  # it waits for the rotation's fsync
    await durable
    assert log._synced == log._appended
    await log.close()


async def test_batched_writes_are_fsynced_without_a_durable_write(
    make_settings: SettingsFactory,
) -> None:
    log = AuditLog.open(make_settings(fsync_interval_ms=20), "b")
    before = log.sync_count
    log.write("daemon.start", version="0.1.0")
    # correctness deadline, generous: the batch window is 20 ms
    for _ in range(500):
        if log.sync_count > before:
            break
        await asyncio.sleep(0.01)
    assert log.sync_count > before
    await log.close()


async def test_rotation_continues_seq_prunes_and_bounds_files(
    make_settings: SettingsFactory,
) -> None:
    s = make_settings(max_bytes=4096, keep_files=3)
    log = AuditLog.open(s, "b")
    for i in range(60):
        await log.write_durable("process.exec", **exec_fields(f"s{i}"))
        log.write("process.exit", **exit_fields(f"s{i}"))
    await log.close()
    rotated = rotated_files(s.path)
    assert len(rotated) == 3
    files = [*rotated, s.path]
    for f in files:
        assert f.stat().st_size <= 4096
    assert verify_files(files).ok
    kept = [r for f in files for r in records(f)]
    assert [r["seq"] for r in kept] == list(range(kept[0]["seq"], kept[0]["seq"] + len(kept)))
    # A rotation may follow the last record (its header and the prunes it
    # caused come after it), depending on how many bytes the timestamps took.
    spawns = [r for r in kept if r["event"] not in ("audit.prune", "audit.rotate")]
    assert (spawns[-1]["event"], spawns[-1]["spawn_id"]) == ("process.exit", "s59")
    # what was removed is named in an audit.prune record, written before the removal
    assert any(r["event"] == "audit.prune" for r in kept)
    # the rotated file's name is the seq of its last record
    for f in rotated:
        assert int(f.name.rsplit(".", 1)[1]) == records(f)[-1]["seq"]


async def test_a_crash_between_rename_and_new_file_continues_from_the_rotated_file(
    make_settings: SettingsFactory,
) -> None:
    s = make_settings(max_bytes=4096)
    log = AuditLog.open(s, "b")
    for i in range(10):
        await log.write_durable("process.exec", **exec_fields(f"s{i}"))
    await log.close()
    s.path.rename(s.path.with_name(f"{s.path.name}.{records(s.path)[-1]['seq']:012d}"))
    log = AuditLog.open(s, "b2")
    await log.write_durable("daemon.start", version="0.1.0")
    await log.close()
    first = records(s.path)[0]
    assert first["event"] == "audit.rotate"
    assert verify_files([*rotated_files(s.path), s.path]).ok


async def test_files_get_the_configured_mode_and_group(make_settings: SettingsFactory) -> None:
    try:
        adm = grp.getgrnam("adm").gr_gid
    except KeyError:
        pytest.skip("no adm group on this host")
    if os.geteuid() != 0:
        pytest.skip("chown to another group needs root")
    s = make_settings(group="adm", file_mode=0o640, max_bytes=4096)
    s.path.parent.mkdir(parents=True)
    s.path.write_bytes(b"")
    s.path.chmod(0o666)  # an existing file with a loose mode is tightened
    log = AuditLog.open(s, "b")
    for i in range(20):
        await log.write_durable("process.exec", **exec_fields(f"s{i}"))
    await log.close()
    for f in [s.path, *rotated_files(s.path)]:
        st = f.stat()
        assert stat.S_IMODE(st.st_mode) == 0o640, f
        assert (st.st_uid, st.st_gid) == (0, adm), f


async def test_a_second_writer_is_refused(make_settings: SettingsFactory) -> None:
    s = make_settings()
    log = AuditLog.open(s, "b")
    with pytest.raises(AuditUnavailable, match="another writer"):
        AuditLog.open(s, "b2")
    await log.close()
    AuditLog.open(s, "b3")  # free again once closed


async def test_bad_fields_are_refused_and_write_nothing(make_settings: SettingsFactory) -> None:
    log = AuditLog.open(make_settings(), "b")
    with pytest.raises(AuditRecordError, match="unknown field"):
        log.write("process.exit", **exit_fields("a"), colour="red")
    with pytest.raises(AuditRecordError, match="set by the writer"):
        log.write("process.exit", **exit_fields("a"), seq=7)
    with pytest.raises(AuditRecordError, match="unknown audit event"):
        log.write("process.explode", tenant="dev")
    with pytest.raises(AuditRecordError, match="outcome"):
        log.write("process.exit", **exit_fields("a", outcome="FINE"))
    with pytest.raises(AuditRecordError, match="executable"):
        await log.write_durable("process.exec", **exec_fields("a", executable=None))
    log.write("process.exit", **exit_fields("a"))
    await log.close()
    stored = records(log.path)
    assert [r["seq"] for r in stored] == [1]


async def test_argv_is_redacted_inside_write_then_bounded(make_settings: SettingsFactory) -> None:
    log = AuditLog.open(make_settings(), "b")
    secret = "S3cr3t" * 2000  # longer than any kept argv element
    argv = ["mysql", f"--password={secret}", "-p" + secret, "x" * 10_000, "TOKEN=" + secret]
    record = await log.write_durable("process.exec", **exec_fields("a", argv=argv))
    await log.close()
    stored = records(log.path)[0]
    assert stored == record
    assert secret[:6] not in log.path.read_text()
    assert stored["argv"][:3] == ["mysql", f"--password={REDACTED}", f"-p{REDACTED}"]
    assert stored["argv"][3] == "x" * 2048 + "...[5904 chars cut]..." + "x" * 2048
    assert stored["argv"][4] == f"TOKEN={REDACTED}"
    assert stored["argv_truncated"] is True and stored["argc"] == 5
    assert stored["argv_redacted"] is True
    assert stored["argv_sha256"] == argv_sha256(argv)


async def test_the_writer_alone_sets_the_argv_digest_and_flags(
    make_settings: SettingsFactory,
) -> None:
    """A caller cannot forge them; a plain argv is stored with both flags false."""
    log = AuditLog.open(make_settings(), "b")
    forged = {"argv_sha256": "0" * 64, "argv_redacted": False, "argv_truncated": True, "argc": 1}
    plain = await log.write_durable("process.exec", **exec_fields("a", **forged))
    argv = ["sh", "-c", "API_TOKEN=1; echo payload; touch ~/x"]
    cloaked = await log.write_durable("process.exec", **exec_fields("b", argv=argv))
    denied = await log.write_durable(
        "policy.deny", tenant="dev", method="Spawn", reason="NOT_FOUND", message="m", argv=argv
    )
    await log.close()
    assert records(log.path)[:3] == [plain, cloaked, denied]
    assert plain["argv_sha256"] == argv_sha256(["git", "status", "--short"])
    assert plain["argv_redacted"] is False and plain["argv_truncated"] is False
    assert "argc" not in plain
    for record in (cloaked, denied):
        assert record["argv"] == ["sh", "-c", f"API_TOKEN={REDACTED}; echo payload; touch ~/x"]
        assert record["argv_redacted"] is True
        assert record["argv_sha256"] == argv_sha256(argv)


async def test_subscribers_receive_new_records_until_close(make_settings: SettingsFactory) -> None:
    log = AuditLog.open(make_settings(), "b")
    log.write("daemon.start", version="0.1.0")
    subscription = log.subscribe()
    await log.write_durable("process.exec", **exec_fields("a"))
    log.write("process.exit", **exit_fields("a"))
    await log.close()
    received = [r async for r in subscription]
    assert [r["event"] for r in received] == ["process.exec", "process.exit"]
    assert received == records(log.path)[1:]


async def test_a_durable_records_bookkeeping_follows_its_fsyncs_hand_over(
    make_settings: SettingsFactory,
) -> None:
    # Its fsync is handed to its thread first (the go's path); by the time
    # write_pending returns, the ledger, the subscribers and the journal
    # have it, in the chain's order, and not before it was appended.
    log = AuditLog.open(make_settings(max_bytes=4096), "b")
    subscription = log.subscribe()
    seen_at_hand_over: list[tuple[list[str], int]] = []
    submit = log._threads.submit

    def watched(job: Any, done: Any) -> None:
        ledger = [r["spawn_id"] for r in log.open_spawns()]
        seen_at_hand_over.append((ledger, subscription._queue.qsize()))
        submit(job, done)

    log._threads.submit = watched  # type: ignore[method-assign]
    spawns = [f"s{i}" for i in range(12)]  # past max_bytes: a rotation among them
    for spawn_id in spawns:
        log.write("daemon.reload", version=spawn_id)
        before = subscription._queue.qsize()
        _, durable = log.write_pending("process.exec", **exec_fields(spawn_id))
        assert not durable.done()
        assert subscription._queue.qsize() > before  # has it (and a rotation's header first)
        assert spawn_id in [r["spawn_id"] for r in log.open_spawns()]
        await durable
    assert any(spawns[0] not in ledger for ledger, _ in seen_at_hand_over)
    await log.close()
    assert rotated_files(log.path), "no rotation: this test proves less"
    received = [r async for r in subscription]
    written = {r["seq"]: r for f in [*rotated_files(log.path), log.path] for r in records(f)}
    assert [r["seq"] for r in received] == list(range(1, len(received) + 1))
    assert received == [written[r["seq"]] for r in received]


async def test_a_lagging_subscriber_is_told_instead_of_slowing_the_writer(
    make_settings: SettingsFactory,
) -> None:
    log = AuditLog.open(make_settings(), "b")
    subscription = log.subscribe(max_queue=3)
    for i in range(10):
        log.write("daemon.reload", version=str(i))
    got = [await subscription.__anext__() for _ in range(3)]
    assert [r["version"] for r in got] == ["0", "1", "2"]
    with pytest.raises(AuditSubscriptionLagged):
        await subscription.__anext__()
    await log.close()
    assert len(records(log.path)) == 10


async def test_writing_after_close_is_refused(make_settings: SettingsFactory) -> None:
    log = AuditLog.open(make_settings(), "b")
    await log.close()
    with pytest.raises(AuditUnavailable, match="closed"):
        log.write("daemon.stop", version="0.1.0")
    with pytest.raises(AuditUnavailable, match="closed"):
        await log.write_durable("process.exec", **exec_fields("a"))


def test_write_outside_an_event_loop_syncs_at_once(make_settings: SettingsFactory) -> None:
    log = AuditLog.open(make_settings(), "b")
    before = log.sync_count
    log.write("daemon.start", version="0.1.0")
    assert log.sync_count == before + 1
    asyncio.run(log.close())


async def test_a_refused_argv_far_past_any_exec_is_recorded_bounded(
    make_settings: SettingsFactory,
) -> None:
    """A refusal's argv may be larger than any exec's (TOO_LARGE): an element
    that could never run is named by its size, redaction never runs over
    megabytes, and the digest is still of the whole argv."""
    log = AuditLog.open(make_settings(), "b")
    argv = ["tool", "x" * 300_000, "--token", "s3cr3t", *(["y" * 100] * 5000)]
    denied = await log.write_durable(
        "policy.deny", tenant="dev", method="Run", reason="TOO_LARGE", message="m", argv=argv
    )
    await log.close()
    assert denied["argv"][:4] == ["tool", "...[300000 chars not recorded]...", "--token", REDACTED]
    assert sum(map(len, denied["argv"])) <= 64 * 1024
    assert denied["argv_truncated"] is True and denied["argc"] == len(argv)
    assert denied["argv_redacted"] is True
    assert denied["argv_sha256"] == argv_sha256(argv)
