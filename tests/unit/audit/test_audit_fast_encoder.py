"""The canonical form's fast encoder (msgspec) writes exactly the bytes of the
json module's encoder, the documented rule, wherever it is used, and hands
everything else to the json encoder: floats repr() writes with an exponent,
NaN and infinities, keys that are not text, types json refuses. A log written
before it verifies after it, and the other way round."""

from __future__ import annotations

import hashlib
import json
import math
import random
import struct
from typing import Any

import pytest
from audit_helpers import SettingsFactory, exec_fields, exit_fields
from hostcap_proto import audit as contract
from hostcap_proto.audit import canonical
from hostcapd.audit import AuditLog


def documented(value: Any) -> bytes:
    """The canonical form as the package's docstring states it."""
    text = json.dumps(
        value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    )
    return text.encode("utf-8")


def documented_line(record: dict[str, Any]) -> tuple[str, bytes]:
    unsealed = {k: v for k, v in record.items() if k != "hash"}
    digest = hashlib.sha256(record["prev_hash"].encode("ascii") + documented(unsealed)).hexdigest()
    return digest, documented({**unsealed, "hash": digest}) + b"\n"


def random_floats(count: int, seed: int) -> list[float]:
    """Floats of every magnitude: random bit patterns (any exponent), and
    random mantissas with exponents around repr()'s switch to exponent form."""
    rng = random.Random(seed)
    out: list[float] = []
    while len(out) < count:
        if rng.random() < 0.5:
            bits = rng.getrandbits(64)
        else:
            exponent = rng.randint(1023 - 20, 1023 + 60)  # ~1e-6 .. ~1e18
            bits = (rng.getrandbits(1) << 63) | (exponent << 52) | rng.getrandbits(52)
        value = struct.unpack("<d", bits.to_bytes(8, "little"))[0]
        if math.isfinite(value):
            out.append(value)
    return out


def edge_floats() -> list[float]:
    """Each side of repr()'s switches (1e-4, 1e16), and short decimals."""
    out = [0.0, -0.0, 1.0, 0.1, 600.0, 0.0024449999999999997, 5e-324, 1.7976931348623157e308]
    for bound in (1e-4, 1e16, 1e15, 1e-3):
        for direction in (0.0, math.inf):
            value = bound
            for _ in range(200):
                value = math.nextafter(value, direction)
                out.extend((value, -value))
    out.extend(round(random.Random(3).random() * 10**e, 6) for e in range(-6, 18))
    return out


def test_every_float_is_written_as_the_json_encoder_writes_it() -> None:
    for value in [*edge_floats(), *random_floats(20000, 35)]:
        record = {"v": value, "n": [value], "d": {"x": value}}
        assert contract.canonical_bytes(record) == documented(record), repr(value)


def test_the_fast_encoder_takes_exactly_the_floats_it_writes_alike() -> None:
    fast = canonical._FAST
    for value in [*edge_floats(), *random_floats(20000, 36)]:
        alike = fast.encode(value) == documented(value)
        if canonical._plain(value):
            assert alike, repr(value)
        # Outside its range it is not taken, whether or not it would agree.
        assert canonical._plain(value) == (value == 0.0 or 1e-4 <= abs(value) < 1e16)
    for value in (math.nan, math.inf, -math.inf):
        assert not canonical._plain(value)
        assert not canonical._plain({"a": [value]})


TEXTS = ["plain", "héllo", "✓", "\U0001f600", "tab\there", "nl\nx", "cr\rx", '"q"', "back\\slash",
         "\u2028\u2029", "\x00\x1f\x7f", "\x08\x0c", "", "hash", "zzz", "ü/é", "日本語", "\ufeff",
         "</script>", "a" * 300]  # fmt: skip
NUMBERS: list[Any] = [0, -1, 1, 2**31, 2**63 - 1, 2**63, -(2**63), 2**64, 10**30, -(10**40),
                      10**400, 0.1, 1e-06, 5e-05, 1e-4, 1e300, 1e16, 1e15, -0.0, 3.0, 600.0,
                      True, False, None]  # fmt: skip
KEYS = ["a", "gid", "ha", "has", "hash2", "hasi", "i", "z", "ü", "é", "\U0001f600", "H", "",
        "A", "~", "\x7f", "日"]  # fmt: skip


def awkward(rng: random.Random, depth: int = 0) -> Any:
    choice = rng.random()
    if depth < 3 and choice < 0.15:
        return [awkward(rng, depth + 1) for _ in range(rng.randint(0, 4))]
    if depth < 3 and choice < 0.3:
        return {rng.choice(KEYS + TEXTS): awkward(rng, depth + 1) for _ in range(rng.randint(0, 4))}
    if choice < 0.65:
        return rng.choice(TEXTS)
    return rng.choice(NUMBERS)


