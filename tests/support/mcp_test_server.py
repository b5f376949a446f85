"""A tiny MCP server for the tests of ``[mcp_servers.NAME]`` (bot.mcp_servers).

Run as ``python -m tests.support.mcp_test_server CALLS_FILE [--http PORT]``: stdio by default,
streamable HTTP with ``--http``. Every tool call appends one line to ``CALLS_FILE`` (the
tool's name and arguments as JSON), so a test counts how many times a call really ran in
the server, whatever the bot believes. While ``CALLS_FILE`` with the suffix ``.down`` exists,
the server will not start (it exits at once).
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError

CALLS = Path(sys.argv[1]) if len(sys.argv) > 1 else Path("mcp-calls.jsonl")

server = MCPServer("approval-bot-test", log_level="WARNING")


def _record(tool: str, **arguments: object) -> None:
    with CALLS.open("a", encoding="utf-8") as calls:
        calls.write(json.dumps({"tool": tool, **arguments}) + "\n")


@server.tool()
def deploy(service: str, replicas: int) -> str:
    """Deploy a service (gated in the tests)."""
    _record("deploy", service=service, replicas=replicas)
    return f"deployed {service} with {replicas} replicas"


@server.tool()
def status(service: str) -> str:
    """The status of a service (not gated)."""
    _record("status", service=service)
    return f"{service} is healthy"


@server.tool()
async def slow(seconds: float) -> str:
    """Sleep, then answer: for the per-call timeout."""
    _record("slow", seconds=seconds)
    await asyncio.sleep(seconds)
    return f"slept {seconds}s"


@server.tool()
def broken(reason: str) -> str:
    """Always fails: the server answers with a tool error."""
    _record("broken", reason=reason)
    raise ToolError(f"broken on purpose: {reason}")


@server.tool()
def crash() -> str:
    """The server process dies mid-call (a server that goes away)."""
    _record("crash")
    os._exit(3)


if __name__ == "__main__":
    if CALLS.with_suffix(".down").exists():
        sys.exit("down on purpose")  # a server that will not start, until the file goes
    if "--http" in sys.argv:
        port = int(sys.argv[sys.argv.index("--http") + 1])
        server.run("streamable-http", host="127.0.0.1", port=port)
    else:
        server.run()
