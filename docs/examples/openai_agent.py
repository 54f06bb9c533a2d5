"""An OpenAI agent loop over hostcapd, through the real openai SDK client.

    make run                                            # the daemon, in one terminal
    .venv/bin/python docs/examples/openai_agent.py      # in another

With OPENAI_API_KEY set it talks to the real API (model `--model`); without
it, it plays the recorded responses in docs/examples/recorded/openai_agent.json
to the same SDK client (an httpx2 mock transport, no network) and prints
each step. The loop is the whole integration:

    tools = hostcap_openai.chat_tools(registry, ctx, strict=True)
    response = await client.chat.completions.create(model=..., messages=messages, tools=tools)
    messages.append(hostcap_openai.assistant_message(response))
    messages += await hostcap_openai.run_tool_calls(response, registry, ctx)

Watch for: a malformed JSON argument fed back as a correctable error, `rm`
refused by the allowlist before it reaches the daemon, `../../etc/passwd`
refused by the workspace scope, and `seq 20000` bounded with a spill handle.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from pathlib import Path
from typing import Any

import hostcap
import openai
from hostcap import ApprovalPolicy, DispatchContext, ToolPolicy, ToolResultLimits
from hostcap.adapters import openai as hostcap_openai
from hostcap.adapters.replay import RecordedResponses
from hostcap.approval import ApprovalCard

DEFAULT_SOCKET = ".hostcap/run/dev.sock"
RECORDING = Path(__file__).parent / "recorded" / "openai_agent.json"
TASK = "Look at the workspace, write hello.txt, read it back, and show me what the sandbox can run."


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
    if os.environ.get("OPENAI_API_KEY"):
        replay = None
        client = openai.AsyncOpenAI()
        print(f"talking to the OpenAI API ({model})")
    else:
        replay = RecordedResponses.load(RECORDING)
        client = openai.AsyncOpenAI(
            api_key="recorded", http_client=replay.async_client(), max_retries=0
        )
        print(f"OPENAI_API_KEY is not set: playing {RECORDING.name} to the SDK client")

    policy = ApprovalPolicy("accept-edits", prompt=approver(assume_yes))
    async with hostcap.connect(socket) as host:
        registry = hostcap.create_tool_registry(tools=hostcap.BUILTIN_TOOLS, host=host)
        ctx = DispatchContext(
            node_id="openai-agent",
            granted_tool_ids={"list_directory", "read_file", "write_file", "run_command"},
            config={},
            tool_policy=ToolPolicy(allowed_commands={"echo", "ls", "seq"}),
            fs_scope="workspace-write",
            gate_approved=False,
            approval=policy.context(),
            session_id="openai-agent",
            limits=ToolResultLimits(max_bytes=2048, max_lines=16),
        )
        tools = hostcap_openai.chat_tools(registry, ctx, strict=True)
        print(f"tools offered: {', '.join(t['function']['name'] for t in tools)}\n")
        messages: list[dict[str, Any]] = [
            {
                "role": "system",
                "content": "You are a careful agent working in a sandboxed workspace.",
            },
            {"role": "user", "content": TASK},
        ]
        for turn in range(1, max_turns + 1):
            response = await client.chat.completions.create(
                model=model,
                messages=messages,  # type: ignore[arg-type]
                tools=tools,  # type: ignore[arg-type]
            )
            message = response.choices[0].message
            print(f"turn {turn}")
            if message.content:
                print(f"   model: {message.content}")
            messages.append(hostcap_openai.assistant_message(response))
            results = await hostcap_openai.dispatch_tool_calls(response, registry, ctx)
            if not results:
                break
            for call, result in zip(message.tool_calls or [], results, strict=True):
                arguments = getattr(getattr(call, "function", None), "arguments", "")
                print(f"   -> {result.name} {arguments}")
                mark = "!!" if result.is_error else "<-"
                print(f"   {mark} {shown(result.text)}")
            messages += [hostcap_openai.tool_result_message(result) for result in results]
            if any(result.fatal for result in results):
                print("   (a refusal the model cannot correct: it was told, and the loop goes on)")
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
    parser.add_argument("--model", default="gpt-4.1-mini")
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
