"""The stored bytes and the hash chain do not change: known records keep their
exact line and hash, and what the writer stores follows the documented rule
(written out again here, independently of the module) so logs written before
and after any change to the writer verify alike."""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import random
import re
import uuid
from typing import Any

import pytest
from audit_helpers import SettingsFactory, exec_fields, exit_fields
from hostcap_proto import audit as contract
from hostcapd.audit import AuditLog
from hostcapd.audit.files import rotated_files

HEADER = {
    "schema": "hostcapd.audit/v1",
    "boot_id": "1be70fa1-7377-4be5-9f3d-0bf3dd784205",
}

EXEC_FIELDS: dict[str, Any] = {
    "tenant": "dev",
    "spawn_id": "5f0c3a1e9b7d4c2a8e6f1b3d5a7c9e0f",
    "request_id": "req-7",
    "labels": {"session": "s1", "tool_call_id": "call-7"},
    "argv": ["sh", "-c", 'echo héllo ✓ "quoted" \\ tab\there'],
    "env_names": ["HOME", "LANG", "PATH"],
    "executable": {"path": "/usr/bin/dash", "sha256": "f5" * 32, "device": 65024, "inode": 260180},
    "cwd": "/srv/work",
    "uid": 65534,
    "gid": 65534,
    "limits": {"cpu_seconds": 600.0, "wall_seconds": 0.1, "memory_bytes": 4294967296, "pids": 1024},
    "protections": [
        {"name": "landlock", "applied": True, "reason": "ABI 7: fs, tcp, scope"},
        {"name": "seccomp", "applied": False, "reason": "not built", "required": False},
    ],
}
EXEC_HEADER = {
    "event": "process.exec",
    "seq": 42,
    "time": "2026-12-02T12:49:35.006190Z",
    "event_id": "5dafb4e3d67d4fe9b8f0d38ce83207cd",
    "prev_hash": "b87c798edb35709b27edc5719369490267b5579dea3a496851eb31f0348c7382",
}
EXEC_HASH = "16e02d409022af10f6a496861acda28a89bc234ad7a0b26e4b3f463e155e54b8"
EXEC_LINE = (
    '{"argv":["sh","-c","echo héllo ✓ \\"quoted\\" \\\\ tab\\there"],'
    '"boot_id":"1be70fa1-7377-4be5-9f3d-0bf3dd784205","cwd":"/srv/work",'
    '"env_names":["HOME","LANG","PATH"],"event":"process.exec",'
    '"event_id":"5dafb4e3d67d4fe9b8f0d38ce83207cd",'
    '"executable":{"device":65024,"inode":260180,"path":"/usr/bin/dash",'
    '"sha256":"f5f5f5f5f5f5f5f5f5f5f5f5f5f5f5f5f5f5f5f5f5f5f5f5f5f5f5f5f5f5f5f5"},'
    '"gid":65534,"hash":"16e02d409022af10f6a496861acda28a89bc234ad7a0b26e4b3f463e155e54b8",'
    '"labels":{"session":"s1","tool_call_id":"call-7"},'
    '"limits":{"cpu_seconds":600.0,"memory_bytes":4294967296,"pids":1024,"wall_seconds":0.1},'
    '"prev_hash":"b87c798edb35709b27edc5719369490267b5579dea3a496851eb31f0348c7382",'
    '"protections":[{"applied":true,"name":"landlock","reason":"ABI 7: fs, tcp, scope"},'
    '{"applied":false,"name":"seccomp","reason":"not built","required":false}],'
    '"request_id":"req-7","schema":"hostcapd.audit/v1","seq":42,'
    '"spawn_id":"5f0c3a1e9b7d4c2a8e6f1b3d5a7c9e0f","tenant":"dev",'
    '"time":"2026-12-02T12:49:35.006190Z","uid":65534}\n'
).encode()

