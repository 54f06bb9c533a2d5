"""Guardrail tables (with accept/reject examples), contract classification,
and the catalogue exported to the model."""

from __future__ import annotations

from typing import Any

import pytest
from client_support import ALL_BUILTINS, MakeCtx
from hostcap import BUILTIN_TOOLS, ApprovalPolicy, ToolPolicy, ToolRegistry
from hostcap.contract import BUILTIN_CONTRACT_EFFECTS, Admission, Contract, contract_admission
from hostcap.policy import domain_allowed, https_host


@pytest.mark.parametrize(
    ("policy", "command", "allowed"),
    [
        (ToolPolicy(allowed_commands=["pytest"]), "pytest", True),
        (ToolPolicy(allowed_commands=["pytest"]), "pytest3", False),
        (ToolPolicy(allowed_commands=["pytest"]), "/usr/bin/pytest", False),
        (ToolPolicy(allowed_commands=["pytest"]), "PYTEST", False),
        (ToolPolicy(), "ls", False),
        (ToolPolicy(allowed_command_globs=["py*"]), "pytest", True),
        (ToolPolicy(allowed_command_globs=["py*"]), "py/../../bin/sh", False),
        (ToolPolicy(allowed_command_globs=["/opt/tools/*"]), "/opt/tools/lint", True),
        (ToolPolicy(allowed_command_globs=["npm"]), "npx", False),
    ],
)
def test_command_allowlist_examples(policy: ToolPolicy, command: str, allowed: bool) -> None:
    assert policy.command_allowed(command) is allowed


@pytest.mark.parametrize(
    ("url", "host"),
    [
        ("https://api.example.com/v1?q=1", "api.example.com"),
        ("https://API.Example.COM./", "api.example.com"),
        ("https://api.example.com:8443/", "api.example.com"),
        ("http://api.example.com/", None),
        ("ftp://api.example.com/", None),
        ("https://user:pw@api.example.com/", None),
        ("https:///nohost", None),
        ("javascript:alert(1)", None),
    ],
)
def test_https_host_examples(url: str, host: str | None) -> None:
    assert https_host(url) == host


@pytest.mark.parametrize(
    ("domain", "allowed"),
    [
        ("api.example.com", True),
        ("API.EXAMPLE.COM", True),
        ("x.api.example.com", False),
        ("example.com", False),
    ],
)
def test_domains_match_exactly(domain: str, allowed: bool) -> None:
    assert domain_allowed(ToolPolicy(allowed_domains=["api.example.com"]), domain) is allowed


def test_a_bare_string_is_not_a_list_of_commands() -> None:
    with pytest.raises(TypeError):
        ToolPolicy(allowed_commands="pytest")
    with pytest.raises(TypeError):
        ToolPolicy(allowed_commands=[""])


def test_every_builtin_has_a_contract_classification() -> None:
    # Deciding what a new builtin does to state is part of adding it.
    # (tool_search is the registry's own, beside the builtins.)
    assert {tool.id for tool in BUILTIN_TOOLS} | {"tool_search"} == set(BUILTIN_CONTRACT_EFFECTS)


@pytest.mark.parametrize("contract", list(Contract))
def test_contract_admission_of_the_builtins(contract: Contract) -> None:
    admission = {tool.id: contract_admission(tool, contract) for tool in BUILTIN_TOOLS}
    assert {k for k, v in admission.items() if v is Admission.DENY} == {
        "write_file",
        "edit_file",
        "git_commit",
        "invoke_agent",
        "http_request",
        "web_search",
        "kill_session",
    }
    assert {k for k, v in admission.items() if v is Admission.CARD} == {
        "run_command",
        "mcp_call",
        "exec_command",
    }
    assert all(contract_admission(tool, None) is Admission.ORDINARY for tool in BUILTIN_TOOLS)


def test_an_unclassified_builtin_is_classified_by_its_effect() -> None:
    import dataclasses

    from hostcap.builtins import READ_FILE, RUN_COMMAND, WRITE_FILE

    assert (
        contract_admission(dataclasses.replace(WRITE_FILE, id="edit_file"), Contract.PLAN)
        is Admission.DENY
    )
    assert (
        contract_admission(dataclasses.replace(RUN_COMMAND, id="exec"), Contract.PLAN)
        is Admission.CARD
    )
    assert (
        contract_admission(dataclasses.replace(READ_FILE, id="grep"), Contract.PLAN)
        is Admission.ORDINARY
    )


