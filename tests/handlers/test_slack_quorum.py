"""Quorum through Slack: a 2-of-3 approval driven by signed clicks against the real bolt app,
handlers, runner and storage (SQLite and PostgreSQL)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator

import pytest

from bot.clock import utcnow
from storage.repository import PendingFilter, Repository
from tests.conftest import BASE_CONFIG, make_config
from tests.support.ops_tools import executed
from tests.support.scripted_model import calls
from tests.support.slack_harness import CHANNEL, Harness, has_buttons, running_bot

APPROVERS = ["U0APPROVER1", "U0APPROVER2", "U0APPROVER3"]


@pytest.fixture
async def slack(repo: Repository) -> AsyncIterator[Harness]:
    policies = {
        **BASE_CONFIG["policies"],
        # allow_self_approval: the requester still never counts towards a quorum.
        "restart_service": {
            "approvers": APPROVERS,
            "min_approvals": 2,
            "allow_self_approval": True,
        },
    }
    async with running_bot(make_config(policies=policies), repo) as harness:
        yield harness


def card_text(slack: Harness, ts: str) -> str:
    card = slack.server.message(CHANNEL, ts)
    assert card is not None
    return json.dumps(card.blocks)


async def test_two_of_three_the_same_approver_twice_and_the_requester_do_not_count(
    slack: Harness, repo: Repository
) -> None:
    reply = await slack.mention("U0APPROVER3", calls(("restart_service", {"service": "db"})))
    [card] = slack.cards()
    assert "0 of 2 approvals yet" in card_text(slack, card.ts)

    # The requester (an approver, with allow_self_approval) does not count.
    await slack.server.click("U0APPROVER3", card, "approval_approve")
    await slack.settle()
    assert any("yours does not count" in t for t in slack.ephemeral_texts("U0APPROVER3"))

    await slack.server.click("U0APPROVER1", card, "approval_approve")
    await slack.settle()
    shown = card_text(slack, card.ts)
    assert "1 of 2 approvals: <@U0APPROVER1>" in shown, "the card is edited in place"
    assert has_buttons(slack.server.message(CHANNEL, card.ts))  # type: ignore[arg-type]
    assert any(
        "You approved `restart_service`" in t and "1 of 2 approvals" in t
        for t in slack.ephemeral_texts("U0APPROVER1")
    )

    # The same approver again counts once.
    await slack.server.click("U0APPROVER1", card, "approval_approve")
    await slack.settle()
    assert any("You already approved; 1 of 2" in t for t in slack.ephemeral_texts("U0APPROVER1"))
    assert executed("restart_service") == []
    [approval], _ = await repo.list_pending(PendingFilter(), now=utcnow())
    assert approval.status == "pending" and approval.approved_by == ["U0APPROVER1"]

    # An outsider does not count either.
    await slack.server.click("U0OUTSIDER", card, "approval_approve")
    await slack.settle()
    assert executed("restart_service") == []

    await slack.server.click("U0APPROVER2", card, "approval_approve")
    await slack.settle()
    assert executed("restart_service") == [{"service": "db"}]
    shown = card_text(slack, card.ts)
    assert "Approved* by <@U0APPROVER1>, <@U0APPROVER2>" in shown
    assert not has_buttons(slack.server.message(CHANNEL, card.ts))  # type: ignore[arg-type]
    assert "Results: restart_service=restarted db" in [m.text for m in slack.thread_of(reply)]

    events = [(e.event, e.actor) for e in await repo.audit_trail(approval_id=approval.id)]
    assert events.count(("approval_vote", "U0APPROVER1")) == 1
    assert ("approval_vote", "U0APPROVER2") in events
    assert ("approval_approved", "U0APPROVER2") in events


async def test_a_deny_after_one_approval_ends_it(slack: Harness) -> None:
    await slack.mention("U0REQUESTER", calls(("restart_service", {"service": "db"})))
    [card] = slack.cards()
    await slack.server.click("U0APPROVER1", card, "approval_approve")
    await slack.settle()
    await slack.server.click("U0APPROVER2", card, "approval_deny")
    [opened] = [v for v in slack.server.views.values() if v.user == "U0APPROVER2"]
    await slack.server.submit_view(
        "U0APPROVER2",
        opened.id,
        {"deny_reason": {"reason": {"type": "plain_text_input", "value": "not today"}}},
    )
    await slack.settle()
    shown = card_text(slack, card.ts)
    assert "Denied* by <@U0APPROVER2>" in shown and "not today" in shown
    assert not has_buttons(slack.server.message(CHANNEL, card.ts))  # type: ignore[arg-type]
    assert executed("restart_service") == []


async def test_simultaneous_clicks_run_the_tool_once_after_the_second_approver(
    slack: Harness,
) -> None:
    await slack.mention("U0REQUESTER", calls(("restart_service", {"service": "db"})))
    [card] = slack.cards()
    clicks = await asyncio.gather(
        *(
            slack.server.click(user, card, "approval_approve")
            for user in ["U0APPROVER1"] * 5 + ["U0APPROVER2"] * 5 + ["U0REQUESTER"] * 2
        )
    )
    assert all(c.status == 200 for c in clicks)
    await slack.settle()
    assert executed("restart_service") == [{"service": "db"}]
    assert "Approved* by" in card_text(slack, card.ts)


async def test_approvals_list_shows_progress(slack: Harness) -> None:
    await slack.mention("U0REQUESTER", calls(("restart_service", {"service": "db"})))
    [card] = slack.cards()
    await slack.server.click("U0APPROVER1", card, "approval_approve")
    await slack.settle()
    listed = await slack.server.slash_command("U0APPROVER2", CHANNEL, text="")
    assert "1 of 2 approvals: <@U0APPROVER1>" in listed.body


async def test_the_requester_is_not_asked_to_decide_their_own_quorum(slack: Harness) -> None:
    await slack.mention("U0APPROVER3", calls(("restart_service", {"service": "db"})))
    listed = await slack.server.slash_command("U0APPROVER3", CHANNEL, text="")
    assert "Nothing is waiting for your decision" in listed.body
    mine = await slack.server.slash_command("U0APPROVER3", CHANNEL, text="mine")
    assert "0 of 2 approvals yet" in mine.body


async def test_the_home_shows_progress_and_is_refreshed_by_a_vote(
    slack: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    from handlers.slack import home

    monkeypatch.setattr(home, "DEBOUNCE", 0.01)
    monkeypatch.setattr(home, "PUBLISH_INTERVAL", 0.0)
    await slack.mention("U0REQUESTER", calls(("restart_service", {"service": "db"})))
    await slack.server.open_home("U0APPROVER2")
    await slack.settle()
    assert "0 of 2 approvals yet" in json.dumps(slack.server.home_of("U0APPROVER2"))
    [card] = slack.cards()
    await slack.server.click("U0APPROVER1", card, "approval_approve")
    await slack.settle()
    await asyncio.sleep(0.1)
    await slack.settle()
    assert "1 of 2 approvals: <@U0APPROVER1>" in json.dumps(slack.server.home_of("U0APPROVER2"))
    await slack.server.click_home("U0APPROVER2", "approval_approve")
    await slack.settle()
    assert executed("restart_service") == [{"service": "db"}]


@pytest.fixture
async def oncall(repo: Repository) -> AsyncIterator[Harness]:
    """2 of U0ALICE and the S0ONCALL user group must approve."""
    policies = {"restart_service": {"approvers": ["U0ALICE", "S0ONCALL"], "min_approvals": 2}}
    groups = {"S0ONCALL": ["U0ONCALL1", "U0ONCALL2", "U0ONCALL3"]}
    async with running_bot(make_config(policies=policies), repo, usergroups=groups) as harness:
        await harness.mention("U0REQUESTER", calls(("restart_service", {"service": "db"})))
        yield harness


async def test_a_voter_removed_from_the_group_no_longer_counts(
    oncall: Harness, repo: Repository
) -> None:
    """Removed from the approver group after voting: the next vote is not the deciding one;
    the card lists who still counts, the audit keeps the discarded vote."""
    slack = oncall
    [card] = slack.cards()
    await slack.server.click("U0ONCALL1", card, "approval_approve")
    await slack.settle()
    assert "1 of 2 approvals: <@U0ONCALL1>" in card_text(slack, card.ts)
    # Slack's event went to another replica: only a fresh lookup knows.
    await slack.server.change_usergroup("S0ONCALL", ["U0ONCALL2", "U0ONCALL3"], notify=False)

    await slack.server.click("U0ONCALL2", card, "approval_approve")
    await slack.settle()
    assert executed("restart_service") == []
    shown = card_text(slack, card.ts)
    assert "1 of 2 approvals: <@U0ONCALL2>" in shown and "U0ONCALL1" not in shown
    [approval], _ = await repo.list_pending(PendingFilter(), now=utcnow())
    assert approval.approved_by == ["U0ONCALL2"]
    trail = [(e.event, e.actor) for e in await repo.audit_trail(approval_id=approval.id)]
    assert ("approval_vote_discarded", "U0ONCALL1") in trail

    await slack.server.click("U0ONCALL3", card, "approval_approve")
    await slack.settle()
    assert executed("restart_service") == [{"service": "db"}]
    assert "Approved* by <@U0ONCALL2>, <@U0ONCALL3>" in card_text(slack, card.ts)


async def test_a_deciding_vote_is_not_recorded_while_slack_cannot_list_the_group(
    oncall: Harness, repo: Repository
) -> None:
    """U0ALICE, named by id, needs no lookup herself; the earlier voter's membership cannot
    be checked (rate limited): nothing is decided or recorded, she is told to try again, and
    her retry decides."""
    slack = oncall
    [card] = slack.cards()
    await slack.server.click("U0ONCALL1", card, "approval_approve")
    await slack.settle()
    slack.server.fail("usergroups.users.list", "ratelimited", times=1)
    await slack.server.click("U0ALICE", card, "approval_approve")
    await slack.settle()
    assert any("couldn't check with Slack" in t for t in slack.ephemeral_texts("U0ALICE"))
    assert executed("restart_service") == []
    [approval], _ = await repo.list_pending(PendingFilter(), now=utcnow())
    assert approval.approved_by == ["U0ONCALL1"]
    assert await repo.approve_voters(approval.id) == ["U0ONCALL1"]

    await slack.server.click("U0ALICE", card, "approval_approve")
    await slack.settle()
    assert executed("restart_service") == [{"service": "db"}]
