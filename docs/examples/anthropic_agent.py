"""An Anthropic (Claude) agent loop over hostcapd, through the real anthropic SDK client.

    make run                                               # the daemon, in one terminal
    .venv/bin/python docs/examples/anthropic_agent.py      # in another

With ANTHROPIC_API_KEY set it talks to the real API (model `--model`);
without it, it plays the recorded responses in
docs/examples/recorded/anthropic_agent.json to the same SDK client (an
httpx2 mock transport, no network) and prints each step. The loop:

    tools = hostcap_anthropic.anthropic_tools(registry, ctx)
    message = await client.messages.create(model=..., messages=messages, tools=tools, max_tokens=...)
    messages.append({"role": "assistant", "content": message.content})
    messages.append(await hostcap_anthropic.run_tool_calls(message, registry, ctx))

Watch for: `seq 20000` bounded to head and tail with a spill handle, a
missing argument fed back as a correctable error (`is_error`), and `curl`
refused by the allowlist before it reaches the daemon.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from pathlib import Path
from typing import Any

import anthropic
import hostcap
from hostcap import ApprovalPolicy, DispatchContext, ToolPolicy, ToolResultLimits
from hostcap.adapters import anthropic as hostcap_anthropic
from hostcap.adapters.replay import RecordedResponses
from hostcap.approval import ApprovalCard

DEFAULT_SOCKET = ".hostcap/run/dev.sock"
RECORDING = Path(__file__).parent / "recorded" / "anthropic_agent.json"
TASK = "Look at the workspace, write claude.txt, read it back, and count to 20000 with seq."


def approver(assume_yes: bool) -> Any:
    async def prompt(card: ApprovalCard) -> str:
        target = card.preview.command or card.preview.path or card.tool_id
        print(f"   ? approval: {card.tool_id} {target} ({card.why})")
        if assume_yes:
            print("     approved (--yes)")
            return "approve"
        if not sys.stdin.isatty():
            print("     rejected (no terminal to ask; pass --yes)")
            return "reject"
        answer = await asyncio.to_thread(input, f"     [{'/'.join(card.choices)}] ")
        return answer.strip() if answer.strip() in card.choices else "reject"

    return prompt


def shown(text: str, limit: int = 12) -> str:
    lines = text.splitlines()
    cut = lines[:limit] + ([f"... ({len(lines) - limit} more lines)"] if len(lines) > limit else [])
    return "\n      ".join(cut)


async def run(socket: str, model: str, assume_yes: bool, max_turns: int) -> int:
    if os.environ.get("ANTHROPIC_API_KEY"):
        replay = None
        client = anthropic.AsyncAnthropic()
        print(f"talking to the Anthropic API ({model})")
    else:
        replay = RecordedResponses.load(RECORDING)
        client = anthropic.AsyncAnthropic(
            api_key="recorded", http_client=replay.async_client(), max_retries=0
        )
        print(f"ANTHROPIC_API_KEY is not set: playing {RECORDING.name} to the SDK client")

    policy = ApprovalPolicy("accept-edits", prompt=approver(assume_yes))
    async with hostcap.connect(socket) as host:
        registry = hostcap.create_tool_registry(tools=hostcap.BUILTIN_TOOLS, host=host)
        ctx = DispatchContext(
            node_id="anthropic-agent",
            granted_tool_ids={"list_directory", "read_file", "write_file", "run_command"},
            config={},
            tool_policy=ToolPolicy(allowed_commands={"echo", "ls", "seq"}),
            fs_scope="workspace-write",
            gate_approved=False,
            approval=policy.context(),
            session_id="anthropic-agent",
            limits=ToolResultLimits(max_bytes=2048, max_lines=16),
        )
        tools = hostcap_anthropic.anthropic_tools(registry, ctx)
        print(f"tools offered: {', '.join(t['name'] for t in tools)}\n")
        messages: list[dict[str, Any]] = [{"role": "user", "content": TASK}]
        for turn in range(1, max_turns + 1):
            message = await client.messages.create(
                model=model,
                max_tokens=1024,
                system="You are a careful agent working in a sandboxed workspace.",
                messages=messages,  # type: ignore[arg-type]
                tools=tools,  # type: ignore[arg-type]
            )
            print(f"turn {turn}")
            for block in message.content:
                if block.type == "text":
                    print(f"   model: {block.text}")
            messages.append(
                {
                    "role": "assistant",
                    "content": [b.model_dump(exclude_none=True) for b in message.content],
                }
            )
            results = await hostcap_anthropic.dispatch_tool_calls(message, registry, ctx)
            if not results:
                break
            uses = [block for block in message.content if block.type == "tool_use"]
            for use, result in zip(uses, results, strict=True):
                print(f"   -> {result.name} {getattr(use, 'input', {})}")
                mark = "!!" if result.is_error else "<-"
                print(f"   {mark} {shown(result.text)}")
            messages.append(
                {
                    "role": "user",
                    "content": [hostcap_anthropic.tool_result_block(r) for r in results],
                }
            )
            print()
        else:
            print(f"stopped after {max_turns} turns")
    if replay is not None:
        print(f"\n{len(replay.requests)} requests sent to the recorded API")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--socket", default=DEFAULT_SOCKET)
    parser.add_argument("--model", default="claude-sonnet-4-5")
    parser.add_argument("--yes", action="store_true", help="approve every card")
    parser.add_argument("--max-turns", type=int, default=8)
    options = parser.parse_args()
    try:
        return asyncio.run(run(options.socket, options.model, options.yes, options.max_turns))
    except hostcap.HostUnreachableError as error:
        print(f"{error}\nstart the daemon first: make run", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
