"""Batch cards on two ``approval-bot serve`` replicas sharing one PostgreSQL.

Each turn asks six calls of one tool: one batch card. At the same moment, "Approve all" is
clicked on one replica (and delivered to the other too, a balancer retrying), while on the
other replica someone approves two calls one by one and clicks "Deny all". Whatever the
order, every call is decided exactly once, runs at most once (exactly once if approved, never
if denied), every run resumes once and completes, and every card ends without buttons.
"""

from __future__ import annotations

import asyncio
from collections import Counter

from playground.slack_server import Message
from storage.hashes import fingerprint
from tests.faults.harness import (
    APPROVER,
    CHANNEL,
    OTHER_APPROVER,
    PATIENCE,
    REQUESTER,
    Deployment,
    eventually,
    request,
)

TURNS = 12
CALLS = 6


def batch_cards(deployment: Deployment, ts: str) -> list[Message]:
    return [
        m
        for m in deployment.bot_replies(ts)
        if any(b.get("block_id") == "batch_summary" for b in m.blocks)
    ]


def batch_id_of(card: Message) -> str:
    value = next(e["value"] for _, e in card.buttons() if e["action_id"] == "batch_approve_all")
    return str(value.partition(":")[0])


def live_buttons(card: Message) -> bool:
    return any(e.get("action_id", "").startswith("batch_") for _, e in card.buttons())


async def test_approve_all_racing_single_approves_and_deny_all_decides_each_call_once(
    replicas: Deployment,
) -> None:
    deployment, slack = replicas, replicas.slack
    first, second = await deployment.start(), await deployment.start()
    slack.ack_timeout = 30.0
    urls = [first.events_url, second.events_url]

    async def turn(i: int) -> tuple[str, str]:
        services = [("restart_service", {"service": f"t{i}c{c}"}) for c in range(CALLS)]
        asked = await slack.mention(
            REQUESTER, CHANNEL, f"<@U0BOT> {request(*services)}", bot_url=urls[i % 2]
        )
        assert asked.message is not None
        ts = asked.message.ts
        [card] = await eventually(
            lambda: batch_cards(deployment, ts), f"the batch card of turn {i}"
        )
        batch_id = batch_id_of(card)
        rows = await deployment.rows(
            "SELECT id, payload_hash FROM approvals WHERE batch_id = :b ORDER BY id",
            {"b": batch_id},
        )
        assert len(rows) == CALLS
        one, other = urls[i % 2], urls[(i + 1) % 2]
        singles = [
            slack.click_raw(
                OTHER_APPROVER,
                CHANNEL,
                "approval_approve",
                f"{approval_id}:{fingerprint(payload_hash)}",
                message_ts=card.ts,
                bot_url=other,
            )
            for approval_id, payload_hash in rows[:2]
        ]
        replies = await asyncio.gather(
            slack.click_delivered_to(APPROVER, card, "batch_approve_all", [one, other]),
            *singles,
            slack.click_as_seen(OTHER_APPROVER, card, "batch_deny_all", bot_url=other),
        )
        for reply in replies:
            for r in reply if isinstance(reply, list) else [reply]:
                assert not isinstance(r, BaseException) and r.status == 200, r
        return ts, batch_id

    turns = await asyncio.gather(*(turn(i) for i in range(TURNS)))

    async def unfinished() -> list[tuple[object, ...]]:
        return await deployment.rows("SELECT id, status FROM runs WHERE status != 'completed'")

    deadline = asyncio.get_running_loop().time() + PATIENCE
    while await unfinished() and asyncio.get_running_loop().time() < deadline:
        await asyncio.sleep(0.3)
    assert await unfinished() == []

    statuses = dict(await deployment.rows("SELECT status, count(*) FROM approvals GROUP BY status"))
    assert set(statuses) <= {"executed", "denied"}, statuses
    assert sum(statuses.values()) == TURNS * CALLS

    # Every call decided exactly once (one approve or one deny in the audit trail).
    decisions = await deployment.rows(
        "SELECT approval_id, count(*) FROM audit_events "
        "WHERE event IN ('approval_approved', 'approval_denied') GROUP BY approval_id"
    )
    assert len(decisions) == TURNS * CALLS and {n for _, n in decisions} == {1}

    # The tools' own log: the approved calls ran once each, the denied ones never.
    ran = Counter(e["service"] for e in deployment.tool_events() if e["event"] == "ran")
    executed = {
        arguments["service"]
        for (arguments,) in await deployment.rows(
            "SELECT arguments FROM approvals WHERE status = 'executed'"
        )
    }
    assert set(ran.values()) <= {1}
    assert set(ran) == executed and len(executed) == statuses.get("executed", 0)
    repeated = await deployment.rows(
        "SELECT coalesce(approval_id, run_id), event, count(*) FROM audit_events "
        "WHERE event IN ('execution_started', 'run_resumed', 'run_completed') "
        "GROUP BY coalesce(approval_id, run_id), event HAVING count(*) > 1"
    )
    assert repeated == [], repeated

    for ts, _ in turns:
        await eventually(
            lambda ts=ts: not any(live_buttons(c) for c in batch_cards(deployment, ts)),
            f"the batch card of thread {ts} to lose its buttons",
        )
    assert slack.unknown_calls == []
