"""Benchmark: the bot's MCP server (``approval-bot mcp`` on stdio, driven by the ``mcp``
SDK's client) from the tool call to the card, and from the click to the tool's answer.

The bot runs as ``approval-bot serve`` in its own process (SQLite, or PostgreSQL with
``--postgres URL``); ``approval-bot mcp`` is a second process on the same database, started
by the SDK's ``stdio_client`` as Claude Code or Cursor start it; this process plays Slack and
the MCP client. For each round: call ``request_approval``, time call -> card posted (serve's
card outbox for requests of other systems, read every ``handlers.flows.sweeper.CARD_POLL``),
hold ``--hold`` seconds (the wait's reads have backed off to ``POLL_MOST`` by then), click
Approve, and time click -> the tool's result.

Run: ``.venv/bin/python bench/mcp_wait.py [--rounds 10] [--hold 3] [--postgres URL]``
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("LLM_USER_PATH", tempfile.mkdtemp(prefix="approval-bot-bench-"))

from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

from bench.figures import summary
from tests.faults.harness import is_card
from tests.support.api_support import create_token
from tests.support.serve_process import ROOT, served_bot

CHANNEL = "C0OPS"
APPROVER = "U0APPROVER1"


async def main(rounds: int, hold: float, postgres: str | None) -> None:
    workdir = Path(tempfile.mkdtemp(prefix="approval-bot-mcp-bench-"))
    url = postgres or f"sqlite:///{workdir / 'bot.db'}"
    to_card, to_answer = [], []
    async with served_bot(url, workdir) as bot:
        token = await create_token(url, workdir, f"bench-{time.time_ns()}", CHANNEL)
        params = StdioServerParameters(
            command=sys.executable,
            args=["-m", "bot.cli", "--config", str(workdir / "served-bot.toml"), "mcp"],
            env={
                **os.environ,
                "DATABASE_URL": url,
                "APPROVAL_BOT_TOKEN": token.token,
                "PYTHONPATH": str(ROOT),
            },
            cwd=str(workdir),
        )
        async with (
            stdio_client(params) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            for index in range(rounds):
                action = f"Bench {index} {time.time_ns()}"
                called = time.perf_counter()
                arguments = {"action": action, "approvers": [APPROVER]}
                call = asyncio.create_task(session.call_tool("request_approval", arguments))
                card = None
                while card is None:
                    found = [m for m in bot.slack.messages if is_card(m)]
                    found = [m for m in found if action in json.dumps(m.blocks)]
                    card = found[0] if found else None
                    await asyncio.sleep(0.02)
                to_card.append(time.perf_counter() - called)
                await asyncio.sleep(hold)
                clicked = time.perf_counter()
                await bot.slack.click(APPROVER, card, "approval_approve")
                result = await call
                to_answer.append(time.perf_counter() - clicked)
                assert result.structured_content["status"] == "approved", result
    print(f"backend: {'postgresql' if postgres else 'sqlite'}, rounds: {rounds}, hold: {hold}s")
    print(f"tool call -> card posted: {summary(to_card)}")
    print(f"click -> tool result: {summary(to_answer)}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--hold", type=float, default=3.0)
    parser.add_argument("--postgres", default=None)
    args = parser.parse_args()
    asyncio.run(main(args.rounds, args.hold, args.postgres))
