"""Contract-mode admission: what Plan and Goal permit, decided by effect.

A contract sits on top of the permission mode and only ever restricts it.
One predicate, `contract_admission`, decides for a registered ToolDef (never
for admission metadata a caller passes in); the catalogue shown to the model
and the execution guard in `dispatch` both use it:

- a tool that writes files or session state, spawns or controls work, or
  reaches the network is denied outright (`mode_denied`);
- a command runner and an MCP tool take a card in every permission mode,
  `auto` included: what a command does is decided by the program that runs
  it, and an MCP server's own risk annotation is not evidence;
- a plugin tool is admitted only when it declares non-empty
  `plan_safe_actions` that its runtime enforces (`hostcap.plan_safe`: its
  calls get only the arms those actions allow);
- a plugin-contributed MCP tool is refused: its registration carries no
  enforced plan-safe list (its execution callback refuses a contract mode
  too, before the server is called);
- a trusted-extension tool is withheld: it executes elsewhere, so no host
  call is made for it and the permission path cannot see what it does;
- everything else reaches the ordinary permission path.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from typing import Any

from hostcap.plan_safe import enforceable
from hostcap.tooldef import ToolDef


class Contract(StrEnum):
    PLAN = "plan"
    GOAL = "goal"


class ContractEffect(StrEnum):
    """How a builtin is classified for the contract modes."""

    #: Writes files or session state, spawns or controls work, or reaches the network.
    ACTS_ON_STATE = "acts_on_state"
    #: Its effect cannot be read from the call (a command, an MCP tool).
    OPAQUE = "opaque"
    #: Reads; the ordinary permission path decides.
    ORDINARY = "ordinary"
    #: Input to a session whose program was approved when it started; a
    #: write into a shell or interpreter is decided per call (hostcap.admit).
    SESSION_INPUT = "session_input"


class Admission(StrEnum):
    DENY = "deny"
    CARD = "card"
    ORDINARY = "ordinary"


#: Every builtin's classification. A test fails when a builtin of
#: BUILTIN_TOOLS is missing here: deciding what a new builtin does to state is
#: part of adding it.
BUILTIN_CONTRACT_EFFECTS: Mapping[str, ContractEffect] = {
    "read_file": ContractEffect.ORDINARY,
    "list_directory": ContractEffect.ORDINARY,
    "git_status": ContractEffect.ORDINARY,
    "read_clipboard": ContractEffect.ORDINARY,
    "notify": ContractEffect.ORDINARY,
    "write_file": ContractEffect.ACTS_ON_STATE,
    "edit_file": ContractEffect.ACTS_ON_STATE,
    "git_commit": ContractEffect.ACTS_ON_STATE,
    "invoke_agent": ContractEffect.ACTS_ON_STATE,
    "read_media": ContractEffect.ORDINARY,
    "tool_search": ContractEffect.ORDINARY,
    "http_request": ContractEffect.ACTS_ON_STATE,
    "web_search": ContractEffect.ACTS_ON_STATE,
    "run_command": ContractEffect.OPAQUE,
    "mcp_call": ContractEffect.OPAQUE,
    "exec_command": ContractEffect.OPAQUE,
    # Reads what a session of this host printed; ending one controls work.
    "read_output": ContractEffect.ORDINARY,
    "kill_session": ContractEffect.ACTS_ON_STATE,
    # Input to a program whose start was approved (a card, in a contract). A
    # write into a shell or interpreter runs code: the contract decides each
    # such call (hostcap.admit, hostcap.approval), refused unless that
    # exact session's start was approved for it.
    "write_stdin": ContractEffect.SESSION_INPUT,
}

_ADMISSION = {
    ContractEffect.ACTS_ON_STATE: Admission.DENY,
    ContractEffect.OPAQUE: Admission.CARD,
    ContractEffect.ORDINARY: Admission.ORDINARY,
    ContractEffect.SESSION_INPUT: Admission.ORDINARY,
}


def effect_from_policy(tool: ToolDef[Any, Any]) -> ContractEffect:
    """The classification of a builtin the table does not name, read from its
    policy class, so a state-changing tool added without a row is still denied."""
    policy = tool.policy
    if policy.fs_write or policy.egress in ("http", "search") or policy.requires_gate_approval:
        return ContractEffect.ACTS_ON_STATE
    if policy.spawns_process or policy.egress == "mcp":
        return ContractEffect.OPAQUE
    return ContractEffect.ORDINARY


def builtin_effect(tool: ToolDef[Any, Any]) -> ContractEffect:
    return BUILTIN_CONTRACT_EFFECTS.get(tool.id) or effect_from_policy(tool)


def contract_admission(tool: ToolDef[Any, Any], contract: Contract | None) -> Admission:
    """What `contract` permits for the registered `tool`."""
    if contract is None:
        return Admission.ORDINARY
    match tool.source:
        case "builtin":
            return _ADMISSION[builtin_effect(tool)]
        case "mcp":
            return Admission.CARD
        case "plugin":
            # Admitted only on a declaration the runtime enforces (`hostcap.plan_safe`).
            return Admission.ORDINARY if enforceable(tool.plan_safe_actions) else Admission.DENY
        case "plugin_mcp" | "extension":
            return Admission.DENY
    return Admission.DENY  # an unknown source is never admitted
