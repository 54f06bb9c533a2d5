"""Issue 16's rows, tried as a new user would, against a real hostcapd."""

from __future__ import annotations

from typing import Any

import pytest
from client_daemon import Daemon, make_ctx, require_fs
from hostcap import (
    ApprovalPolicy,
    GrpcToolHost,
    ToolCall,
    ToolDeniedByUserError,
    ToolPolicy,
    ToolRegistry,
)
from hostcap.approval import ApprovalCard

RM_POLICY = ToolPolicy(allowed_commands={"rm", "echo", "sh"})


async def test_always_for_one_rm_does_not_approve_another(
    daemon: Daemon, host: GrpcToolHost, registry: ToolRegistry
) -> None:
    await require_fs(host)
    author = make_ctx()  # the author-trust path: sets up the workspace
    for path in ("scope-test/scratch.tmp", "scope-test/keep/important.txt"):
        await registry.dispatch(
            ToolCall("it-scope-setup", "write_file", {"path": path, "content": "x\n"}), author
        )
    cards: list[ApprovalCard] = []

    async def prompt(card: ApprovalCard) -> str:
        cards.append(card)
        return "always" if len(cards) == 1 else "reject"

    policy = ApprovalPolicy("accept-edits", prompt=prompt)
    ctx = make_ctx(approval=policy.context(), tool_policy=RM_POLICY)

    def rm(call_id: str, *args: str) -> ToolCall:
        return ToolCall(
            call_id, "run_command", {"command": "rm", "args": list(args), "cwd": "scope-test"}
        )

    await registry.dispatch(rm("it-scope-1", "-f", "scratch.tmp"), ctx)
    assert not (daemon.workspace / "scope-test" / "scratch.tmp").exists()
    assert "always" in cards[0].choices and "rm -f scratch.tmp" in cards[0].scopes["always"]
    with pytest.raises(ToolDeniedByUserError) as caught:
        await registry.dispatch(rm("it-scope-2", "-rf", "keep"), ctx)
    assert caught.value.reason == "user_rejected"
    assert len(cards) == 2 and cards[1].preview.command == "rm -rf keep"
    assert (daemon.workspace / "scope-test" / "keep" / "important.txt").exists()
    assert daemon.records_for("it-scope-2") == []
    # The approved line itself stays approved: no third card.
    await registry.dispatch(rm("it-scope-3", "-f", "scratch.tmp"), ctx)
    assert len(cards) == 2
    executed: Any = daemon.records_for("it-scope-3", "process.exec")
    assert executed and executed[0]["argv"] == ["rm", "-f", "scratch.tmp"]
