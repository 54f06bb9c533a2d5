"""Refusing a call: audit it as policy.deny, then abort with the typed status."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import NoReturn

import grpc

from hostcapd.audit import AuditUnavailable
from hostcapd.errors import Refusal
from hostcapd.frontend.context import Context
from hostcapd.tenant import TenantRuntime

log = logging.getLogger("hostcapd.frontend")


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
            labels=dict(labels),
            request_id=request_id,
        )
    except AuditUnavailable as error:
        log.error("could not audit a refusal: %s", error)
    await context.abort_with_status(refusal.wire().to_status())  # type: ignore[attr-defined]
    raise AssertionError("abort_with_status returned")