def test_model_visible_schemas_exclude_config_only_params() -> None:
    for tool in BUILTIN_TOOLS:
        properties = tool.llm_visible_params.get("properties", {})
        assert not (set(properties) & tool.config_only_params), tool.id
        assert tool.llm_visible_params.get("additionalProperties") is False
    by_id = {tool.id: tool for tool in BUILTIN_TOOLS}
    assert set(by_id["run_command"].llm_visible_params["properties"]) == {
        "command",
        "args",
        "cwd",
        "timeout_s",
    }
    assert by_id["run_command"].llm_visible_params["required"] == ["command"]
    assert set(by_id["read_file"].llm_visible_params["properties"]) == {"path"}
    assert set(by_id["write_file"].llm_visible_params["properties"]) == {"path", "content"}
    assert set(by_id["list_directory"].llm_visible_params["properties"]) == {"path"}
    assert set(by_id["git_status"].llm_visible_params["properties"]) == set()
    assert set(by_id["git_commit"].llm_visible_params["properties"]) == {"message"}
    assert set(by_id["http_request"].llm_visible_params["properties"]) == {
        "url",
        "method",
        "headers",
        "body",
    }


def test_catalogue_exports_in_openai_and_anthropic_shapes(
    registry: ToolRegistry, make_ctx: MakeCtx
) -> None:
    ctx = make_ctx(granted_tool_ids={"read_file", "run_command"})
    openai = registry.openai_tools(ctx)
    anthropic = registry.anthropic_tools(ctx)
    assert [t["function"]["name"] for t in openai] == ["read_file", "run_command"]
    assert all(t["type"] == "function" and "parameters" in t["function"] for t in openai)
    assert [t["name"] for t in anthropic] == ["read_file", "run_command"]
    assert all(set(t) == {"name", "description", "input_schema"} for t in anthropic)
    assert "env" not in anthropic[1]["input_schema"]["properties"]


def test_the_catalogue_withholds_what_the_contract_denies(
    registry: ToolRegistry, make_ctx: MakeCtx
) -> None:
    plan = make_ctx(approval=ApprovalPolicy("auto", "plan").context())
    offered = {tool.id for tool in registry.catalogue(plan)}
    assert offered == ALL_BUILTINS - {
        "write_file",
        "edit_file",
        "git_commit",
        "invoke_agent",
        "http_request",
        "web_search",
        "kill_session",
    }
    # All of them, but the egress tools: the memory host has no egress arm.
    egress = {"http_request", "web_search"}
    assert {tool.id for tool in registry.catalogue(make_ctx())} == ALL_BUILTINS - egress


def test_a_host_without_egress_does_not_offer_the_egress_tools(make_ctx: MakeCtx) -> None:
    from hostcap import create_tool_registry as create
    from hostcap.testing import MemoryEgress, MemoryToolHost

    egress = {"http_request", "web_search"}
    without = create(tools=BUILTIN_TOOLS, host=MemoryToolHost())
    assert not egress & {tool.id for tool in without.catalogue(make_ctx())}
    assert not egress & {t["function"]["name"] for t in without.openai_tools(make_ctx())}
    with_egress = create(tools=BUILTIN_TOOLS, host=MemoryToolHost(egress=MemoryEgress()))
    assert egress <= {tool.id for tool in with_egress.catalogue(make_ctx())}


def test_explain_reports_every_step_without_running(
    registry: ToolRegistry, make_ctx: MakeCtx, host: Any
) -> None:
    from hostcap import ToolCall

    explained = registry.explain(ToolCall("c1", "run_command", {"command": "echo"}), make_ctx())
    assert [step.step for step in explained.steps] == [
        "provider_executed",
        "resolve",
        "grant",
        "assemble",
        "validate",
        "guardrails",
        "contract",
        "arms",
        "approval",
        "host_call",
    ]
    assert explained.verdict == "would_run"
    denied = registry.explain(ToolCall("c2", "run_command", {"command": "rm"}), make_ctx())
    assert denied.verdict == "denied" and denied.steps[-1].step == "guardrails"
    assert getattr(denied.error, "reason", None) == "command_not_allowed"
    assert host.process.spawns == []


def test_run_commands_description_names_the_allowed_programs(make_ctx: MakeCtx) -> None:
    from hostcap import create_tool_registry as create
    from hostcap.builtins import RUN_COMMAND
    from hostcap.testing import MemoryEgress, MemoryToolHost

    registry = create(tools=BUILTIN_TOOLS, host=MemoryToolHost(egress=MemoryEgress()))
    few = make_ctx(tool_policy=ToolPolicy(allowed_commands={"pytest", "make", "ls"}))
    text = registry.description(RUN_COMMAND, few)
    assert "Allowed programs: ls, make, pytest." in text
    described = {
        t["function"]["name"]: t["function"]["description"] for t in registry.openai_tools(few)
    }
    assert described["run_command"] == text
    many = make_ctx(tool_policy=ToolPolicy(allowed_commands={f"p{i:02}" for i in range(30)}))
    assert "p23, and 6 more." in registry.description(RUN_COMMAND, many)
    none = make_ctx(tool_policy=ToolPolicy())
    assert "No program is allowed here" in registry.description(RUN_COMMAND, none)
    # A tool pinning its program says nothing of the allowlist.
    git_status = registry.get("git_status")
    assert git_status is not None
    assert registry.description(git_status, few) == git_status.description
