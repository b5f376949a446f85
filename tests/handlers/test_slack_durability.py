"""What Slack sends is stored before it is acknowledged; what the bot must post gets posted.

Mentions: the event id and the request are stored in one transaction before Slack gets its
200, so a request that could not be stored is answered with an error status and Slack's retry
brings it back, and a stored request whose worker died is carried on by the sweeper.
"""

from __future__ import annotations

import asyncio
import json
import signal
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from freezegun import freeze_time

from playground.slack_server import SlackServer
from storage.repository import Repository
from tests.conftest import make_config
from tests.support.scripted_model import ScriptedModel, calls
from tests.support.serve_process import SECRET, served_bot
from tests.support.slack_harness import CHANNEL, Harness, has_buttons, running_bot

# A database that refuses new runs (a full disk, a broken replica): a fault in the database,
# not a stand-in for our code.
REFUSE_RUNS = {
    "sqlite": [
        "CREATE TRIGGER refuse_runs BEFORE INSERT ON runs "
        "BEGIN SELECT RAISE(ABORT, 'disk full'); END"
    ],
    "postgres": [
        "CREATE FUNCTION refuse_runs() RETURNS trigger LANGUAGE plpgsql "
        "AS $$ BEGIN RAISE EXCEPTION 'disk full'; END $$",
        "CREATE TRIGGER refuse_runs BEFORE INSERT ON runs "
        "FOR EACH ROW EXECUTE FUNCTION refuse_runs()",
    ],
}
ACCEPT_RUNS = {
    "sqlite": ["DROP TRIGGER refuse_runs"],
    "postgres": ["DROP TRIGGER refuse_runs ON runs"],
}


@pytest.fixture
async def slack(repo: Repository) -> AsyncIterator[Harness]:
    async with running_bot(make_config(), repo) as harness:
        yield harness


async def count_runs(repo: Repository) -> int:
    from storage.repository import Mode, Tx

    def body(tx: Tx) -> int:
        row = tx.one("SELECT count(*) FROM runs")
        return int(row[0]) if row else 0

    return await repo.database.run(body, Mode.READ_ONE)


async def test_a_mention_that_could_not_be_stored_is_delivered_again_and_answered(
    slack: Harness, repo: Repository, backend: str
) -> None:
    for statement in REFUSE_RUNS[backend]:
        await repo.execute_sql(statement)
    first = await slack.mention("U0REQUESTER", "hello there")
    assert first.status == 503, "not stored: Slack must deliver it again"
    assert "Traceback" not in first.body
    assert await count_runs(repo) == 0
    assert ScriptedModel.seen == []

    for statement in ACCEPT_RUNS[backend]:
        await repo.execute_sql(statement)
    again = await slack.server.redeliver(first.event_id, retry_num=1)  # type: ignore[arg-type]
    assert again.status == 200
    await slack.settle()
    assert "You said: hello there" in [m.text for m in slack.thread_of(first)]
    third = await slack.server.redeliver(first.event_id, retry_num=2)  # type: ignore[arg-type]
    assert third.status == 200
    await slack.settle()
    assert await count_runs(repo) == 1 and len(ScriptedModel.seen) == 1


async def test_a_follow_up_while_busy_is_answered_once(slack: Harness) -> None:
    first = await slack.mention("U0REQUESTER", calls(("restart_service", {"service": "db"})))
    assert first.message is not None
    follow_up = await slack.mention("U0REQUESTER", "are you done?", thread_ts=first.message.ts)
    assert follow_up.status == 200
    busy = [m for m in slack.thread_of(first) if "waiting for decisions" in m.text]
    assert len(busy) == 1
    retry = await slack.server.redeliver(follow_up.event_id, retry_num=1)  # type: ignore[arg-type]
    assert retry.status == 200
    await slack.settle()
    assert [m for m in slack.thread_of(first) if "waiting for decisions" in m.text] == busy


async def _wait_for(predicate: Any, timeout: float = 30.0) -> None:
    for _ in range(int(timeout / 0.1)):
        if predicate():
            return
        await asyncio.sleep(0.1)
    raise AssertionError("timed out waiting")