EXIT_FIELDS: dict[str, Any] = {
    "tenant": "dev",
    "spawn_id": "5f0c3a1e9b7d4c2a8e6f1b3d5a7c9e0f",
    "request_id": "",
    "labels": {},
    "pid": 27566,
    "outcome": "SIGNALED",
    "exit_code": None,
    "signal": 9,
    "message": "killed by SIGKILL",
    "signal_name": "SIGKILL",
    "rusage": {
        "user_seconds": 0.0024449999999999997,
        "system_seconds": 0.0,
        "max_rss_bytes": 14618624,
        "voluntary_context_switches": 9,
    },
    "peak_memory_bytes": 774144,
    "oom_kills": None,
    "duration_s": 1e-06,
    "stdout": {"total": 55, "kept": 55, "dropped": 0},
    "stderr": {"total": 0, "kept": 0, "dropped": 0},
}
EXIT_HEADER = {
    "event": "process.exit",
    "seq": 43,
    "time": "2026-12-02T12:49:35.015339Z",
    "event_id": "f2590f96b35e426095d0fbc4804b776c",
    "prev_hash": EXEC_HASH,
}
EXIT_HASH = "212466f3dad25e37bf959b480dd248ff39f55494c8b9d2844178b716fa83fcd3"
EXIT_LINE = (
    b'{"boot_id":"1be70fa1-7377-4be5-9f3d-0bf3dd784205","duration_s":1e-06,'
    b'"event":"process.exit","event_id":"f2590f96b35e426095d0fbc4804b776c",'
    b'"hash":"212466f3dad25e37bf959b480dd248ff39f55494c8b9d2844178b716fa83fcd3",'
    b'"labels":{},"message":"killed by SIGKILL","outcome":"SIGNALED",'
    b'"peak_memory_bytes":774144,"pid":27566,'
    b'"prev_hash":"16e02d409022af10f6a496861acda28a89bc234ad7a0b26e4b3f463e155e54b8",'
    b'"request_id":"","rusage":{"block_input_ops":0,"block_output_ops":0,'
    b'"involuntary_context_switches":0,"max_rss_bytes":14618624,"system_seconds":0.0,'
    b'"user_seconds":0.0024449999999999997,"voluntary_context_switches":9},'
    b'"schema":"hostcapd.audit/v1","seq":43,"signal":9,"signal_name":"SIGKILL",'
    b'"spawn_id":"5f0c3a1e9b7d4c2a8e6f1b3d5a7c9e0f","stderr":{"dropped":0,"kept":0,"total":0},'
    b'"stdout":{"dropped":0,"kept":55,"total":55},"tenant":"dev",'
    b'"time":"2026-12-02T12:49:35.015339Z"}\n'
)

PINNED = [
    ("process.exec", EXEC_FIELDS, EXEC_HEADER, EXEC_HASH, EXEC_LINE),
    ("process.exit", EXIT_FIELDS, EXIT_HEADER, EXIT_HASH, EXIT_LINE),
]


def documented_line(record: dict[str, Any]) -> tuple[str, bytes]:
    """The hash and stored line of a record, by the rule in the module's doc,
    written out independently of the module."""

    def canonical(value: dict[str, Any]) -> bytes:
        text = json.dumps(
            value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
        )
        return text.encode("utf-8")

    unsealed = {k: v for k, v in record.items() if k != "hash"}
    digest = hashlib.sha256(record["prev_hash"].encode("ascii") + canonical(unsealed)).hexdigest()
    return digest, canonical({**unsealed, "hash": digest}) + b"\n"


@pytest.mark.parametrize(("event", "fields", "header", "digest", "line"), PINNED)
def test_a_known_record_keeps_its_line_and_hash(
    event: str, fields: dict[str, Any], header: dict[str, Any], digest: str, line: bytes
) -> None:
    body = contract.validate_event_fields(event, fields)
    record = {**HEADER, **header, **body}
    sealed, stored = contract.sealed_line(record)
    assert sealed["hash"] == digest
    assert stored == line
    assert contract.encode_line(contract.seal(record)) == line
    assert documented_line(record) == (digest, line)
    assert contract.check_line(line[:-1]) == sealed


