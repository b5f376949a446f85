"""SIGKILL of a real ``approval-bot serve`` in the windows a quorum adds: right after the
N-th (deciding) vote's commit, and between an earlier vote's commit and its card edit.

The deciding vote claims the run's resume in its own transaction, exactly as a single
approval does: when its replica dies, another replica's sweeper takes the run over once the
dead lease runs out, and the call runs once. SQLite and PostgreSQL; leases last 2 s.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from playground.slack_server import SlackServer
from tests.faults.harness import (
    APPROVER,
    OTHER_APPROVER,
    Deployment,
    approval_id_of,
    assert_settled,
    card_outcome,
    eventually,
    request,
)

RESTART_WEB = request(("restart_service", {"service": "web"}))
POLICY = '[policies.restart_service]\napprovers = ["U0APPROVER1", "U0APPROVER2"]\n'


@pytest.fixture
async def deployment(
    slack: SlackServer, database_url: str, tmp_path: Path
) -> AsyncIterator[Deployment]:
    deployment = Deployment(slack, database_url, tmp_path)
    config = deployment.config.read_text()
    assert POLICY in config
    deployment.config.write_text(config.replace(POLICY, POLICY + "min_approvals = 2\n"))
    try:
        yield deployment
    finally:
        await deployment.close()


async def test_kill_after_the_deciding_vote_is_stored_another_replica_runs_it_once(
    deployment: Deployment,
) -> None:
    survivor = await deployment.start()
    asked = await deployment.mention(RESTART_WEB)
    card = await deployment.card(asked.ts)
    approval_id = approval_id_of(card)
    first = await deployment.slack.click(APPROVER, card, "approval_approve")
    assert first.status == 200
    await eventually(lambda: "1 of 2 approvals" in str(card.blocks), "the first vote's card")

    doomed = await deployment.start(failpoint="decision_stored")
    second = await deployment.slack.click(
        OTHER_APPROVER, card, "approval_approve", bot_url=doomed.events_url
    )
    assert second.status == 200
    await deployment.crashed_at(doomed, "decision_stored")
    assert deployment.executions("restart_service", "web") == 0
    approval = await deployment.approval(approval_id)
    assert approval.status == "approved" and approval.approved_by == [APPROVER, OTHER_APPROVER]

    # The survivor's sweeper takes the run over once the dead replica's lease runs out.
    await assert_settled(
        deployment,
        asked.ts,
        approval_id,
        status="executed",
        answer="restarted web",
        card_says="ran",
    )
    assert deployment.executions("restart_service", "web") == 1
    assert survivor.process.returncode is None


async def test_kill_between_a_vote_and_its_card_edit_the_card_catches_up(
    deployment: Deployment,
) -> None:
    doomed = await deployment.start(failpoint="decision_stored")
    asked = await deployment.mention(RESTART_WEB)
    card = await deployment.card(asked.ts)
    approval_id = approval_id_of(card)
    await deployment.slack.click(APPROVER, card, "approval_approve")
    await deployment.crashed_at(doomed, "decision_stored")
    assert "0 of 2 approvals yet" in str(card.blocks), card_outcome(card)
    assert (await deployment.approval(approval_id)).approved_by == [APPROVER]

    await deployment.start()
    # The approver sees no change and clicks again: refused as a duplicate, the card shows
    # their vote. Then the second approver's vote decides, and the call runs once.
    again = await deployment.slack.click(APPROVER, card, "approval_approve")
    assert again.status == 200
    await eventually(
        lambda: "1 of 2 approvals: <@U0APPROVER1>" in str(card.blocks), "the card to catch up"
    )
    await deployment.slack.click(OTHER_APPROVER, card, "approval_approve")
    await assert_settled(
        deployment,
        asked.ts,
        approval_id,
        status="executed",
        answer="restarted web",
        card_says="ran",
    )
    assert deployment.executions("restart_service", "web") == 1


async def test_kill_between_a_vote_and_its_card_edit_the_sweeper_edits_the_card(
    deployment: Deployment,
) -> None:
    """Nobody clicks again: the vote's durable mark makes a survivor's sweeper edit the card."""
    doomed = await deployment.start(failpoint="decision_stored")
    asked = await deployment.mention(RESTART_WEB)
    card = await deployment.card(asked.ts)
    approval_id = approval_id_of(card)
    await deployment.slack.click(APPROVER, card, "approval_approve")
    await deployment.crashed_at(doomed, "decision_stored")
    assert "0 of 2 approvals yet" in str(card.blocks), card_outcome(card)

    await deployment.start()
    await eventually(
        lambda: "1 of 2 approvals: <@U0APPROVER1>" in str(card.blocks),
        lambda: f"the sweeper to edit the card: {card_outcome(card)}",
    )
    assert (await deployment.approval(approval_id)).status == "pending"
