"""Recovery by a person (on_error = "ask") with real ``approval-bot serve`` processes.

Retry clicked at once on two replicas (on one PostgreSQL, each click delivered to both) runs
the failed call once more, not twice; a worker killed with SIGKILL in the middle of a call
leaves an unknown outcome, which the replica that takes the run over puts to a person on a
recovery card instead of telling the model "outcome unknown"; Skip then reaches the model.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from playground.slack_server import Message, SlackServer
from tests.faults.harness import (
    APPROVER,
    REQUESTER,
    Deployment,
    approve,
    eventually,
    quiet_sweeps,
    request,
)

ASK = 'on_error = "ask"'


def recovery_cards(deployment: Deployment, thread_ts: str) -> list[Message]:
    return [
        m
        for m in deployment.bot_replies(thread_ts)
        if any(b.get("block_id") == "recovery_summary" for b in m.blocks)
    ]


async def recovery_card(deployment: Deployment, thread_ts: str) -> Message:
    cards = await eventually(
        lambda: recovery_cards(deployment, thread_ts), f"a recovery card in {thread_ts}"
    )
    assert len(cards) == 1, [c.text for c in cards]
    return cards[0]


def recovery_id(card: Message) -> str:
    match = re.search(r"Recovery `([0-9A-Za-z_]+)`", json.dumps(card.blocks))
    assert match, card.blocks
    return match.group(1)


def choices(card: Message) -> list[str]:
    return [
        str(e.get("action_id"))
        for _, e in card.buttons()
        if str(e.get("action_id", "")).startswith("recovery_")
    ]


@pytest.fixture
async def replicas(
    slack: SlackServer, postgres_database: str, tmp_path: Path
) -> AsyncIterator[Deployment]:
    deployment = Deployment(slack, postgres_database, tmp_path, run_lease="30s", extra_config=ASK)
    try:
        yield deployment
    finally:
        await deployment.close()


async def test_retry_clicked_at_once_on_two_replicas_runs_the_call_once_more(
    replicas: Deployment,
) -> None:
    deployment, slack = replicas, replicas.slack
    deployment.tool_log.touch()
    first, second = await deployment.start(), await deployment.start()
    slack.ack_timeout = 30.0
    asked = await deployment.mention(request(("broken_once", {"service": "billing"})))
    card = await recovery_card(deployment, asked.ts)
    assert "attempt 1" in json.dumps(card.blocks) and "billing is down" in json.dumps(card.blocks)
    assert deployment.executions("broken_once", "billing") == 1
    urls = [first.events_url, second.events_url]
    # The requester's Retry, and the same click again, each delivered to both replicas.
    replies = await asyncio.gather(
        slack.click_delivered_to(REQUESTER, card, "recovery_retry", urls),
        slack.click_delivered_to(REQUESTER, card, "recovery_retry", urls[::-1]),
    )
    assert all(not isinstance(r, BaseException) for batch in replies for r in batch)
    await deployment.answer(asked.ts, "billing answered on attempt 2")
    await quiet_sweeps(deployment)
    assert deployment.executions("broken_once", "billing") == 2, "one retry, not two"
    row_id = recovery_id(card)
    trail = await deployment.audit_events(row_id)
    assert trail.count("recovery_retry") == 1, trail
    assert trail.count("execution_started") == 1 and trail.count("execution_finished") == 1
    (run_status,) = await deployment.rows("SELECT status FROM runs")
    assert run_status == ("completed",)
    assert len(deployment.answers(asked.ts, "billing answered on attempt 2")) == 1
    assert choices(await recovery_card(deployment, asked.ts)) == [], "the card was settled"


async def test_kill_9_mid_call_offers_the_recovery_card(
    slack: SlackServer, database_url: str, tmp_path: Path
) -> None:
    deployment = Deployment(slack, database_url, tmp_path, extra_config=ASK)
    try:
        deployment.tool_log.touch()
        bot = await deployment.start()
        asked = await deployment.mention(request(("slow_restart", {"service": "db"})))
        await approve(deployment, asked.ts)
        await eventually(
            lambda: deployment.executions("slow_restart", "db", "started") == 1,
            "the slow restart to start",
        )
        await deployment.kill(bot)  # SIGKILL in the middle of the call
        await deployment.start()
        card = await recovery_card(deployment, asked.ts)
        assert "Outcome unknown" in json.dumps(card.blocks)
        assert choices(card) == [
            "recovery_resolve",
            "recovery_retry_unknown",
            "recovery_skip",
            "recovery_stop",
        ]
        retry = next(e for _, e in card.buttons() if e["action_id"] == "recovery_retry_unknown")
        assert "confirm" in retry, "Retry: it may run twice, behind a confirm"
        assert deployment.executions("slow_restart", "db", "started") == 1, "not run again"
        reply = await slack.click(APPROVER, card, "recovery_skip")
        assert reply.status == 200
        await deployment.answer(asked.ts, "Skipped by")
        await quiet_sweeps(deployment)
        assert deployment.executions("slow_restart", "db", "started") == 1
        (run_status,) = await deployment.rows("SELECT status FROM runs")
        assert run_status == ("completed",)
    finally:
        await deployment.close()
