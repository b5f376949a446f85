"""Quorum cards under stress: a vote's card edit that lands after a later vote's edit, and
an Approve clicked again after the first one's card edit was lost (signed clicks against the
real bolt app, SQLite and PostgreSQL)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import timedelta

import pytest
from freezegun import freeze_time

from bot.clock import utcnow
from handlers.flows import sweep_once
from playground.slack_server import SlackServer
from storage.repository import PendingFilter, Repository
from tests.conftest import BASE_CONFIG, make_config
from tests.handlers.test_slack_quorum import APPROVERS, calls, card_text
from tests.support.slack_harness import SECRET, Harness, running_bot


@pytest.fixture
async def slack(repo: Repository) -> AsyncIterator[Harness]:
    policies = {
        **BASE_CONFIG["policies"],
        "restart_service": {"approvers": APPROVERS, "min_approvals": 3},
    }
    async with running_bot(make_config(policies=policies), repo) as harness:
        yield harness


async def test_a_late_card_edit_of_an_earlier_vote_does_not_hide_a_later_one(
    slack: Harness,
) -> None:
    await slack.mention("U0REQUESTER", calls(("restart_service", {"service": "db"})))
    [card] = slack.cards()
    # The first vote's card edit is rate limited: it lands a second later, after the
    # second vote's edit, showing the one vote it read.
    slack.server.rate_limit("chat.update", times=1, retry_after=1)
    await slack.server.click("U0APPROVER1", card, "approval_approve")
    for _ in range(200):
        if any(c.method == "chat.update" and c.status == 429 for c in slack.server.calls):
            break
        await asyncio.sleep(0.01)
    await slack.server.click("U0APPROVER2", card, "approval_approve")
    await slack.settle()
    assert "2 of 3 approvals: <@U0APPROVER1>, <@U0APPROVER2>" in card_text(slack, card.ts)


async def test_clicking_approve_again_repairs_a_card_whose_edit_was_lost(
    slack: Harness, repo: Repository
) -> None:
    await slack.mention("U0REQUESTER", calls(("restart_service", {"service": "db"})))
    [card] = slack.cards()
    # The vote is stored but its card edit never happens (the replica died in between,
    # or Slack was out of reach): the card still says nobody approved.
    [approval], _ = await repo.list_pending(PendingFilter(), now=utcnow())
    await slack.bot.services.runner.decide(approval.id, actor="U0APPROVER1", approve=True)
    assert "0 of 3 approvals yet" in card_text(slack, card.ts)

    # The approver, seeing no change, clicks again: refused as a duplicate, and the card
    # is brought up to date.
    await slack.server.click("U0APPROVER1", card, "approval_approve")
    await slack.settle()
    assert any("You already approved" in t for t in slack.ephemeral_texts("U0APPROVER1"))
    assert "1 of 3 approvals: <@U0APPROVER1>" in card_text(slack, card.ts)
    assert utcnow() < approval.expires_at


async def test_a_vote_from_another_workspace_on_the_same_approval_id_is_refused(
    slack: Harness, repo: Repository
) -> None:
    await slack.mention("U0REQUESTER", calls(("restart_service", {"service": "db"})))
    [card] = slack.cards()
    # Signed by Slack (same app, same signing secret) but sent by a workspace the approval
    # does not belong to, naming a user id that is an approver here.
    payload, trigger_id, response_url = slack.server._prepare_click(
        "U0APPROVER1", card, "approval_approve", None
    )
    payload["team"] = {"id": "T0ELSEWHERE", "domain": "elsewhere"}
    reply = await slack.server._send_interactive(payload, trigger_id, response_url)
    await slack.settle()
    assert reply.status == 200
    [approval], _ = await repo.list_pending(PendingFilter(), now=utcnow())
    assert approval.approved_by in (None, [])
    events = [e.event for e in await repo.audit_trail(approval_id=approval.id)]
    assert "approval_vote" not in events
    told = slack.ephemeral_texts("U0APPROVER1")
    assert any("does not belong to this workspace" in t for t in told), told
    assert "0 of 3 approvals yet" in card_text(slack, card.ts)


async def test_a_card_edit_slack_failed_is_made_by_a_later_sweep(repo: Repository) -> None:
    """Slack refuses the vote's card edit for now (429s past the client's retries): the
    vote's mark stays, and a sweep after the grace edits the card; nobody clicks again."""
    policies = {
        **BASE_CONFIG["policies"],
        "restart_service": {"approvers": APPROVERS, "min_approvals": 2},
    }
    with freeze_time("2026-11-30 10:00:00", real_asyncio=True) as clock:
        server = SlackServer(signing_secret=SECRET)
        await server.start()
        try:
            async with running_bot(make_config(policies=policies), repo, server=server) as slack:
                await slack.mention("U0REQUESTER", calls(("restart_service", {"service": "db"})))
                [card] = slack.cards()
                server.rate_limit("chat.update", times=4, retry_after=0)
                await server.click("U0APPROVER1", card, "approval_approve")
                await slack.settle()
                assert "0 of 2 approvals yet" in card_text(slack, card.ts)
                clock.tick(timedelta(minutes=1))
                await sweep_once(slack.bot.services)
                await slack.settle()
                assert "1 of 2 approvals: <@U0APPROVER1>" in card_text(slack, card.ts)
                updates = len(server.calls_to("chat.update"))
                clock.tick(timedelta(minutes=1))
                await sweep_once(slack.bot.services)  # edited and unmarked: not edited again
                await slack.settle()
                assert len(server.calls_to("chat.update")) == updates
        finally:
            await server.stop()


