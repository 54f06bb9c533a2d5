"""A/B of the audit record's canonical encoding: the stdlib encoder against
orjson and msgspec, in one process, on records shaped like the daemon's.

    python -m bench.encoder_ab        (orjson and msgspec installed by hand:
                                       neither is a dependency, see below)

For each contender it first checks the bytes against today's encoder
(`hostcap_proto.audit.canonical`), on the bench's exec and exit records and
on values where JSON encoders are known to differ: a contender that differs
anywhere could not carry the hash chain without a fallback. Then it times
them in interleaved rounds (alternating order) and prints each one's median
µs per record and its speed-up.

Measured 2026-12-03 (bench/README.md, "Issue 15"): orjson 9x and msgspec 7x
faster than the stdlib encoder (22 µs per record), but both write small and
large floats differently (`2.5e-05` is `0.000025`, `1e-07` is `1e-7`) and
orjson refuses integers past 64 bits: not adopted as they are. Since
2026-12-06 (bench/README.md, "The audit records' CPU") the canonical form is
msgspec's wherever its bytes are the json encoder's, the json encoder's
elsewhere: the contender ``canonical`` (`canonical_bytes`), byte-identical
by construction; ``stdlib`` is the json encoder alone.
"""

from __future__ import annotations

import importlib
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

from hostcap_proto.audit.canonical import _CANONICAL, canonical_bytes

from bench.audit_bench import exec_fields, exit_fields

Encoder = Callable[[Any], bytes]
#: Values on which JSON encoders are known to disagree.
EDGES: tuple[Any, ...] = (
    2.5e-5,
    1e-7,
    1e16,
    -0.0,
    2**70,
    "\u2028\u2029",
    "\x00\x1f\x7f",
    "é/\\",
    {"b": 1, "a": [1.5, None, True]},
)
ROUNDS = 30
REPEAT = 10


def records() -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for i in range(50):
        common = {"seq": i, "prev_hash": "0" * 64, "time": "2026-12-03T00:00:00.000000Z"}
        out.append({**exec_fields(i), **common, "event": "process.exec"})
        out.append({**exit_fields(i, f"sp{i}"), **common, "event": "process.exit"})
    return out


def contenders() -> dict[str, Encoder]:
    found: dict[str, Encoder] = {
        "stdlib": lambda value: _CANONICAL.encode(value).encode("utf-8"),
        "canonical": canonical_bytes,
    }
    try:
        orjson: Any = importlib.import_module("orjson")
        found["orjson"] = lambda value: orjson.dumps(value, option=orjson.OPT_SORT_KEYS)
    except ImportError:
        print("encoder_ab: orjson is not installed", file=sys.stderr)
    try:
        msgspec: Any = importlib.import_module("msgspec")
        encoder = msgspec.json.Encoder(order="sorted")
        found["msgspec"] = encoder.encode
    except ImportError:
        print("encoder_ab: msgspec is not installed", file=sys.stderr)
    return found


def differences(encode: Encoder, corpus: list[Any]) -> list[str]:
    """Where `encode` does not give today's canonical bytes."""
    found = []
    for value in corpus:
        wrapped = value if isinstance(value, dict) else {"v": value}
        expected = _CANONICAL.encode(wrapped).encode("utf-8")
        try:
            got = encode(value if isinstance(value, dict) else {"v": value})
        except Exception as error:  # what the contender refuses is a difference too
            found.append(f"{value!r}: {type(error).__name__}: {error}")
            continue
        if got != expected:
            found.append(f"{value!r}: {got[:60]!r} where today writes {expected[:60]!r}")
    return found


def timed(encoders: dict[str, Encoder], corpus: list[dict[str, Any]]) -> dict[str, float]:
    """Median µs per record of each encoder, rounds interleaved."""
    samples: dict[str, list[float]] = {name: [] for name in encoders}
    for index in range(ROUNDS):
        order = list(encoders) if index % 2 else list(reversed(encoders))
        for name in order:
            encode = encoders[name]
            start = time.perf_counter_ns()
            for _ in range(REPEAT):
                for record in corpus:
                    encode(record)
            samples[name].append((time.perf_counter_ns() - start) / 1e3 / (REPEAT * len(corpus)))
    return {name: statistics.median(values) for name, values in samples.items()}


def main() -> int:
    encoders = contenders()
    corpus = records()
    for name, encode in encoders.items():
        if name == "stdlib":
            continue
        diffs = differences(encode, [*corpus, *EDGES])
        print(f"{name}: {'byte-identical' if not diffs else f'{len(diffs)} differences'}")
        for line in diffs:
            print(f"  {line}")
    med = timed(encoders, corpus)
    for name, us in med.items():
        print(
            f"{name:8s} {us:7.2f} µs/record  {med['stdlib'] / us:5.2f}x the stdlib encoder's speed"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
