"""Edit, then approve, on two ``approval-bot serve`` replicas on one PostgreSQL: the replica
that committed an edit's approval is killed (SIGKILL) right after the commit; the other
replica takes the run over and runs the edited call, exactly once, with the edited
arguments (the payload hash binds them), never the proposed ones. And an edit and an
Approve reaching the two replicas at once settle the call once."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from playground.slack_server import SlackServer
from tests.faults.harness import (
    APPROVER,
    CHANNEL,
    OTHER_APPROVER,
    REQUESTER,
    Deployment,
    card_outcome,
    eventually,
    request,
)

ANYONE = '[policies.scale_service]\napproval = "required"  # by anyone but the requester\n'
EDITABLE = ANYONE + "allow_edit = true\n"


@pytest.fixture
async def editable(
    slack: SlackServer, postgres_database: str, tmp_path: Path
) -> AsyncIterator[Deployment]:
    deployment = Deployment(slack, postgres_database, tmp_path)  # 2 s leases
    config = deployment.config.read_text()
    assert ANYONE in config
    deployment.config.write_text(config.replace(ANYONE, EDITABLE))
    try:
        yield deployment
    finally:
        await deployment.close()


async def test_a_replica_killed_after_an_edit_commit_the_other_runs_the_edited_call_once(
    editable: Deployment,
) -> None:
    deployment, slack = editable, editable.slack
    doomed = await deployment.start(failpoint="decision_stored@1")
    survivor = await deployment.start()
    asked = await slack.mention(
        REQUESTER,
        CHANNEL,
        "<@U0BOT> " + request(("scale_service", {"service": "web"})),
        bot_url=survivor.events_url,
    )
    assert asked.status == 200 and asked.message is not None
    card = await deployment.card(asked.message.ts)
    clicked = await slack.click(APPROVER, card, "approval_edit", bot_url=doomed.events_url)
    assert clicked.status == 200
    view = await eventually(
        lambda: next((v for v in slack.views.values() if v.user == APPROVER), None),
        "the edit modal to open",
    )
    field = {"value": {"type": "plain_text_input", "value": "api"}}
    submitted = await slack.submit_view(
        APPROVER, view.id, {"edit_arg:service": field}, bot_url=doomed.events_url
    )
    assert submitted.status == 200 and submitted.body in ("", "null"), submitted.body
    await deployment.crashed_at(doomed, "decision_stored")

    await deployment.answer(asked.message.ts, "scaled api")
    ran = [e["service"] for e in deployment.tool_events() if e["event"] == "ran"]
    assert ran == ["api"]
    assert len(deployment.answers(asked.message.ts, "scaled api")) == 1
    ((edited, status),) = await deployment.rows(
        "SELECT edited_arguments::text, status FROM approvals"
    )
    assert '"api"' in edited and status == "executed"
    (card,) = deployment.cards(asked.message.ts)
    await eventually(lambda: "ran" in card_outcome(card), "the card to say it ran")


async def test_an_edit_and_an_approve_on_two_replicas_at_once_run_the_call_once(
    editable: Deployment,
) -> None:
    """The edit's submission and another approver's Approve reach different replicas at
    the same moment: one settles the approval, the call runs once, with the arguments of
    the one that won (the row says which)."""
    deployment, slack = editable, editable.slack
    first, second = await deployment.start(), await deployment.start()
    for i in range(5):
        asked = await slack.mention(
            REQUESTER,
            CHANNEL,
            "<@U0BOT> " + request(("scale_service", {"service": f"svc{i}"})),
            bot_url=first.events_url,
        )
        assert asked.message is not None
        card = await deployment.card(asked.message.ts)
        before = set(slack.views)
        await slack.click(APPROVER, card, "approval_edit", bot_url=first.events_url)
        view = await eventually(
            lambda before=before: next(
                (slack.views[v] for v in slack.views if v not in before), None
            ),
            "the edit modal to open",
        )
        field = {"value": {"type": "plain_text_input", "value": f"edited{i}"}}
        replies = await asyncio.gather(
            slack.submit_view(
                APPROVER, view.id, {"edit_arg:service": field}, bot_url=first.events_url
            ),
            slack.click(OTHER_APPROVER, card, "approval_approve", bot_url=second.events_url),
        )
        assert [r.status for r in replies] == [200, 200]
        answer = await deployment.answer(asked.message.ts, "scaled ")
        ran = [e["service"] for e in deployment.tool_events() if e["event"] == "ran"][i]
        assert ran in (f"svc{i}", f"edited{i}")
        assert f"scaled {ran}" in answer.text
    ran = [e["service"] for e in deployment.tool_events() if e["event"] == "ran"]
    assert len(ran) == 5
    rows = await deployment.rows(
        "SELECT arguments->>'service', edited_arguments->>'service', status FROM approvals"
    )
    assert all(status == "executed" for _, _, status in rows), rows
    assert sorted(ran) == sorted(e or p for p, e, _ in rows)
