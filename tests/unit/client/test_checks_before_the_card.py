"""The scope and allowlist checks come before a card (issue 34, item 6): a
write to `../reference/x.txt` used to ask the user, then fail
`path_escapes_root`. Now the host's refusal comes first and nobody is asked."""

from __future__ import annotations

import pytest
from client_support import MakeCtx
from hostcap import (
    BUILTIN_TOOLS,
    ApprovalPolicy,
    ToolCall,
    ToolHostDeniedError,
    ToolPolicy,
    ToolPolicyError,
    create_tool_registry,
)
from hostcap.approval import ApprovalCard
from hostcap.events import ToolEvent
from hostcap.testing import MemoryToolHost


class Prompt:
    def __init__(self) -> None:
        self.cards: list[ApprovalCard] = []

    async def __call__(self, card: ApprovalCard) -> str:
        self.cards.append(card)
        return "approve"


@pytest.mark.parametrize(
    ("call", "reason"),
    [
        (ToolCall("w", "write_file", {"path": "../../etc/x.txt", "content": "x"}), "path_escapes_root"),
        (ToolCall("w", "write_file", {"path": "/elsewhere/x.txt", "content": "x"}), "path_escapes_root"),
        (ToolCall("w", "write_file", {"path": ".env", "content": "x"}), "secret_path"),
        (ToolCall("r", "run_command", {"command": "echo", "args": ["x"], "cwd": "../.."}), "path_escapes_root"),
    ],
)  # fmt: skip
async def test_a_call_the_host_refuses_is_refused_before_the_card(
    call: ToolCall, reason: str, make_ctx: MakeCtx
) -> None:
    host = MemoryToolHost()
    events: list[ToolEvent] = []
    registry = create_tool_registry(tools=BUILTIN_TOOLS, host=host, on_event=events.append)
    prompt = Prompt()
    policy = ApprovalPolicy("accept-edits", prompt=prompt)
    with pytest.raises(ToolHostDeniedError) as refused:
        await registry.dispatch(call, make_ctx(approval=policy.context()))
    assert refused.value.reason == reason
    assert prompt.cards == []
    assert "approval_requested" not in [event.kind for event in events]
    assert host.fs is not None and host.fs.writes == []


async def test_a_command_off_the_allowlist_is_refused_before_the_card(make_ctx: MakeCtx) -> None:
    registry = create_tool_registry(tools=BUILTIN_TOOLS, host=MemoryToolHost())
    prompt = Prompt()
    policy = ApprovalPolicy("accept-edits", prompt=prompt)
    with pytest.raises(ToolPolicyError, match="command_not_allowed"):
        await registry.dispatch(
            ToolCall("r", "run_command", {"command": "rm", "args": ["-rf", "x"]}),
            make_ctx(approval=policy.context(), tool_policy=ToolPolicy(allowed_commands={"echo"})),
        )
    assert prompt.cards == []


async def test_a_new_file_in_scope_still_takes_its_card(make_ctx: MakeCtx) -> None:
    # Not there yet is not a refusal: the card comes, and the write runs.
    host = MemoryToolHost()
    registry = create_tool_registry(tools=BUILTIN_TOOLS, host=host)
    prompt = Prompt()
    policy = ApprovalPolicy("accept-edits", prompt=prompt)
    await registry.dispatch(
        ToolCall("w", "write_file", {"path": "Makefile", "content": "all:\n"}),
        make_ctx(approval=policy.context()),
    )
    assert len(prompt.cards) == 1
    assert host.fs is not None and host.fs.content("Makefile") == b"all:\n"
