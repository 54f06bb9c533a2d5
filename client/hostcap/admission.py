"""The one predicate for what a dispatch context admits of a registered tool.

The catalogue offered to the model and the execution guard in `dispatch`
both ask `tool_admission`, so the model is never offered a tool whose every
call the guard would refuse, and the guard never lets through a tool the
catalogue withheld. It decides from the registered ToolDef (never from
admission metadata a caller passes in) and the approval regime:

- the contract (Plan, Goal) denies by effect (`hostcap.contract`):
  `mode_denied`;
- a read-only regime (the `ask` permission mode) refuses every governed
  call without a card, so a tool whose every call is governed (it writes,
  reaches the network, acts on the OS, runs a model-chosen program) or
  whose every call takes a contract card can only be denied: it is not
  offered, and a call naming it is refused as the mode's rejection
  (`user_rejected`, "ask mode is read-only");
- everything else is offered; a call may still take a card or be refused
  for its own target.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from hostcap.approval import ToolApprovalContext
from hostcap.contract import Admission, contract_admission
from hostcap.tooldef import ToolDef

#: The label of the read-only regime's refusal (the approval policy's own words).
READ_ONLY_LABEL = "ask mode is read-only"


class Offer(StrEnum):
    ORDINARY = "ordinary"
    CARD = "card"
    MODE_DENIED = "mode_denied"
    READ_ONLY_DENIED = "read_only_denied"

    @property
    def denied(self) -> bool:
        return self in (Offer.MODE_DENIED, Offer.READ_ONLY_DENIED)


def always_governed(tool: ToolDef[Any, Any]) -> bool:
    """Every call of `tool` is a governed action (approval decides it)."""
    policy = tool.policy
    return bool(
        policy.fs_write
        or policy.egress is not None
        or policy.os
        or (policy.spawns_process and not policy.fixed_command)
    )


def tool_admission(tool: ToolDef[Any, Any], approval: ToolApprovalContext | None) -> Offer:
    """What the approval regime (and its contract) admits of the registered `tool`."""
    contract = approval.contract if approval is not None else None
    admission = contract_admission(tool, contract)
    if admission is Admission.DENY:
        return Offer.MODE_DENIED
    if (
        approval is not None
        and approval.read_only
        and (admission is Admission.CARD or always_governed(tool))
    ):
        return Offer.READ_ONLY_DENIED
    return Offer.CARD if admission is Admission.CARD else Offer.ORDINARY
