"""Limits: a request may only narrow the tenant's ceiling."""

from __future__ import annotations

import math

from hostcap_proto.limits import ZERO_ALLOWED

from hostcapd.config import LIMIT_NAMES, Limits, TenantLimits
from hostcapd.errors import Refusal


def apply(requested: dict[str, float | int], tenant: TenantLimits) -> Limits:
    """Merge requested limits over the tenant defaults; refuse (never clamp)
    anything above the ceiling, zero, negative or not finite."""
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
    return Limits(**values)  # type: ignore[arg-type]
