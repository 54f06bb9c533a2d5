"""`ToolDef`: a registered tool.

A ToolDef carries its identity, a pydantic model that validates the complete
effective arguments (and is the source of the model-visible JSON Schema, with
the config-only parameters removed), its policy class, where its guardrail
target lives, and a dispatch coroutine that performs its effect only through
the `ToolHost` it is given.
"""

from __future__ import annotations

import copy
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from functools import cached_property
from typing import Any, Generic, Literal, Protocol, TypeVar

from pydantic import BaseModel, ValidationError

from hostcap.errors import Arm, ToolArgsInvalidError, ToolRegistrationError, ToolUnavailableError
from hostcap.host import OutputHandler, ToolHost
from hostcap.ids import TOOL_ID_MAX_CHARS, is_tool_id
from hostcap.policy import FsScope, PolicyTarget, ToolPolicyClass

#: Where a tool comes from. `plugin_mcp`: an MCP tool a plugin contributes
#: (its registration carries no enforced plan-safe list); `extension`: a
#: trusted extension's tool, executed elsewhere (no host call).
ToolSource = Literal["builtin", "mcp", "plugin", "plugin_mcp", "extension"]
TOOL_SOURCES: tuple[ToolSource, ...] = ToolSource.__args__  # type: ignore[attr-defined]
JsonSchema = Mapping[str, Any]

A = TypeVar("A", bound=BaseModel)
R = TypeVar("R", bound=BaseModel)


class ModelFacing(Protocol):
    """A result that renders its own model-facing text (else it is shown as JSON)."""

    def model_text(self) -> str: ...


@dataclass(frozen=True, kw_only=True)
class ToolRunContext:
    """What a tool's dispatch sees of the call, besides its validated arguments."""

    tool_id: str
    tool_call_id: str
    node_id: str
    session_id: str | None
    fs_scope: FsScope
    #: Correlation labels every spawn and write must carry to the host (with
    #: the engine's extra `host_call_options` labels).
    labels: Mapping[str, str]
    invoke_agent: Callable[[str, Any], Awaitable[Any]] | None = None
    #: When the host call must be over (seconds since the epoch), from `host_call_options`.
    deadline: float | None = None
    #: The active contract mode ("plan", "goal"), for a tool whose execution
    #: callback refuses a contract mode itself.
    contract: str | None = None
    #: The media handles the node may read (`read_media`); None: the run's own.
    media_scope: frozenset[str] | None = None
    #: Where a command's output goes while it runs (bounded and marked by the
    #: registry), when the engine asked for it (`DispatchContext.on_output`).
    on_output: OutputHandler | None = None
    #: For `tool_search` only: the schemas of the tools deferred behind it.
    discoverable: tuple[Mapping[str, Any], ...] = ()


Dispatch = Callable[[A, ToolHost, ToolRunContext], Awaitable[R]]