async def test_a_batch_card_slack_keeps_refusing_does_not_hold_up_the_other_cards_edits(
    repo: Repository,
) -> None:
    """Approve all on a quorum batch marks every row of it; Slack keeps refusing that card's
    edit for now (one workspace rate limited, a message Slack fails on). Each sweep's first
    mark was then one of the batch's other rows, whose mark the refusal never moved on (only
    the batch's first row's): every sweep stopped at that card, and no other card's buttons
    were ever taken away while it failed."""
    policies = {
        **BASE_CONFIG["policies"],
        "restart_service": {"approvers": APPROVERS, "min_approvals": 2},
    }
    config = make_config(policies=policies, max_approvals_per_turn=30)
    with freeze_time("2026-11-30 10:00:00", real_asyncio=True) as clock:
        server = SlackServer(signing_secret=SECRET)
        await server.start()
        try:
            async with running_bot(config, repo, server=server) as slack:
                batch = [("restart_service", {"service": f"svc-{i:02d}"}) for i in range(4)]
                await slack.mention("U0REQUESTER", calls(*batch))
                await slack.mention("U0REQUESTER", calls(("restart_service", {"service": "db"})))
                [single] = slack.cards()
                [batch_card] = [
                    m
                    for m in server.messages
                    if m.channel == single.channel
                    and any(b.get("block_id") == "batch_summary" for b in m.blocks)
                ]
                refused = {batch_card.ts}
                server.fail("chat.update", times=10_000, when=lambda a: a.get("ts") in refused)
                await server.click("U0APPROVER1", batch_card, "batch_approve_all")
                await slack.settle()
                clock.tick(timedelta(seconds=1))
                refused.add(single.ts)  # once: Slack takes this card's edits from now on
                await server.click("U0APPROVER1", single, "approval_approve")
                await slack.settle()
                refused.discard(single.ts)
                assert "0 of 2 approvals yet" in card_text(slack, single.ts)
                for _ in range(3):
                    clock.tick(timedelta(minutes=1))
                    await sweep_once(slack.bot.services)
                    await slack.settle()
                assert "1 of 2 approvals: <@U0APPROVER1>" in card_text(slack, single.ts)
        finally:
            await server.stop()
