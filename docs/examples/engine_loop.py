"""A minimal engine loop over hostcapd.

Run the development daemon in one terminal, this loop in another:

    make run
    .venv/bin/python docs/examples/engine_loop.py            # asks you on each card
    .venv/bin/python docs/examples/engine_loop.py --yes      # approves every card
    .venv/bin/python docs/examples/engine_loop.py --mode auto --contract plan

A scripted "model" stands in for an LLM so the example runs anywhere: each
turn it proposes tool calls, the engine dispatches them through the
registry, and the results go back into the conversation as tool messages.
To use a real model, send `registry.anthropic_tools(ctx)` (or
`openai_tools`) with the conversation and turn its tool-use blocks into
`ToolCall`s; nothing else changes.

What it shows: the catalogue a node is offered, approval cards from the
permission mode and the contract, a command the allowlist refuses before
it reaches the daemon, the recoverable scope denial fed back to the model,
a large result bounded and spilled, and Ctrl-C cancelling a running command
(the daemon kills its whole process tree).
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import hostcap
from hostcap import (
    ApprovalPolicy,
    DispatchContext,
    ToolCall,
    ToolDispatchError,
    ToolPolicy,
    ToolResultLimits,
)
from hostcap.approval import ApprovalCard

DEFAULT_SOCKET = ".hostcap/run/dev.sock"


@dataclass
class ToolMessage:
    """A tool result placed in the conversation: the only place an
    `Untrusted` value is unwrapped."""

    tool_call_id: str
    content: str
    is_error: bool = False


class ScriptedModel:
    """Stands in for an LLM: proposes one list of tool calls per turn."""

    TURNS: tuple[tuple[tuple[str, dict[str, Any]], ...], ...] = (
        (("list_directory", {"path": "."}),),
        (
            ("write_file", {"path": "hello.txt", "content": "hello from the engine\n"}),
            ("read_file", {"path": "hello.txt"}),
        ),
        (("run_command", {"command": "echo", "args": ["hostcap", "runs", "this"]}),),
        # Not on the allowlist: refused by the engine, the daemon never sees it.
        (("run_command", {"command": "rm", "args": ["-rf", "."]}),),
        # Outside the workspace: the daemon's recoverable scope denial, fed back.
        (("read_file", {"path": "../../etc/passwd"}),),
        # 20 000 lines: the model sees head, tail and a spill handle.
        (("run_command", {"command": "seq", "args": ["20000"]}),),
        # Press Ctrl-C while this runs to cancel it.
        (("run_command", {"command": "sleep", "args": ["5"]}),),
    )

    def __init__(self) -> None:
        self._turns: Iterator[tuple[tuple[str, dict[str, Any]], ...]] = iter(self.TURNS)
        self._count = 0

    def next_turn(self, conversation: list[ToolMessage]) -> list[ToolCall]:
        """The tool calls of the next turn (empty when the model is done)."""
        calls = []
        for name, args in next(self._turns, ()):
            self._count += 1
            calls.append(ToolCall(f"call-{self._count}", name, args))
        return calls


def terminal_prompt(assume_yes: bool) -> Any:
    async def prompt(card: ApprovalCard) -> str:
        target = card.preview.command or card.preview.path or card.preview.host or card.tool_id
        print(f"  ? approval needed: {card.tool_id} ({card.action}) {target} -- {card.why}")
        if assume_yes:
            print("    approved (--yes)")
            return "approve"
        choices = "/".join(card.choices)
        while True:
            answer = (await asyncio.to_thread(input, f"    [{choices}] ")).strip() or "reject"
            if answer in card.choices:
                return answer
            print(f"    please answer one of {choices}")

    return prompt


async def run(socket: str, mode: str, contract: str | None, assume_yes: bool) -> int:
    policy = ApprovalPolicy(mode, contract, prompt=terminal_prompt(assume_yes))
    cancel = asyncio.Event()
    loop = asyncio.get_running_loop()

    def on_interrupt() -> None:
        # The first Ctrl-C cancels the running call; the next one quits.
        print("\n  (cancelling; Ctrl-C again to quit)")
        cancel.set()
        loop.remove_signal_handler(signal.SIGINT)

    async with hostcap.connect(socket) as host:
        registry = hostcap.create_tool_registry(tools=hostcap.BUILTIN_TOOLS, host=host)
        model = ScriptedModel()
        conversation: list[ToolMessage] = []
        turn = 0
        while calls := model.next_turn(conversation):
            turn += 1
            cancel.clear()
            loop.add_signal_handler(signal.SIGINT, on_interrupt)
            ctx = DispatchContext(
                node_id="example-agent",
                granted_tool_ids={
                    "list_directory",
                    "read_file",
                    "write_file",
                    "run_command",
                    "git_status",
                },
                config={},
                tool_policy=ToolPolicy(allowed_commands={"echo", "seq", "sleep", "ls", "git"}),
                fs_scope="workspace-write",
                gate_approved=False,
                approval=policy.context(),
                session_id="example-session",
                signal=cancel,
                # Small ceilings so the bounding is visible on a terminal (the default is 32 KiB / 400 lines).
                limits=ToolResultLimits(max_bytes=2048, max_lines=16),
            )
            if turn == 1:
                offered = ", ".join(tool.id for tool in registry.catalogue(ctx))
                print(f"offered to the model: {offered}\n")
            print(f"turn {turn}")
            for call in calls:
                print(f"  -> {call.name} {dict(call.args)}")
                try:
                    outcome = await registry.dispatch(call, ctx)
                except ToolDispatchError as error:
                    print(f"  !! {type(error).__name__} [{error.code}] {error.message}")
                    if error.loop_correctable or error.recoverable:
                        # Fed back so the model can adapt (a bad argument, an out-of-scope path).
                        conversation.append(ToolMessage(call.id, error.message, is_error=True))
                        continue
                    print("     (fatal: this turn ends)")
                    break
                message = ToolMessage(call.id, outcome.tool_result.unwrap())
                conversation.append(message)
                print("  <- " + message.content.replace("\n", "\n     "))
                if outcome.spilled is not None:
                    print(
                        f"     (full result: {outcome.spilled.byte_length} bytes in {outcome.spilled.handle})"
                    )
            print()
    print("done; the run's spilled output was swept.")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--socket", default=DEFAULT_SOCKET, help=f"tenant socket (default {DEFAULT_SOCKET})"
    )
    parser.add_argument("--mode", default="accept-edits", choices=["ask", "accept-edits", "auto"])
    parser.add_argument("--contract", default=None, choices=["plan", "goal"])
    parser.add_argument("--yes", action="store_true", help="approve every card without asking")
    options = parser.parse_args()
    try:
        return asyncio.run(run(options.socket, options.mode, options.contract, options.yes))
    except hostcap.HostUnreachableError as error:
        print(f"{error}\nstart the daemon first: make run", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