@dataclass(frozen=True, kw_only=True)
class ToolDef(Generic[A, R]):
    """A tool the registry can dispatch.

    `config_only_params` name argument fields whose values come only from the
    node's config: they are removed from the model-visible schema and a model
    argument naming one is refused. `policy_target` extracts the guardrail
    target from validated arguments; a tool that spawns a process or reaches
    the network must supply it (registration refuses one that does not:
    an omitted target would silently skip the allowlist). `arms` are the
    ToolHost capabilities it needs; `credential_params` the arguments that
    may legitimately carry a secret-tainted value; `plan_safe_actions` what
    a plugin tool declares it does under a contract mode.
    """

    id: str
    source: ToolSource
    description: str
    args_model: type[A]
    result_model: type[R]
    policy: ToolPolicyClass
    dispatch: Dispatch[A, R]
    arms: frozenset[Arm] = frozenset()
    config_only_params: frozenset[str] = frozenset()
    policy_target: Callable[[A], PolicyTarget] | None = None
    #: A target read from what the host's arms know of the call's subject,
    #: synchronously and without I/O (write_stdin: the program its session
    #: runs). Used instead of `policy_target` when set.
    host_target: Callable[[A, ToolHost], PolicyTarget] | None = None
    credential_params: frozenset[str] = frozenset()
    plan_safe_actions: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not is_tool_id(self.id):
            raise ToolRegistrationError(
                f"tool id {self.id!r} must be 1-{TOOL_ID_MAX_CHARS} characters of [A-Za-z0-9_-]"
            )
        fields = set(self.args_model.model_fields)
        missing = (self.config_only_params | self.credential_params) - fields
        if missing:
            raise ToolRegistrationError(
                f"tool {self.id!r}: parameters {sorted(missing)} are not fields of {self.args_model.__name__}"
            )
        if (
            (self.policy.spawns_process or self.policy.egress)
            and self.policy_target is None
            and self.host_target is None
        ):
            # The seed's fail-open warning made fail-closed: without a target the
            # command / domain allowlist would be skipped.
            raise ToolRegistrationError(
                f"tool {self.id!r} spawns a process or reaches the network and must declare a policy_target"
            )
        if self.source not in TOOL_SOURCES:
            raise ToolRegistrationError(f"tool {self.id!r}: unknown source {self.source!r}")
        if self.source == "plugin" and not all(
            isinstance(a, str) and a for a in self.plan_safe_actions
        ):
            raise ToolRegistrationError(
                f"tool {self.id!r}: plan_safe_actions must be non-empty strings"
            )
        if self.source != "plugin" and self.plan_safe_actions:
            # Only a plugin's runtime enforces a declared list: anywhere else it
            # would be admission metadata nobody checks.
            raise ToolRegistrationError(
                f"tool {self.id!r}: plan_safe_actions are enforced only for a plugin tool"
            )

    def parse_args(self, raw: Mapping[str, Any]) -> A:
        """Validate the complete effective arguments. The error names fields and
        what is wrong with them, never the values."""
        try:
            return self.args_model.model_validate(dict(raw))
        except ValidationError as error:
            problems = []
            names = []
            for item in error.errors(include_input=False, include_url=False):
                where = json_location(item["loc"])
                names.append(where)
                problems.append(
                    f"{where}: {json_terms(item['type'], item['msg'], item.get('ctx'))}"
                )
            raise ToolArgsInvalidError("; ".join(problems), tool_id=self.id, fields=names) from None

    def target(self, args: A, host: ToolHost | None = None) -> PolicyTarget | None:
        if self.host_target is not None:
            if host is None:
                return None  # fail closed: a process tool without a target is never run
            return self.host_target(args, host)
        return self.policy_target(args) if self.policy_target is not None else None

    @cached_property
    def llm_visible_params(self) -> JsonSchema:
        """The model-visible JSON Schema: the args schema without config-only parameters."""
        schema = copy.deepcopy(self.args_model.model_json_schema())
        properties: dict[str, Any] = schema.get("properties", {})
        for name in self.config_only_params:
            properties.pop(name, None)
        if "required" in schema:
            schema["required"] = [n for n in schema["required"] if n not in self.config_only_params]
            if not schema["required"]:
                del schema["required"]
        schema["properties"] = properties
        schema.pop("title", None)
        schema["additionalProperties"] = False
        return schema


def require_arm(host: ToolHost, arm: Arm, tool_id: str) -> Any:
    """The host's `arm`, or ToolUnavailableError naming it."""
    value = getattr(host, arm, None) if arm != "invoke_agent" else None
    if value is None:
        raise ToolUnavailableError(tool_id=tool_id, arm=arm)
    return value


#: What a model sent, said in JSON's terms rather than Python's (issue 34):
#: the model wrote a JSON array, not a tuple.
_JSON_TYPES = {
    "tuple_type": "must be a JSON array",
    "list_type": "must be a JSON array",
    "set_type": "must be a JSON array",
    "dict_type": "must be a JSON object",
    "model_type": "must be a JSON object",
    "model_attributes_type": "must be a JSON object",
    "string_type": "must be a JSON string",
    "int_type": "must be a JSON integer (a number with no fraction)",
    "int_parsing": "must be a JSON integer (a number with no fraction)",
    "int_from_float": "must be a JSON integer (a number with no fraction)",
    "float_type": "must be a JSON number",
    "float_parsing": "must be a JSON number",
    "bool_type": "must be true or false",
    "bool_parsing": "must be true or false",
    "missing": "Field required (a required property is missing)",
    "extra_forbidden": "not a parameter of this tool",
}


def json_terms(kind: str, message: str, context: Mapping[str, Any] | None = None) -> str:
    """A validation problem said in JSON's terms: types by their JSON names,
    lengths in characters or items, never a Python type."""
    if kind in _JSON_TYPES:
        return _JSON_TYPES[kind]
    context = context or {}
    if kind in ("string_too_short", "string_too_long"):
        bound = (
            context.get("min_length") if kind == "string_too_short" else context.get("max_length")
        )
        if kind == "string_too_short" and bound == 1:
            return "must be a non-empty JSON string"
        which = "at least" if kind == "string_too_short" else "at most"
        return f"must be a JSON string of {which} {bound} characters"
    if kind in ("too_short", "too_long"):
        bound = context.get("min_length") if kind == "too_short" else context.get("max_length")
        which = "at least" if kind == "too_short" else "at most"
        return f"must have {which} {bound} items"
    if kind == "value_error":
        return message.removeprefix("Value error, ")
    return message.replace("Input should be", "must be").replace("String should", "must")


def json_location(loc: tuple[int | str, ...]) -> str:
    """A validation location as a JSON path: `args[2]`, `headers.Accept`."""
    where = ""
    for part in loc:
        where += f"[{part}]" if isinstance(part, int) else (f".{part}" if where else str(part))
    return where or "(arguments)"
