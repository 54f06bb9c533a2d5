"""hostcap: the engine side of hostcap.

An engine registers tools, connects to hostcapd as its ToolHost, and
dispatches the model's tool calls through one fixed pipeline (grant,
effective arguments, validation, guardrails, contract admission, approval,
the one host call, output mapping, bounding, untrusted marking):

    async with hostcap.connect(".hostcap/run/dev.sock") as host:
        registry = hostcap.create_tool_registry(tools=hostcap.BUILTIN_TOOLS, host=host)
        outcome = await registry.dispatch(hostcap.ToolCall(id, name, args), ctx)
        place_in_tool_message(outcome.tool_result.unwrap())
"""

from hostcap import approval
from hostcap.approval import (
    ApprovalPolicy,
    PermissionMode,
    ToolApprovalContext,
    ToolApprovalRequest,
)
from hostcap.bounding import DEFAULT_TOOL_RESULT_LIMITS, ToolResultLimits
from hostcap.builtins import BUILTIN_TOOLS
from hostcap.contract import Contract
from hostcap.dispatch_context import OutputChunk
from hostcap.errors import (
    HostError,
    ToolArgsInvalidError,
    ToolCancelledError,
    ToolDeniedByUserError,
    ToolDispatchError,
    ToolDispatchVetoedError,
    ToolExecutionError,
    ToolHostDeniedError,
    ToolPolicyError,
    ToolRegistrationError,
    ToolUnavailableError,
    UnknownToolError,
)
from hostcap.events import ToolEvent
from hostcap.grpc_host import GrpcToolHost, HostUnreachableError, connect
from hostcap.host import HostCallOptions, StaticToolHost, ToolHost
from hostcap.output_store import LocalOutputStore, MemoryOutputStore
from hostcap.policy import PolicyTarget, ToolPolicy, ToolPolicyClass
from hostcap.registry import (
    DispatchContext,
    DispatchExplanation,
    ToolCall,
    ToolDispatchOutcome,
    ToolNodeConfig,
    ToolRegistry,
    create_tool_registry,
)
from hostcap.tooldef import ToolDef, ToolRunContext
from hostcap.untrusted import Untrusted

__all__ = [
    "BUILTIN_TOOLS",
    "DEFAULT_TOOL_RESULT_LIMITS",
    "ApprovalPolicy",
    "Contract",
    "DispatchContext",
    "DispatchExplanation",
    "GrpcToolHost",
    "HostCallOptions",
    "HostError",
    "HostUnreachableError",
    "LocalOutputStore",
    "MemoryOutputStore",
    "OutputChunk",
    "PermissionMode",
    "PolicyTarget",
    "StaticToolHost",
    "ToolApprovalContext",
    "ToolApprovalRequest",
    "ToolArgsInvalidError",
    "ToolCall",
    "ToolCancelledError",
    "ToolDef",
    "ToolDeniedByUserError",
    "ToolDispatchError",
    "ToolDispatchOutcome",
    "ToolDispatchVetoedError",
    "ToolEvent",
    "ToolExecutionError",
    "ToolHost",
    "ToolHostDeniedError",
    "ToolNodeConfig",
    "ToolPolicy",
    "ToolPolicyClass",
    "ToolPolicyError",
    "ToolRegistrationError",
    "ToolRegistry",
    "ToolResultLimits",
    "ToolRunContext",
    "ToolUnavailableError",
    "UnknownToolError",
    "Untrusted",
    "approval",
    "connect",
    "create_tool_registry",
]
