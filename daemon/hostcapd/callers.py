"""Who asked: the caller of the call being served, for its audit records.

The root end of a channel (`hostcapd.bridge.relay.Bridge`) serves each call
in a task of its own and sets `CURRENT` there to the caller its front-end
relayed with it (SO_PEERCRED of the client's connection,
`hostcapd.frontend.peers`); tasks the call starts inherit it. The records a
call causes (`process.exec`, `policy.deny`, `file.write`, `environment.*`,
`admin.call`, `daemon.reload`) name it in their `caller` field
(`caller_field()`). It is the front-end's word, recorded and never relied on:
the tenant is the channel's (docs/decisions/0033-who-asked.md).
"""

from __future__ import annotations

from contextvars import ContextVar
from typing import Any

from hostcapd.bridge.values import Caller

#: The caller of the call this task serves; None outside a call, or when
#: its front-end does not record callers.
CURRENT: ContextVar[Caller | None] = ContextVar("hostcapd_caller", default=None)


def caller_field(caller: Caller | None = None) -> dict[str, Any]:
    """{"caller": {uid, gid, pid}} of `caller` (else the current call's), or
    {} when none is known: the keyword argument of an audit record."""
    if caller is None:
        caller = CURRENT.get()
    return {} if caller is None else {"caller": caller.record()}