def awkward_records(count: int, seed: int) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    records = []
    for index in range(count):
        record: dict[str, Any] = {
            "schema": "hostcapd.audit/v1",
            "event": "process.exec",
            "seq": index + 1,
            "prev_hash": hashlib.sha256(str(index).encode()).hexdigest(),
        }
        for _ in range(rng.randint(0, 8)):
            record[rng.choice(KEYS)] = awkward(rng)
        records.append(record)
    return records


def test_awkward_records_keep_the_documented_bytes_and_hash() -> None:
    plain = 0
    for record in awkward_records(3000, 2026):
        assert contract.canonical_bytes(record) == documented(record)
        sealed, line = contract.sealed_line(record)
        assert (sealed["hash"], line) == documented_line(record)
        assert contract.record_hash(record) == sealed["hash"]
        if contract.fast_encodable(record):
            plain += 1
            # What the writer vouches for is sealed unwalked, to the same bytes.
            assert contract.sealed_line(record, plain=True) == (sealed, line)
    assert 300 < plain < 3000  # both paths were taken


def test_what_json_refuses_stays_refused() -> None:
    class Text(str):
        pass

    good = {"schema": "hostcapd.audit/v1", "event": "daemon.start", "seq": 1, "prev_hash": "0" * 64}
    for bad in (
        {**good, "v": math.nan},
        {**good, "v": [math.inf]},
        {**good, "v": {"x": -math.inf}},
        {**good, "v": b"bytes"},
        {**good, "v": {1, 2}},
        {**good, "v": "\udc80"},
        {**good, "v": {"\ud800": 1}},
    ):
        with pytest.raises(contract.AuditRecordError):
            contract.canonical_bytes(bad)
        with pytest.raises(contract.AuditRecordError):
            contract.sealed_line(bad)
    # A str subclass, a tuple and a non-text nested key: json's bytes.
    for odd in ({**good, "v": Text("t")}, {**good, "v": ("a", 1)}, {**good, "v": {7: "x"}}):
        assert contract.canonical_bytes(odd) == documented(odd)
        assert contract.sealed_line(odd) == (contract.seal(odd), documented_line(odd)[1])
    cyclic: dict[str, Any] = dict(good)
    cyclic["self"] = cyclic
    with pytest.raises(contract.AuditRecordError):
        contract.canonical_bytes(cyclic)


def test_the_fast_check_vouches_only_for_plain_bodies() -> None:
    fields = exit_fields("s")
    body, plain = contract.checked_event_fields("process.exit", fields)
    assert plain and canonical._plain(body)
    # A rusage below 0.1 ms, a NaN: the model decides, and the writer walks it.
    for value in (5e-05, 1e16, math.nan):
        odd = {**fields, "duration_s": value}
        assert contract.fast_event_fields("process.exit", odd) is None
        if math.isfinite(value):
            body, plain = contract.checked_event_fields("process.exit", odd)
            assert not plain and body["duration_s"] == value


def test_argv_sha256_is_the_documented_digest() -> None:
    for argv in ([], ["sh", "-c", "x"], ["", ""], ["é\udcff", "a\0b"], ["x"] * 1000):
        raw = b"".join(a.encode("utf-8", "surrogateescape") + b"\0" for a in argv)
        assert contract.argv_sha256(argv) == hashlib.sha256(raw).hexdigest()
    assert contract.argv_sha256(["sh", "-c", "x"]) == hashlib.sha256(b"sh\0-c\0x\0").hexdigest()


async def test_the_writer_stores_awkward_values_by_the_documented_rule(
    make_settings: SettingsFactory,
) -> None:
    settings = make_settings()
    log = AuditLog.open(settings, "boot-awkward")
    rng = random.Random(9)
    for index in range(200):
        spawn = f"s{index}"
        labels = {rng.choice(KEYS) or "k": rng.choice(TEXTS) for _ in range(rng.randint(0, 4))}
        argv = [rng.choice(TEXTS) for _ in range(rng.randint(1, 5))]
        limits = {"cpu_seconds": rng.choice([600.0, 1e-05, 0.5, 1e17]), "pids": 2**40}
        await log.write_durable(
            "process.exec", **exec_fields(spawn, argv=argv, labels=labels, limits=limits)
        )
        rusage = {
            "user_seconds": rng.choice([0.0, 5e-05, 0.0024449999999999997, 12.5]),
            "system_seconds": rng.choice([0.0, 1e-06, 0.001]),
            "max_rss_bytes": rng.choice([0, 2**70]),
        }
        log.write(
            "process.exit",
            **exit_fields(spawn, labels=labels, rusage=rusage, duration_s=rng.random() / 1000),
        )
    await log.close()
    lines = [raw + b"\n" for raw in settings.path.read_bytes().split(b"\n")[:-1]]
    assert len(lines) == 400
    for raw in lines:
        record = json.loads(raw)
        assert documented_line(record) == (record["hash"], raw)
    report = contract.verify_files([settings.path])
    assert report.failure is None, report.failure
