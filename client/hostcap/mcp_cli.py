"""The `hostcap` command: `hostcap mcp` serves the registry's tools over MCP (stdio).

    hostcap mcp --socket .hostcap/run/dev.sock --config hostcap-mcp.toml
    hostcap mcp --socket .hostcap/run/dev.sock --config hostcap-mcp.toml --print-config-snippet

Needs the `mcp` extra (`pip install 'hostcap-client[mcp]'`). Standard output
is the MCP channel; diagnostics go to standard error.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import sys
from typing import Any

import hostcap
from hostcap.mcp_config import McpConfigError, load_config


def config_snippet(socket: str, config: str, command: str | None = None) -> dict[str, Any]:
    """The `mcpServers` entry an MCP client (Claude Code, Cursor style) needs."""
    beside = os.path.join(os.path.dirname(sys.executable), "hostcap")
    program = command or (beside if os.access(beside, os.X_OK) else None) or shutil.which("hostcap")
    program = program or "hostcap"
    return {
        "mcpServers": {
            "hostcap": {
                "command": program,
                "args": [
                    "mcp",
                    "--socket",
                    os.path.abspath(socket),
                    "--config",
                    os.path.abspath(config),
                ],
            }
        }
    }


async def serve(socket: str, config_path: str) -> int:
    from mcp.server.stdio import stdio_server

    from hostcap.mcp_server import HostcapMcpServer

    known = [tool.id for tool in hostcap.BUILTIN_TOOLS]
    config = load_config(config_path, known)
    async with hostcap.connect(socket) as host:
        registry = hostcap.create_tool_registry(tools=hostcap.BUILTIN_TOOLS, host=host)
        server = HostcapMcpServer(registry, config).build()
        async with stdio_server() as (read_stream, write_stream):
            await server.run(read_stream, write_stream, server.create_initialization_options())
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="hostcap", description="hostcap engine-side tools")
    commands = parser.add_subparsers(dest="command", required=True)
    mcp = commands.add_parser("mcp", help="serve the tools over MCP on stdio")
    mcp.add_argument("--socket", required=True, help="the hostcapd tenant socket")
    mcp.add_argument("--config", required=True, help="the TOML policy file")
    mcp.add_argument(
        "--print-config-snippet",
        action="store_true",
        help="print the mcpServers JSON an MCP client needs, and exit",
    )
    options = parser.parse_args(argv)
    if options.print_config_snippet:
        print(json.dumps(config_snippet(options.socket, options.config), indent=2))
        return 0
    try:
        return asyncio.run(serve(options.socket, options.config))
    except McpConfigError as error:
        print(f"hostcap mcp: {error}", file=sys.stderr)
        return 2
    except hostcap.HostUnreachableError as error:
        print(f"hostcap mcp: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
