"""The canonical form of a record, its hash and the chain seal, and the
strict parser of a stored line (see the package docstring for the rules)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

import msgspec

from hostcap_proto.audit.schema import _HASH, AuditRecordError

# The one encoder of the canonical form (stateless between calls, so shared).
_CANONICAL = json.JSONEncoder(
    sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
)

# The same bytes, far cheaper, for the values on which msgspec's JSON is
# byte for byte the json module's (`_plain`): sorted keys, no blanks, UTF-8
# as is, the same escapes, integers of any size, and each float as its
# repr() wherever repr() writes no exponent. Everything else (floats below
# 1e-4 or from 1e16 on, which repr() writes as `1e-05` and `1e+16` and
# msgspec as `0.00001` and `1e16`; NaN and infinities, which msgspec writes
# as null where the canonical form has none; keys that are not text; types
# msgspec knows and json refuses) takes the json encoder, so the bytes (and
# the errors) are always the canonical form's.
_FAST = msgspec.json.Encoder(order="sorted")
_FAST_ERRORS = (TypeError, ValueError, OverflowError, msgspec.EncodeError)


def _plain(value: Any) -> bool:
    """Whether msgspec writes `value` exactly as `_CANONICAL` does: dicts with
    text keys, lists, text, ints, bools, None, and floats that are 0 or have
    a magnitude in [1e-4, 1e16) (NaN and infinities fail the comparison)."""
    kind = type(value)
    if kind is dict:
        for key, item in value.items():
            if type(key) is not str:
                return False
            kind = type(item)
            if kind is not str and kind is not int and kind is not bool and not _plain(item):
                return False
        return True
    if kind is str or kind is int or kind is bool or value is None:
        return True
    if kind is float:
        return bool(value == 0.0 or 1e-4 <= abs(value) < 1e16)
    if kind is list:
        for item in value:
            kind = type(item)
            if kind is not str and kind is not int and kind is not bool and not _plain(item):
                return False
        return True
    return False


def fast_encodable(*values: Mapping[str, Any]) -> bool:
    """Whether the fast encoder writes each of `values` exactly as the json
    encoder does (`sealed_line(..., plain=True)` may take them; a cycle is
    the json encoder's to refuse)."""
    try:
        return all(_plain(value) for value in values)
    except RecursionError:
        return False


def _encode(value: Mapping[str, Any]) -> bytes:
    """The canonical JSON of `value` as UTF-8; raises what the json encoder
    raises (or UnicodeEncodeError for a lone surrogate)."""
    if fast_encodable(value):
        return _FAST.encode(value)
    return _CANONICAL.encode(value).encode("utf-8")


def canonical_bytes(record: Mapping[str, Any]) -> bytes:
    """The canonical serialisation of `record` (without the trailing newline)."""
    try:
        return _encode(record)
    except (*_FAST_ERRORS, UnicodeEncodeError) as error:
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


def sealed_line(record: Mapping[str, Any], *, plain: bool = False) -> tuple[dict[str, Any], bytes]:
    """``seal(record)`` and its stored line ``encode_line(seal(record))``, with
    the record encoded once instead of twice (the writer's path).

    The canonical form sorts the top-level keys, so the form without ``hash``
    and the one with it differ only by the ``"hash":...`` pair between the
    keys before and after it: both are joined from those two encodings.

    `plain`: the caller vouches that every value is of the kinds `_plain`
    accepts (the writer, for fields its fast check passed and the header it
    builds), so the record is not walked again to find out."""
    if set(map(type, record)) - {str}:
        # Keys json would convert (ints, ...) sort differently: the plain path.
        sealed = seal(record)
        return sealed, encode_line(sealed)
    prev = _prev_hash_bytes(record)
    before = {key: value for key, value in record.items() if key < "hash"}
    after = {key: value for key, value in record.items() if key > "hash"}
    try:
        if plain or fast_encodable(before, after):
            head = _FAST.encode(before)[1:-1]
            tail = _FAST.encode(after)[1:-1]
        else:
            head = _CANONICAL.encode(before)[1:-1].encode("utf-8")
            tail = _CANONICAL.encode(after)[1:-1].encode("utf-8")
    except (*_FAST_ERRORS, UnicodeEncodeError) as error:
        raise AuditRecordError(f"record is not canonical JSON: {error}") from None
    unsealed = b"{" + b",".join(part for part in (head, tail) if part) + b"}"
    digest = hashlib.sha256(prev + unsealed).hexdigest()
    pair = b'"hash":"' + digest.encode("ascii") + b'"'
    data = b"{" + b",".join(part for part in (head, pair, tail) if part) + b"}\n"
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
