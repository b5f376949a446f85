"""Sub-agents on two ``approval-bot serve`` replicas on one PostgreSQL (issue 20 section 1,
the acceptance test): 50 parents, each delegating to two children in one response. One child
of each calls a gated tool, whose card is clicked on the other replica (each click delivered
to both, a balancer retrying); the other child answers at once. The two children's ends race
on different replicas; exactly one of them claims the parent's resume, and every parent
resumes once, with both answers."""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from playground.slack_server import BotReply, SlackServer
from tests.faults.harness import (
    APPROVER,
    CHANNEL,
    PATIENCE,
    REQUESTER,
    Deployment,
    eventually,
)
from tests.faults.test_delegation_crash import AGENTS

PARENTS = int(os.environ.get("APPROVAL_BOT_DELEGATION_PARENTS", "50"))  # the 50
CONCURRENT = 8

OPERATOR = """
[agents.operator]
description = "restarts services"
tools = ["tests.faults.tools:restart_service"]
"""


@pytest.fixture
async def replicas(
    slack: SlackServer, postgres_database: str, tmp_path: Path
) -> AsyncIterator[Deployment]:
    # No process dies here: a long lease keeps a busy machine from handing runs over.
    deployment = Deployment(
        slack, postgres_database, tmp_path, run_lease="30s", extra_config=AGENTS + OPERATOR
    )
    try:
        yield deployment
    finally:
        await deployment.close()


def parent_request(i: int) -> str:
    gated = json.dumps(
        {
            "prompt": f"child-a-{i}",
            "tool_calls": [{"name": "restart_service", "arguments": {"service": f"svc{i}"}}],
        }
    )
    calls = [
        {"name": "delegate", "arguments": {"agent": "operator", "task": gated}},
        {"name": "delegate", "arguments": {"agent": "writer", "task": f"child-b-{i}"}},
    ]
    return json.dumps({"prompt": f"parent-{i}", "tool_calls": calls})


def parent_answers(deployment: Deployment, ts: str) -> list[str]:
    return [
        m.text
        for m in deployment.bot_replies(ts)
        if '"name": "delegate"' in m.text and '"tool_results"' in m.text
    ]


async def test_every_parent_resumes_once_with_both_answers_on_two_replicas(
    replicas: Deployment,
) -> None:
    deployment, slack = replicas, replicas.slack
    first, second = await deployment.start(), await deployment.start()
    slack.ack_timeout = 30.0
    urls = [first.events_url, second.events_url]
    acks: list[BotReply | BaseException] = []
    gate = asyncio.Semaphore(CONCURRENT)

    async def parent(i: int) -> str:
        async with gate:
            asked = await slack.mention(
                REQUESTER, CHANNEL, f"<@U0BOT> {parent_request(i)}", bot_url=urls[i % 2]
            )
            acks.append(asked)
            assert asked.message is not None
            ts = asked.message.ts
            (card,) = await eventually(
                lambda: len(deployment.cards(ts)) == 1 and deployment.cards(ts),
                f"the operator's card in parent {i}'s thread",
            )
            # Decided on the other replica than the one that drove the children, and
            # delivered to both.
            acks.extend(
                await slack.click_delivered_to(
                    APPROVER, card, "approval_approve", [urls[(i + 1) % 2], urls[i % 2]]
                )
            )
            return ts

    threads = await asyncio.gather(*(parent(i) for i in range(PARENTS)))

    def answered() -> list[int]:
        return [i for i, ts in enumerate(threads) if parent_answers(deployment, ts)]

    done, progress_at = -1, asyncio.get_running_loop().time()
    while len(answered()) < PARENTS:
        if len(answered()) != done:
            done, progress_at = len(answered()), asyncio.get_running_loop().time()
        elif asyncio.get_running_loop().time() - progress_at > PATIENCE:
            break
        await asyncio.sleep(0.2)

    slow_or_failed = [a for a in acks if not isinstance(a, BotReply) or a.status != 200]
    assert slow_or_failed == [], f"{len(slow_or_failed)} deliveries not acknowledged"
    assert await deployment.rows("SELECT status, count(*) FROM runs GROUP BY status") == [
        ("completed", 3 * PARENTS)
    ]
    assert await deployment.rows(
        "SELECT kind, status, count(*) FROM approvals GROUP BY kind, status ORDER BY kind"
    ) == [("approval", "executed", PARENTS), ("delegation", "completed", 2 * PARENTS)]
    # Each parent resumed exactly once; each child's end settled its row once.
    resumes = await deployment.rows(
        "SELECT r.id, (SELECT count(*) FROM audit_events e WHERE e.run_id = r.id "
        "AND e.event = 'run_resumed') FROM runs r WHERE r.parent_run_id IS NULL"
    )
    assert len(resumes) == PARENTS
    assert [run for run, count in resumes if count != 1] == []
    events = dict(await deployment.rows("SELECT event, count(*) FROM audit_events GROUP BY event"))
    assert events.get("delegation_settled") == 2 * PARENTS, events
    assert events.get("run_delegated") == 2 * PARENTS, events
    ran = [e["service"] for e in deployment.tool_events() if e["event"] == "ran"]
    assert sorted(ran) == sorted(f"svc{i}" for i in range(PARENTS))

    for i, ts in enumerate(threads):
        answers = parent_answers(deployment, ts)
        assert len(answers) == 1, (i, len(answers))
        assert f"restarted svc{i}" in answers[0] and f"child-b-{i}" in answers[0], i
    assert slack.unknown_calls == []
