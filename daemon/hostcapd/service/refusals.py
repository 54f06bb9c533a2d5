"""Refusing a call, for every service: audit it as policy.deny, then raise
the `Refusal`, which the channel carries to the front-end as an `Abort`
(`hostcapd.bridge.frontends`): a typed status with an ErrorInfo reason, or
gRPC's own INTERNAL or UNAVAILABLE for the transport conditions."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any, NoReturn

from hostcapd.audit import AuditLog, AuditUnavailable
from hostcapd.callers import caller_field
from hostcapd.errors import Refusal, shorten
from hostcapd.labels import MAX_REQUEST_ID, bounded_labels
from hostcapd.logsetup import RateLimited, fields

log = logging.getLogger("hostcapd.service")

#: Seconds between two log lines of one tenant's refusals for one reason.
REFUSAL_LOG_INTERVAL_S = 10.0
_logged = RateLimited(REFUSAL_LOG_INTERVAL_S)


def _log_refusal(
    tenant: str, method: str, refusal: Refusal, request_id: str, spawn_id: str
) -> None:
    left_out = _logged.allow(tenant, refusal.reason)
    if left_out is None:
        return
    log.info(
        "tenant %s: %s refused %s%s: %s%s",
        tenant,
        method,
        refusal.reason,
        f" (spawn {spawn_id})" if spawn_id else "",
        refusal.message,
        f" ({left_out} more refused for this reason since the last such line)" if left_out else "",
        extra=fields(
            tenant=tenant,
            method=method,
            reason=refusal.reason,
            spawn_id=spawn_id,
            request_id=shorten(request_id, MAX_REQUEST_ID),
            suppressed=left_out or None,
        ),
    )


def refuse(
    audit: AuditLog,
    tenant: str,
    method: str,
    refusal: Refusal,
    labels: Mapping[str, str],
    request_id: str,
    *,
    path: str | None = None,
    audited: bool = True,
    spawn_id: str = "",
    details: Mapping[str, Any] | None = None,
) -> NoReturn:
    """`audited` False for refusals not worth a line (a missing file read),
    in the audit log or the daemon's; `details`: more fields of the
    policy.deny (what a refused spawn asked for). The others are logged at
    INFO, at most one line per tenant and reason every REFUSAL_LOG_INTERVAL_S
    (the next says how many were left out)."""
    if audited:
        _log_refusal(tenant, method, refusal, request_id, spawn_id)
        fields: dict[str, Any] = {
            "tenant": tenant,
            "method": method,
            "reason": refusal.reason,
            "message": refusal.message,
            # The request may be refused for these very fields: record them bounded.
            "labels": bounded_labels(labels),
            "request_id": shorten(request_id, MAX_REQUEST_ID),
            **caller_field(),
        }
        if path is not None:
            fields["path"] = path
        if details:
            fields.update(details)
        try:
            audit.write("policy.deny", **fields)
        except AuditUnavailable as error:
            # the request is refused anyway; its own reason says more
            log.error("could not audit a refusal: %s", error)
    # Raised from here, the refusal's traceback holds this frame, whose
    # `refusal` is the refusal: a reference cycle that would keep every
    # frame below (the request, a Run's 64 MiB of stdin) alive until the
    # cyclic collector ran.
    try:
        raise refusal
    finally:
        del refusal