def awkward_records(count: int) -> list[dict[str, Any]]:
    """Records with values the canonical form must get exactly right: non-ASCII
    (also outside the BMP), control characters, U+2028, escapes, floats,
    large ints, nested containers, keys on both sides of "hash"."""
    rng = random.Random(2026)
    texts = ["plain", "héllo", "✓", "\U0001f600", "tab\there", "nl\nx", '"q"', "back\\slash",
             "\u2028", "\x00\x1f", "", "hash", "zzz"]  # fmt: skip
    numbers: list[Any] = [0, -1, 2**63, 10**30, 0.1, 1e-06, 1e300, -0.0, 3.0, True, False, None]
    records = []
    for index in range(count):
        extra: dict[str, Any] = {}
        for _ in range(rng.randint(0, 6)):
            key = rng.choice(["a", "gid", "ha", "hasg", "hasi", "i", "z", "ü", "\U0001f600", "H"])
            choice = rng.random()
            if choice < 0.4:
                extra[key] = rng.choice(texts)
            elif choice < 0.7:
                extra[key] = rng.choice(numbers)
            else:
                extra[key] = {rng.choice(texts): [rng.choice(numbers), rng.choice(texts)]}
        records.append(
            {
                **HEADER,
                "event": "process.exec",
                "seq": index + 1,
                "prev_hash": hashlib.sha256(str(index).encode()).hexdigest(),
                **extra,
            }
        )
    return records


def test_sealed_line_is_the_documented_rule() -> None:
    for record in awkward_records(500):
        sealed, line = contract.sealed_line(record)
        assert (sealed["hash"], line) == documented_line(record)
        assert sealed == contract.seal(record)
        assert list(sealed) == list(contract.seal(record))  # same key order too


def test_sealed_line_refuses_what_seal_refuses() -> None:
    good = {**HEADER, "event": "daemon.start", "seq": 1, "prev_hash": "0" * 64}
    for bad in (
        {**good, "prev_hash": "nope"},
        {**good, "value": float("nan")},
        {**good, "value": object()},
        {**good, "value": "\udc80"},  # a lone surrogate has no UTF-8 form
    ):
        with pytest.raises(contract.AuditRecordError):
            contract.seal(bad)
        with pytest.raises(contract.AuditRecordError):
            contract.sealed_line(bad)


def test_a_record_with_non_text_keys_gets_the_plain_path() -> None:
    record: dict[Any, Any] = {**HEADER, "event": "daemon.start", "seq": 1, "prev_hash": "0" * 64}
    record[7] = "seven"  # json writes it as "7", which sorts differently from 7
    with pytest.raises(contract.AuditRecordError):
        contract.seal(record)  # mixed keys do not sort
    with pytest.raises(contract.AuditRecordError):
        contract.sealed_line(record)


async def test_what_the_writer_stores_follows_the_documented_rule(
    make_settings: SettingsFactory,
) -> None:
    # Small files: the audit.rotate headers are checked too.
    settings = make_settings(max_bytes=8192)
    log = AuditLog.open(settings, "boot-rule")
    argv = ["sh", "-c", 'echo héllo \U0001f600 \u2028 "x" --password=hunter2']
    for index in range(40):
        spawn = f"s{index}"
        await log.write_durable("process.exec", **exec_fields(spawn, argv=argv))
        log.write("process.exit", **exit_fields(spawn, duration_s=index / 7))
    log.write("daemon.stop", version="0.1", message="ünïcode ✓")
    await log.close()
    files = [*rotated_files(settings.path), settings.path]
    assert len(files) > 2
    # Split on newlines only: U+2028 is stored raw.
    lines = [raw + b"\n" for f in files for raw in f.read_bytes().split(b"\n")[:-1]]
    events = set()
    for raw in lines:
        record = json.loads(raw)
        events.add(record["event"])
        assert documented_line(record) == (record["hash"], raw)
    assert {"process.exec", "process.exit", "daemon.stop", "audit.rotate"} <= events
    report = contract.verify_files(files)
    assert report.failure is None, report.failure
    assert report.records == len(lines)


async def test_time_and_event_id_keep_their_form(make_settings: SettingsFactory) -> None:
    log = AuditLog.open(make_settings(), "boot-form")
    before = dt.datetime.now(dt.UTC)
    records = [log.write("process.exit", **exit_fields(f"s{i}")) for i in range(50)]
    after = dt.datetime.now(dt.UTC)
    await log.close()
    for record in records:
        assert re.fullmatch(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{6}Z", record["time"])
        written = dt.datetime.strptime(record["time"], "%Y-%m-%dT%H:%M:%S.%f%z")
        # Generous: the clock's resolution and time.time() vs datetime.now.
        assert before - dt.timedelta(seconds=1) <= written <= after + dt.timedelta(seconds=1)
        event_id = uuid.UUID(hex=record["event_id"])
        assert event_id.hex == record["event_id"]
        assert (event_id.version, event_id.variant) == (4, uuid.RFC_4122)
    assert len({r["event_id"] for r in records}) == len(records)
