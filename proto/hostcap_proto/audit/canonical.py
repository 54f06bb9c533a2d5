"""The canonical form of a record, its hash and the chain seal, and the
strict parser of a stored line (see the package docstring for the rules)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

from hostcap_proto.audit.schema import _HASH, AuditRecordError

# The one encoder of the canonical form (stateless between calls, so shared).
_CANONICAL = json.JSONEncoder(
    sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
)


def canonical_bytes(record: Mapping[str, Any]) -> bytes:
    """The canonical serialisation of `record` (without the trailing newline)."""
    try:
        return _CANONICAL.encode(record).encode("utf-8")
    except (TypeError, ValueError) as error:
        raise AuditRecordError(f"record is not canonical JSON: {error}") from None


def record_hash(record: Mapping[str, Any]) -> str:
    """The ``hash`` a record must carry: sha256 over its ``prev_hash`` and its
    canonical form with the ``hash`` field left out."""
    body = {key: value for key, value in record.items() if key != "hash"}
    return hashlib.sha256(_prev_hash_bytes(record) + canonical_bytes(body)).hexdigest()


def _prev_hash_bytes(record: Mapping[str, Any]) -> bytes:
    prev = record.get("prev_hash")
    if not isinstance(prev, str) or not _HASH.fullmatch(prev):
        raise AuditRecordError("prev_hash must be 64 lowercase hex digits")
    return prev.encode("ascii")


def seal(record: Mapping[str, Any]) -> dict[str, Any]:
    """`record` (which holds ``prev_hash``) with its ``hash`` set."""
    sealed = {key: value for key, value in record.items() if key != "hash"}
    sealed["hash"] = record_hash(sealed)
    return sealed


def encode_line(record: Mapping[str, Any]) -> bytes:
    """The line as stored: canonical form plus newline."""
    return canonical_bytes(record) + b"\n"


def sealed_line(record: Mapping[str, Any]) -> tuple[dict[str, Any], bytes]:
    """``seal(record)`` and its stored line ``encode_line(seal(record))``, with
    the record encoded once instead of twice (the writer's path).

    The canonical form sorts the top-level keys, so the form without ``hash``
    and the one with it differ only by the ``"hash":...`` pair between the
    keys before and after it: both are joined from those two encodings."""
    if set(map(type, record)) - {str}:
        # Keys json would convert (ints, ...) sort differently: the plain path.
        sealed = seal(record)
        return sealed, encode_line(sealed)
    prev = _prev_hash_bytes(record)
    before = {key: value for key, value in record.items() if key < "hash"}
    after = {key: value for key, value in record.items() if key > "hash"}
    try:
        head = _CANONICAL.encode(before)[1:-1]
        tail = _CANONICAL.encode(after)[1:-1]
    except (TypeError, ValueError) as error:
        raise AuditRecordError(f"record is not canonical JSON: {error}") from None
    unsealed = "{" + ",".join(part for part in (head, tail) if part) + "}"
    try:
        digest = hashlib.sha256(prev + unsealed.encode("utf-8")).hexdigest()
        pair = f'"hash":"{digest}"'
        line = "{" + ",".join(part for part in (head, pair, tail) if part) + "}\n"
        data = line.encode("utf-8")
    except UnicodeEncodeError as error:
        raise AuditRecordError(f"record is not canonical JSON: {error}") from None
    sealed = dict(record)
    sealed.pop("hash", None)
    sealed["hash"] = digest  # last, as seal() puts it
    return sealed, data


def _no_constants(name: str) -> Any:
    raise AuditRecordError(f"{name} is not valid in an audit record")


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise AuditRecordError(f"duplicate key {key!r}")
        result[key] = value
    return result


def parse_line(raw: bytes) -> dict[str, Any]:
    """Parse one stored line (without its newline) into a record dict.

    Raises `AuditRecordError` for anything that is not a single JSON object.
    Does not check the hash or the schema (see `check_line`)."""
    try:
        value = json.loads(
            raw.decode("utf-8"), object_pairs_hook=_unique_keys, parse_constant=_no_constants
        )
    except UnicodeDecodeError:
        raise AuditRecordError("line is not UTF-8") from None
    except json.JSONDecodeError as error:
        raise AuditRecordError(f"line is not JSON ({error.msg} at column {error.colno})") from None
    if not isinstance(value, dict):
        raise AuditRecordError("line is not a JSON object")
    return value
