"""Waits in Slack threads, end to end: a call waiting on another system's callback, and a
call that asked to be retried later. Each posts a notice in the thread (through the card
outbox) that is edited in place when the wait settles; on SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any
from urllib.parse import urlsplit

import aiohttp
import pytest
from freezegun import freeze_time

from playground.slack_server import Message
from storage.repository import Repository
from tests.conftest import BASE_CONFIG, make_config
from tests.support import slack_wait_tools
from tests.support.scripted_model import ScriptedModel
from tests.support.slack_harness import CHANNEL, Harness, running_bot

REQUESTER = "U0REQUESTER"


def calls(name: str, arguments: dict[str, Any]) -> str:
    return json.dumps({"tool_calls": [{"name": name, "arguments": arguments}]})


@pytest.fixture(autouse=True)
def _forget_calls() -> None:
    slack_wait_tools.CALLS.clear()


@pytest.fixture
async def slack(repo: Repository) -> AsyncIterator[Harness]:
    config = make_config(
        tools=[
            *BASE_CONFIG["tools"],
            "tests.support.slack_wait_tools:start_deploy",
            "tests.support.slack_wait_tools:flaky_api",
        ]
    )
    async with running_bot(config, repo, sweep=True) as harness:
        yield harness


def notices(slack: Harness) -> list[Message]:
    return [
        m
        for m in slack.server.messages
        if any(b.get("block_id") == "wait_summary" for b in m.blocks)
    ]


def shown(message: Message | None) -> str:
    assert message is not None
    return json.dumps(message.blocks, ensure_ascii=False)


async def test_waits_are_listed_but_not_as_yours_to_decide(slack: Harness) -> None:
    await slack.mention(REQUESTER, calls("start_deploy", {"service": "shop"}))
    mine = await slack.server.slash_command(REQUESTER, CHANNEL, text="mine")
    assert "*Waiting* for deploy of shop" in mine.body
    everything = await slack.server.slash_command("U0OUTSIDER", CHANNEL, text="all")
    assert "*Waiting* for deploy of shop" in everything.body
    to_decide = await slack.server.slash_command("U0OUTSIDER", CHANNEL, text="")
    assert "Nothing is waiting for your decision" in to_decide.body


async def post_callback(slack: Harness, url: str, body: dict[str, Any]) -> int:
    """POST to the bot's port, at the path of the URL the tool handed out."""
    assert slack.server.bot_url is not None
    base = slack.server.bot_url.removesuffix("/slack/events")
    async with (
        aiohttp.ClientSession() as http,
        http.post(base + urlsplit(url).path, json=body) as response,
    ):
        return response.status


async def test_a_callback_notice_waits_then_shows_the_outcome(slack: Harness) -> None:
    reply = await slack.mention(REQUESTER, calls("start_deploy", {"service": "shop"}))
    [notice] = notices(slack)
    assert notice.thread_ts == reply.message.ts  # type: ignore[union-attr]
    assert "Waiting for deploy of shop…" in shown(notice)
    [(_, _, url)] = slack_wait_tools.CALLS
    assert url is not None

    assert await post_callback(slack, url, {"status": "deployed", "build": "42"}) == 202
    await slack.settle()
    edited = slack.server.message(notice.channel, notice.ts)
    assert "Waiting for" not in shown(edited)
    assert "deploy of shop: reported back" in shown(edited)
    assert '\\"build\\": \\"42\\"' in shown(edited)
    thread = [m.text for m in slack.thread_of(reply)]
    assert any(t.startswith("Results: start_deploy=") and "42" in t for t in thread)
    assert len(slack_wait_tools.CALLS) == 1, "the tool is not run again on resume"
    # A replay changes nothing, the notice included.
    assert await post_callback(slack, url, {"status": "deployed"}) == 410
    await slack.settle()
    assert shown(slack.server.message(notice.channel, notice.ts)) == shown(edited)


async def test_a_retry_notice_says_when_then_that_it_ran(slack: Harness) -> None:
    reply = await slack.mention(REQUESTER, calls("flaky_api", {"name": "billing"}))
    [notice] = notices(slack)
    assert notice.thread_ts == reply.message.ts  # type: ignore[union-attr]
    assert "Retrying at <!date^" in shown(notice) and "Retry of `flaky_api`" in shown(notice)
    assert "rate limited" in shown(notice)
    seen = len(ScriptedModel.seen)
    # The bot's own due-retry check (about once a second) runs the call again.
    async with asyncio.timeout(15):
        while "Results: flaky_api=billing: ok" not in [m.text for m in slack.thread_of(reply)]:
            await asyncio.sleep(0.1)
            await slack.settle()
    assert len(ScriptedModel.seen) == seen + 1
    assert [tool for tool, _, _ in slack_wait_tools.CALLS] == ["flaky_api", "flaky_api"]
    edited = shown(slack.server.message(notice.channel, notice.ts))
    assert ":repeat: Retried <!date^" in edited and "Retrying" not in edited


async def test_a_callback_past_its_timeout_edits_the_notice_and_moves_on(
    repo: Repository,
) -> None:
    config = make_config(
        tools=[*BASE_CONFIG["tools"], "tests.support.slack_wait_tools:start_deploy"]
    )
    with freeze_time("2026-11-30 10:00:00", real_asyncio=True) as clock:
        async with running_bot(config, repo) as slack:
            reply = await slack.mention(REQUESTER, calls("start_deploy", {"service": "shop"}))
            [notice] = notices(slack)
            [(_, _, url)] = slack_wait_tools.CALLS
            clock.tick(timedelta(hours=1, minutes=1))
            assert await post_callback(slack, url or "", {"status": "deployed"}) == 410
            await slack.settle()
            edited = shown(slack.server.message(notice.channel, notice.ts))
            assert "deploy of shop: no report by" in edited and "Waiting for" not in edited
            # on_expiry "deny" (the default): the model is told, and answers in the thread.
            assert slack.thread_of(reply)[-1].text.startswith("Results: start_deploy=")
    assert len(slack_wait_tools.CALLS) == 1
