"""The hash chain as hostcapctl verifies it: intact logs pass, and each kind of
tampering (edit, re-hashed edit, deletion, reordering, torn middle line,
a file missing between rotations) fails naming the first bad line and why."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest
from audit_helpers import SettingsFactory, exec_fields, exit_fields
from hostcap_proto import audit as contract
from hostcap_proto.audit import GENESIS_HASH, Problem, verify_files
from hostcap_proto.v1 import common_pb2
from hostcapd.audit import AuditLog
from hostcapd.audit.files import rotated_files


async def write_log(settings: SettingsFactory, spawns: int = 5, **overrides: object) -> Path:
    s = settings(**overrides)
    log = AuditLog.open(s, "boot-1")
    log.write(
        "daemon.start", version="0.1.0", tenants=["dev"], config_path="/etc/hostcap/hostcapd.toml"
    )
    for i in range(spawns):
        await log.write_durable("process.exec", **exec_fields(f"sp{i}"))
        log.write("process.exit", **exit_fields(f"sp{i}"))
    log.write("policy.deny", tenant="dev", method="Spawn", reason="EXECUTABLE_NOT_FOUND",
              message="nosuch not found on PATH", labels={}, request_id="r9")  # fmt: skip
    await log.close()
    return s.path


def lines(path: Path) -> list[bytes]:
    return path.read_bytes().splitlines(keepends=True)


def put(path: Path, new: list[bytes]) -> None:
    path.write_bytes(b"".join(new))


async def test_a_fresh_log_verifies_from_genesis(make_settings: SettingsFactory) -> None:
    path = await write_log(make_settings)
    report = verify_files([path])
    assert report.ok, report.failure
    assert report.records == 12
    assert (report.first_seq, report.last_seq) == (1, 12)
    assert report.anchor == "genesis"
    first = json.loads(lines(path)[0])
    assert first["prev_hash"] == GENESIS_HASH
    assert first["schema"] == "hostcapd.audit/v1"


async def test_every_line_is_canonical_and_hashes_over_prev_hash(
    make_settings: SettingsFactory,
) -> None:
    # The contract a third-party verifier implements, spelled out independently.
    import hashlib

    path = await write_log(make_settings, spawns=2)
    prev = GENESIS_HASH
    for raw in lines(path):
        record = json.loads(raw)
        body = {k: v for k, v in record.items() if k != "hash"}
        canonical = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        assert record["prev_hash"] == prev
        assert record["hash"] == hashlib.sha256(prev.encode() + canonical.encode()).hexdigest()
        full = json.dumps(record, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        assert raw == full.encode() + b"\n"
        prev = record["hash"]


async def test_non_ascii_is_stored_as_utf8_not_escaped(make_settings: SettingsFactory) -> None:
    s = make_settings()
    log = AuditLog.open(s, "b")
    await log.write_durable("process.exec", **exec_fields("u1", argv=["echo", "héllo ✓"]))
    await log.close()
    assert "héllo ✓".encode() in s.path.read_bytes()
    assert verify_files([s.path]).ok


async def test_an_edited_value_fails_naming_the_line(make_settings: SettingsFactory) -> None:
    path = await write_log(make_settings)
    content = lines(path)
    content[4] = content[4].replace(b'"exit_code":0', b'"exit_code":1')
    put(path, content)
    report = verify_files([path])
    assert report.failure is not None
    assert (report.failure.line, report.failure.problem) == (5, Problem.EDITED)
    assert report.records == 4


async def test_a_whitespace_only_edit_is_an_edit(make_settings: SettingsFactory) -> None:
    path = await write_log(make_settings)
    content = lines(path)
    content[2] = content[2].replace(b'","', b'", "', 1)
    put(path, content)
    failure = verify_files([path]).failure
    assert failure is not None
    assert (failure.line, failure.problem) == (3, Problem.EDITED)
    assert "canonical" in failure.detail


async def test_an_edit_with_a_recomputed_hash_fails_naming_the_edited_line(
    make_settings: SettingsFactory,
) -> None:
    path = await write_log(make_settings)
    content = lines(path)
    record = json.loads(content[3])
    record["argv"] = ["true"]
    content[3] = contract.encode_line(contract.seal(record))
    put(path, content)
    failure = verify_files([path]).failure
    assert failure is not None
    assert (failure.line, failure.problem) == (4, Problem.EDITED)
    assert "recomputed" in failure.detail


@pytest.mark.parametrize("index", [0, 3, 7])
async def test_a_deleted_line_fails_naming_where_it_was(
    make_settings: SettingsFactory, index: int
) -> None:
    path = await write_log(make_settings)
    content = lines(path)
    del content[index]
    put(path, content)
    failure = verify_files([path]).failure
    assert failure is not None
    assert failure.problem is Problem.DELETED
    assert failure.line == index + 1
    assert f"seq {index + 1}" in failure.detail


async def test_swapped_lines_fail_as_reordered(make_settings: SettingsFactory) -> None:
    path = await write_log(make_settings)
    content = lines(path)
    content[5], content[6] = content[6], content[5]
    put(path, content)
    failure = verify_files([path]).failure
    assert failure is not None
    assert (failure.line, failure.problem) == (6, Problem.REORDERED)
    assert "line 7" in failure.detail


async def test_a_duplicated_line_fails_as_reordered(make_settings: SettingsFactory) -> None:
    path = await write_log(make_settings)
    content = lines(path)
    content.insert(4, content[2])
    put(path, content)
    failure = verify_files([path]).failure
    assert failure is not None
    assert (failure.line, failure.problem) == (5, Problem.REORDERED)


async def test_a_torn_final_line_is_tolerated(make_settings: SettingsFactory) -> None:
    path = await write_log(make_settings)
    intact = path.read_bytes()
    path.write_bytes(intact + b'{"boot_id":"boot-1","event":"process.ex')
    report = verify_files([path])
    assert report.ok, report.failure
    assert report.records == 12
    assert report.torn_tail is not None and report.torn_tail.line == 13


async def test_a_torn_line_in_the_middle_is_not(make_settings: SettingsFactory) -> None:
    path = await write_log(make_settings)
    content = lines(path)
    content[6] = content[6][: len(content[6]) // 2]  # torn, then later records appended
    put(path, content)
    failure = verify_files([path]).failure
    assert failure is not None
    assert (failure.line, failure.problem) == (7, Problem.TORN)


async def test_a_valid_json_line_that_is_not_a_record_is_malformed(
    make_settings: SettingsFactory,
) -> None:
    path = await write_log(make_settings)
    content = lines(path)
    record = json.loads(content[1])
    del record["executable"]  # hash recomputed: only the schema can notice
    content[1] = contract.encode_line(contract.seal(record))
    put(path, content)
    failure = verify_files([path]).failure
    assert failure is not None
    assert failure.problem in (Problem.MALFORMED, Problem.EDITED)
    assert failure.line == 2


async def test_rotation_keeps_the_chain_verifiable_across_files(
    make_settings: SettingsFactory,
) -> None:
    path = await write_log(make_settings, spawns=40, max_bytes=4096, keep_files=100)
    files = [*rotated_files(path), path]
    assert len(files) > 3
    report = verify_files(files)
    assert report.ok, report.failure
    assert report.anchor == "genesis"
    # seq runs on across files; every file after the first starts with audit.rotate
    seqs = [json.loads(raw)["seq"] for f in files for raw in lines(f)]
    assert seqs == list(range(1, len(seqs) + 1))
    for before, after in itertools.pairwise(files):
        header = json.loads(lines(after)[0])
        last = json.loads(lines(before)[-1])
        assert header["event"] == "audit.rotate"
        assert header["previous_file"] == before.name
        assert (header["previous_seq"], header["previous_hash"]) == (last["seq"], last["hash"])
    # given in any order (a shell glob lists the current file first)
    assert verify_files(list(reversed(files))).ok


async def test_a_missing_middle_file_breaks_the_chain(make_settings: SettingsFactory) -> None:
    path = await write_log(make_settings, spawns=40, max_bytes=4096, keep_files=100)
    files = [*rotated_files(path), path]
    del files[2]
    failure = verify_files(files).failure
    assert failure is not None
    assert failure.problem is Problem.CHAIN_BROKEN
    assert failure.path == files[2] and failure.line == 1


async def test_the_oldest_kept_file_anchors_on_its_rotation_record(
    make_settings: SettingsFactory,
) -> None:
    path = await write_log(make_settings, spawns=40, max_bytes=4096, keep_files=2)
    files = [*rotated_files(path), path]
    assert len(files) == 3
    report = verify_files(files)
    assert report.ok, report.failure
    assert report.anchor is not None and report.anchor.startswith("rotation from ")
    # a file whose head was cut off (no genesis, no audit.rotate) is a deletion
    content = lines(files[0])
    put(files[0], content[1:])
    failure = verify_files(files).failure
    assert failure is not None
    assert (failure.line, failure.problem) == (1, Problem.DELETED)


async def test_a_torn_tail_in_a_rotated_file_is_not_tolerated(
    make_settings: SettingsFactory,
) -> None:
    path = await write_log(make_settings, spawns=20, max_bytes=4096, keep_files=100)
    files = [*rotated_files(path), path]
    files[0].write_bytes(files[0].read_bytes()[:-40])
    failure = verify_files(files).failure
    assert failure is not None
    assert (failure.path, failure.problem) == (files[0], Problem.TORN)


def test_outcomes_are_the_wire_outcome_enum() -> None:
    wire = [v.name for v in common_pb2.Outcome.DESCRIPTOR.values if v.number != 0]
    assert list(contract.OUTCOMES) == wire


def test_every_event_has_a_model_and_a_distinct_journal_message_id() -> None:
    assert set(contract.EVENT_FIELDS) == set(contract.EVENTS)
    assert set(contract.JOURNAL_MESSAGE_IDS) == set(contract.EVENTS)
    ids = list(contract.JOURNAL_MESSAGE_IDS.values())
    assert len(set(ids)) == len(ids)
    assert all(len(i) == 32 and int(i, 16) >= 0 for i in ids)


@pytest.mark.parametrize(
    "raw",
    [b"[1,2]", b'{"a":1,"a":2}', b'{"x":NaN}', b"\xff\xfe", b""],
    ids=["array", "duplicate-key", "nan", "not-utf8", "empty"],
)
def test_parse_line_refuses_what_is_not_one_json_object(raw: bytes) -> None:
    with pytest.raises(contract.AuditRecordError):
        contract.parse_line(raw)
