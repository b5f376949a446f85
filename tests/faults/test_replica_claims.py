"""Two ``approval-bot serve`` replicas on one PostgreSQL claiming the same things at once.

The claims that make a Slack event and a card happen once are one statement each, sent alone
in autocommit on PostgreSQL (``Mode.WRITE_ONE``): the Slack event's de-duplication (a
mention's run; ``claim_event`` for an empty mention's hint) and a card's posting claim
(``claim_card``). Here every event is delivered to both replicas at the same moment: each
must be handled once, and each approval must get one card (both replicas' card outboxes
racing to post one card are tests/faults/test_api_replicas.py's).
"""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

from playground.slack_server import BotReply, SlackServer
from tests.faults.harness import (
    CHANNEL,
    REQUESTER,
    Deployment,
    approval_id_of,
    eventually,
    is_card,
    request,
)

EVENTS = 50


async def to_both(slack: SlackServer, payload: dict[str, Any], urls: list[str]) -> list[BotReply]:
    """One event delivered to every replica at the same moment (a balancer's retry)."""
    replies = await asyncio.gather(*(slack.send_event(payload, bot_url=url) for url in urls))
    return list(replies)


async def test_each_event_once_and_each_card_once_on_two_replicas(replicas: Deployment) -> None:
    deployment, slack = replicas, replicas.slack
    slack.ack_timeout = 30.0
    first, second = await deployment.start(), await deployment.start()
    urls = [first.events_url, second.events_url]
    threads: list[str] = []
    acks: list[BotReply] = []
    for i in range(EVENTS):
        text = request(("scale_service", {"service": f"svc{i}", "replicas": 2}))
        payload = slack.mention_payload(REQUESTER, CHANNEL, f"<@U0BOT> {text}")
        threads.append(payload["event"]["ts"])
        # An empty mention: its hint is claimed by claim_event alone.
        empty = slack.mention_payload(REQUESTER, CHANNEL, "<@U0BOT>")
        for replies in await asyncio.gather(
            to_both(slack, payload, urls), to_both(slack, empty, urls)
        ):
            acks.extend(replies)
    assert [a.status for a in acks if a.status != 200] == []

    def cards() -> Counter[str]:
        return Counter(
            approval_id_of(m) for m in slack.messages if m.channel == CHANNEL and is_card(m)
        )

    await eventually(lambda: len(cards()) == EVENTS, lambda: f"{len(cards())} cards")
    # Let both sweepers run a few more times: a card posted twice would show up now.
    await asyncio.sleep(4 * deployment.sweep_seconds + 1)
    assert sorted(cards().values()) == [1] * EVENTS, cards()
    runs = await deployment.rows("SELECT count(*) FROM runs")
    assert runs == [(EVENTS,)]
    hints = [m for m in slack.ephemerals_for(REQUESTER) if "Mention me with" in m.text]
    assert len(hints) == EVENTS, len(hints)
    for ts in threads:
        assert len(deployment.cards(ts)) == 1
