"""Limits: a request may only narrow the tenant's ceiling."""

from __future__ import annotations

import math
from typing import Any

from hostcap_proto.audit import fast_encodable
from hostcap_proto.limits import ZERO_ALLOWED

from hostcapd.config import LIMIT_NAMES, Limits, TenantLimits
from hostcapd.errors import Refusal


def apply(requested: dict[str, float | int], tenant: TenantLimits) -> Limits:
    """Merge requested limits over the tenant defaults; refuse (never clamp)
    anything above the ceiling, zero, negative or not finite."""
    if not requested:  # the tenant's defaults: the same model every time
        kept = _DEFAULTS.get(id(tenant))
        if kept is not None and kept[0] is tenant:
            return kept[1]
    values: dict[str, float | int] = {}
    for name in LIMIT_NAMES:
        ceiling = getattr(tenant.ceiling, name)
        if name in requested:
            value = requested[name]
            if isinstance(value, float) and not math.isfinite(value):
                raise Refusal("LIMIT_INVALID", f"limit {name} must be a finite number")
            if value < 0 or (value == 0 and name not in ZERO_ALLOWED):
                raise Refusal("LIMIT_INVALID", f"limit {name} must be positive, got {value}")
            if value > ceiling:
                raise Refusal(
                    "LIMIT_INVALID",
                    f"limit {name}={value} is above the tenant's ceiling of {ceiling}",
                )
            values[name] = value
        else:
            values[name] = tenant.effective_default(name)
    # The model (frozen) depends on the values alone: built once for each set
    # of them, as pydantic's validation costs more than the checks above.
    key = tuple((name, type(value), value) for name, value in values.items())
    merged = _MERGED.get(key)
    if merged is None:
        if len(_MERGED) >= MERGED_KEPT:
            _MERGED.clear()
            _DUMPED.clear()
            _DEFAULTS.clear()
        merged = _MERGED[key] = Limits(**values)  # type: ignore[arg-type]
        dump = merged.model_dump(exclude_none=True)
        _DUMPED[id(merged)] = (merged, dump, fast_encodable(dump))
    if not requested:
        if len(_DEFAULTS) >= MERGED_KEPT:
            _DEFAULTS.clear()
        _DEFAULTS[id(tenant)] = (tenant, merged)
    return merged


def dumped(limits: Limits) -> dict[str, Any]:
    """`limits.model_dump(exclude_none=True)`, a fresh dict, from the dump
    made once for a merged set."""
    return dumped_plain(limits)[0]


def dumped_plain(limits: Limits) -> tuple[dict[str, Any], bool]:
    """`dumped(limits)` and whether the audit's fast encoder may take it
    (`fast_encodable`), both found once for a merged set."""
    kept = _DUMPED.get(id(limits))
    if kept is not None and kept[0] is limits:
        return dict(kept[1]), kept[2]
    dump = limits.model_dump(exclude_none=True)
    return dump, fast_encodable(dump)


#: Merged limits by their values; each one's dump by its id, and each
#: tenant's defaults by its limits' id (the object kept beside it, so that
#: its id is not reused); all cleared when full.
MERGED_KEPT = 256
_MERGED: dict[tuple[tuple[str, type, float | int], ...], Limits] = {}
_DUMPED: dict[int, tuple[Limits, dict[str, Any], bool]] = {}
_DEFAULTS: dict[int, tuple[TenantLimits, Limits]] = {}
