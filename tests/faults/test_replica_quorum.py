"""Two ``approval-bot serve`` replicas on one PostgreSQL, casting the two votes of a 2-person
approval at the same moment (each click also delivered to the other replica). Every call
must be approved exactly once and run exactly once: never left pending with both votes in,
never approved twice."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from playground.slack_server import BotReply, SlackServer
from tests.faults.harness import (
    APPROVER,
    CHANNEL,
    OTHER_APPROVER,
    REQUESTER,
    Deployment,
    eventually,
    has_buttons,
    request,
)

TURNS = 30
CONCURRENT_TURNS = 6
ANYONE = '[policies.scale_service]\napproval = "required"  # by anyone but the requester\n'
QUORUM = "[policies.scale_service]\nmin_approvals = 2\n"


@pytest.fixture
async def replicas(
    slack: SlackServer, postgres_database: str, tmp_path: Path
) -> AsyncIterator[Deployment]:
    deployment = Deployment(slack, postgres_database, tmp_path, run_lease="30s")
    config = deployment.config.read_text()
    assert ANYONE in config
    deployment.config.write_text(config.replace(ANYONE, QUORUM))
    try:
        yield deployment
    finally:
        await deployment.close()


async def test_simultaneous_second_votes_on_two_replicas_run_each_call_once(
    replicas: Deployment,
) -> None:
    deployment, slack = replicas, replicas.slack
    first, second = await deployment.start(), await deployment.start()
    urls = [first.events_url, second.events_url]
    acks: list[BotReply | BaseException] = []
    gate = asyncio.Semaphore(CONCURRENT_TURNS)

    async def turn(i: int) -> str:
        text = request(("scale_service", {"service": f"svc{i}"}))
        async with gate:
            asked = await slack.mention(REQUESTER, CHANNEL, f"<@U0BOT> {text}", bot_url=urls[i % 2])
            assert asked.message is not None
            card = await deployment.card(asked.message.ts)
            for replies in await asyncio.gather(
                slack.click_delivered_to(APPROVER, card, "approval_approve", urls),
                slack.click_delivered_to(OTHER_APPROVER, card, "approval_approve", urls[::-1]),
                # The requester's own click never counts.
                slack.click_delivered_to(REQUESTER, card, "approval_approve", urls),
            ):
                acks.extend(replies)
            await deployment.answer(asked.message.ts, f"scaled svc{i}")
            return asked.message.ts

    threads = await asyncio.gather(*(turn(i) for i in range(TURNS)))

    assert [a for a in acks if not isinstance(a, BotReply) or a.status != 200] == []
    assert await deployment.rows("SELECT status, count(*) FROM runs GROUP BY status") == [
        ("completed", TURNS)
    ]
    assert await deployment.rows("SELECT status, count(*) FROM approvals GROUP BY status") == [
        ("executed", TURNS)
    ]
    ran = [e["service"] for e in deployment.tool_events() if e["event"] == "ran"]
    assert sorted(ran) == sorted(f"svc{i}" for i in range(TURNS))
    events = dict(await deployment.rows("SELECT event, count(*) FROM audit_events GROUP BY event"))
    assert events.get("approval_approved") == TURNS, events
    assert events.get("approval_vote") == 2 * TURNS, events
    votes = await deployment.rows(
        "SELECT voter, count(*) FROM approval_votes GROUP BY voter ORDER BY voter"
    )
    assert votes == [(APPROVER, TURNS), (OTHER_APPROVER, TURNS)]
    for ts in threads:
        assert len(deployment.cards(ts)) == 1
        await eventually(
            lambda ts=ts: not any(has_buttons(c) for c in deployment.cards(ts)),
            "the card to be settled",
        )
    assert slack.unknown_calls == []
