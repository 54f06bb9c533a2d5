"""Refusing a call: audit it as policy.deny, then abort with the typed status."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import NoReturn

from hostcapd.audit import AuditUnavailable
from hostcapd.errors import Refusal, shorten
from hostcapd.frontend.context import Context
from hostcapd.process.request import MAX_LABEL_KEY, MAX_LABEL_VALUE, MAX_LABELS, MAX_REQUEST_ID
from hostcapd.tenant import TenantRuntime

log = logging.getLogger("hostcapd.frontend")


def bounded_labels(labels: Mapping[str, str]) -> dict[str, str]:
    """At most MAX_LABELS labels, keys and values cut to their bounds."""
    return {
        shorten(k, MAX_LABEL_KEY): shorten(v, MAX_LABEL_VALUE)
        for k, v in list(labels.items())[:MAX_LABELS]
    }


async def refuse(
    context: Context,
    runtime: TenantRuntime,
    method: str,
    refusal: Refusal,
    labels: Mapping[str, str],
    request_id: str,
) -> NoReturn:
    try:
        runtime.audit.write(
            "policy.deny",
            tenant=runtime.name,
            method=method,
            reason=refusal.reason,
            message=refusal.message,
            # The request may be refused for these very fields: record them bounded.
            labels=bounded_labels(labels),
            request_id=shorten(request_id, MAX_REQUEST_ID),
        )
    except AuditUnavailable as error:
        log.error("could not audit a refusal: %s", error)
    await context.abort_with_status(refusal.wire().to_status())  # type: ignore[attr-defined]
    raise AssertionError("abort_with_status returned")
