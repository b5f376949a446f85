"""Benchmark: how soon a long-poll (``GET /api/v1/approvals/{id}?wait=60``) returns after the
click that decides the approval, and how soon its webhook arrives.

The bot runs as ``approval-bot serve`` in its own process (SQLite, or PostgreSQL with
``--postgres URL``); this process plays Slack, the other system and its webhook receiver.
For each round: create an approval, wait for its card, start the long-poll, click Approve,
and time click -> long-poll answer and click -> webhook received. The long-poll reads the
row every ``bot.api.route.POLL`` seconds, so the first figure is about that plus a read;
the webhook waits for the next look of the deliverer (``bot.api.webhooks.POLL``).

Run: ``.venv/bin/python bench/api_longpoll.py [--rounds 20] [--postgres URL]``
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

import aiohttp

from bench.figures import summary
from tests.faults.harness import is_card
from tests.support.api_support import Receiver, create_token
from tests.support.serve_process import served_bot

CHANNEL = "C0OPS"
APPROVER = "U0APPROVER1"


async def main(rounds: int, postgres: str | None) -> None:
    workdir = Path(tempfile.mkdtemp(prefix="approval-bot-api-bench-"))
    url = postgres or f"sqlite:///{workdir / 'bot.db'}"
    polls, hooks = [], []
    async with (
        served_bot(url, workdir) as bot,
        Receiver() as receiver,
        aiohttp.ClientSession() as session,
    ):
        token = await create_token(url, workdir, f"bench-{time.time_ns()}", CHANNEL)
        headers = {"Authorization": f"Bearer {token.token}"}
        for index in range(rounds):
            body = {
                "channel": CHANNEL,
                "action": f"Bench {index}",
                "approvers": [APPROVER],
                "webhook_url": receiver.url,
            }
            async with session.post(
                bot.url + "/api/v1/approvals", json=body, headers=headers
            ) as response:
                approval_id = (await response.json())["id"]
            card = None
            while card is None:
                found = [
                    m
                    for m in bot.slack.messages
                    if is_card(m) and approval_id in json.dumps(m.blocks)
                ]
                card = found[0] if found else None
                await asyncio.sleep(0.02)
            path = f"{bot.url}/api/v1/approvals/{approval_id}?wait=60"
            answered: dict[str, float] = {}

            async def poll(path: str = path, answered: dict[str, float] = answered) -> None:
                async with session.get(path, headers=headers) as response:
                    await response.read()
                answered["at"] = time.perf_counter()

            polling = asyncio.create_task(poll())
            await asyncio.sleep(0.5)  # the long-poll is held
            clicked = time.perf_counter()
            await bot.slack.click(APPROVER, card, "approval_approve")
            await polling
            polls.append(answered["at"] - clicked)
            while not receiver.for_request(approval_id):
                await asyncio.sleep(0.005)
            hooks.append(time.perf_counter() - clicked)
    print(f"backend: {'postgresql' if postgres else 'sqlite'}, rounds: {rounds}")
    print(f"click -> long-poll answer: {summary(polls)}")
    print(f"click -> webhook received: {summary(hooks)}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--postgres", default=None)
    args = parser.parse_args()
    asyncio.run(main(args.rounds, args.postgres))