async def test_a_worker_killed_after_storing_a_mention_is_answered_after_restart(
    tmp_path: Path,
) -> None:
    """SIGKILL right after the mention is stored, before Slack got its answer: the restarted
    bot's sweeper takes the run over once its lease runs out and answers in the thread;
    Slack's retry of the unanswered delivery starts nothing new."""
    database = f"sqlite:///{tmp_path / 'bot.db'}"
    settings = 'run_lease = "2s"\nsweep_interval = "1s"\n'
    killed = {"APPROVAL_BOT_FAILPOINT": "mention_stored"}
    async with SlackServer(signing_secret=SECRET) as slack:
        async with served_bot(
            database, tmp_path, extra_config=settings, env=killed, slack=slack
        ) as served:
            with pytest.raises(aiohttp.ClientError):  # the process dies before it answers
                await slack.mention("U0REQUESTER", CHANNEL, "<@U0BOT> hello after a crash")
            await asyncio.wait_for(served.process.wait(), 20)
            assert served.process.returncode == -signal.SIGKILL
        [event_id] = slack_event_ids(slack)
        async with served_bot(database, tmp_path, extra_config=settings, slack=slack):
            retry = await slack.redeliver(event_id, retry_num=1)
            assert retry.status == 200
            await _wait_for(lambda: len(answers(slack)) >= 2)
            assert len(answers(slack)) == 2, [m.text for m in answers(slack)]


def answers(slack: SlackServer) -> list[Any]:
    """The mention itself and the bot's answers that quote it (llm-echo repeats the prompt)."""
    return [m for m in slack.messages if "hello after a crash" in m.text]


def slack_event_ids(slack: SlackServer) -> list[str]:
    return list(slack._event_bodies)  # the server keeps each event to redeliver it


# -- approval cards: an outbox ---------------------------------------------------------------


async def test_a_card_nobody_posted_is_posted_by_the_sweeper_once(repo: Repository) -> None:
    from handlers.flows import sweep_once

    with freeze_time("2026-11-30 10:00:00", real_asyncio=True) as clock:
        async with running_bot(make_config(), repo) as slack:
            services = slack.bot.services
            # progress, "waiting" and the card itself: Slack refuses all three
            slack.server.fail("chat.postMessage", error="internal_error", times=3)
            reply = await slack.mention(
                "U0REQUESTER", calls(("restart_service", {"service": "db"}))
            )
            assert slack.cards() == []
            clock.tick(timedelta(seconds=30))
            await sweep_once(services)
            assert slack.cards() == [], "the failed poster's claim still holds"
            clock.tick(timedelta(seconds=31))
            # Two sweeps at once (two replicas): one card.
            await asyncio.gather(sweep_once(services), sweep_once(services))
            await sweep_once(services)
            [card] = slack.cards()
            assert card.thread_ts == reply.message.ts  # type: ignore[union-attr]
            # It is the card of record: a click edits it in place.
            await slack.server.click("U0APPROVER1", card, "approval_approve")
            await slack.settle()
            card = slack.server.message(CHANNEL, card.ts)  # type: ignore[assignment]
            assert card is not None and not has_buttons(card)
            clock.tick(timedelta(minutes=5))
            await sweep_once(services)
            assert len(slack.cards()) == 1


async def test_a_worker_killed_before_posting_a_card_leaves_it_to_the_sweeper(
    tmp_path: Path,
) -> None:
    """SIGKILL right after the pause is stored: the restarted bot's sweeper posts the card."""
    database = f"sqlite:///{tmp_path / 'bot.db'}"
    settings = 'sweep_interval = "1s"\n'
    prompt = json.dumps(
        {
            "prompt": "go",
            "tool_calls": [{"name": "restart_service", "arguments": {"service": "db"}}],
        }
    )
    async with SlackServer(signing_secret=SECRET) as slack:
        killed = {"APPROVAL_BOT_FAILPOINT": "pause_stored"}
        async with served_bot(
            database, tmp_path, extra_config=settings, env=killed, slack=slack
        ) as served:
            reply = await slack.mention("U0REQUESTER", CHANNEL, f"<@U0BOT> {prompt}")
            assert reply.status == 200
            await asyncio.wait_for(served.process.wait(), 20)
            assert served.process.returncode == -signal.SIGKILL
        assert cards(slack) == []
        async with served_bot(database, tmp_path, extra_config=settings, slack=slack):
            await _wait_for(lambda: len(cards(slack)) == 1)
            [card] = cards(slack)
            assert card.thread_ts == reply.message.ts  # type: ignore[union-attr]
            await slack.click("U0APPROVER1", card, "approval_approve")
            await _wait_for(lambda: not has_buttons(slack.message(CHANNEL, card.ts)))  # type: ignore[arg-type]
        assert len(cards(slack)) == 1


def cards(slack: SlackServer) -> list[Any]:
    """The channel's cards (not their DM copies to approvers)."""
    return [
        m
        for m in slack.messages
        if m.channel == CHANNEL and "approval_summary" in json.dumps(m.blocks)
    ]
