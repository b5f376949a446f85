"""The App Home: published on app_home_opened, its buttons decide, refreshed after a
decision. Real bolt app, handlers, runner and storage against our Slack server."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import pytest

from handlers.app import CLICK_NOT_HANDLED
from handlers.slack import home
from storage.repository import Repository
from tests.conftest import make_config
from tests.support import ops_tools
from tests.support.slack_harness import Harness, running_bot

REQUESTER, APPROVER, OTHER_APPROVER = "U0REQUESTER", "U0APPROVER1", "U0APPROVER2"


def calls(name: str, arguments: dict[str, Any]) -> str:
    return json.dumps({"tool_calls": [{"name": name, "arguments": arguments}]})


def shown(view: dict[str, Any] | None) -> str:
    assert view is not None, "no Home was published"
    return json.dumps(view["blocks"])


@pytest.fixture
async def slack(repo: Repository, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Harness]:
    monkeypatch.setattr(home, "DEBOUNCE", 0.01)
    monkeypatch.setattr(home, "PUBLISH_INTERVAL", 0.0)
    async with running_bot(make_config(), repo) as harness:
        yield harness


async def test_home_shows_what_waits_for_you_and_its_buttons_decide(slack: Harness) -> None:
    await slack.mention(REQUESTER, calls("restart_service", {"service": "payments"}))
    reply = await slack.server.open_home(APPROVER)
    assert reply.status == 200
    await slack.settle()

    view = slack.server.home_of(APPROVER)
    assert view is not None and view["type"] == "home"
    text = shown(view)
    assert "Waiting for you" in text and "restart_service" in text and "payments" in text
    assert f"<@{REQUESTER}>" in text and "expires" in text

    # The requester's Home lists it under their requests, without buttons to decide it.
    await slack.server.open_home(REQUESTER)
    await slack.settle()
    mine = shown(slack.server.home_of(REQUESTER))
    assert "Your requests" in mine and "payments" in mine
    assert "approval_approve" not in mine

    await slack.server.click_home(APPROVER, "approval_approve")
    await slack.settle()
    assert ops_tools.EXECUTED == [("restart_service", {"service": "payments"})]

    # Both Homes were refreshed after the decision: nothing waits, the decision shows.
    after = shown(slack.server.home_of(APPROVER))
    assert "approval_approve" not in after
    assert "Nothing is waiting for your decision" in after
    assert "Approved* by <@U0APPROVER1>" in after
    requester_after = shown(slack.server.home_of(REQUESTER))
    assert "None of your requests are waiting" in requester_after
    assert "Approved* by <@U0APPROVER1>" in requester_after
    # The card in the channel was settled too, as from any other button.
    [card] = slack.cards()
    assert "Approved* by" in json.dumps(card.blocks)


async def test_a_refused_click_on_the_home_says_why_on_the_home(slack: Harness) -> None:
    await slack.mention(REQUESTER, calls("restart_service", {"service": "db"}))
    await slack.server.open_home(APPROVER)
    await slack.server.open_home(OTHER_APPROVER)
    await slack.settle()
    # Someone else decides first; the Home still shows the button until it refreshes.
    [card] = slack.cards()
    stale = slack.server.home_of(APPROVER)
    await slack.server.click(OTHER_APPROVER, card, "approval_approve")
    await slack.settle()
    slack.server.homes[(slack.server.team_id, APPROVER)] = stale  # the view before the refresh
    await slack.server.click_home(APPROVER, "approval_approve")
    await slack.settle()
    text = shown(slack.server.home_of(APPROVER))
    assert "Already approved" in text
    assert ops_tools.EXECUTED == [("restart_service", {"service": "db"})]


async def test_deny_from_the_home_asks_a_reason_and_says_so_on_the_home(
    slack: Harness,
) -> None:
    await slack.mention(REQUESTER, calls("restart_service", {"service": "cache"}))
    await slack.server.open_home(APPROVER)
    await slack.settle()
    await slack.server.click_home(APPROVER, "approval_deny")
    [modal] = [v for v in slack.server.views.values() if not v.closed]
    reply = await slack.server.submit_view(
        APPROVER,
        modal.id,
        {"deny_reason": {"reason": {"type": "plain_text_input", "value": "freeze"}}},
    )
    assert reply.status == 200
    await slack.settle()
    assert ops_tools.EXECUTED == []
    text = shown(slack.server.home_of(APPROVER))
    assert "Denied" in text and "freeze" in text
    assert "approval_deny" not in text


async def test_a_home_is_refreshed_when_a_new_approval_waits_for_you(
    slack: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    await slack.server.open_home(APPROVER)
    await slack.settle()
    assert "Nothing is waiting for your decision" in shown(slack.server.home_of(APPROVER))
    opened = len(slack.server.calls_to("views.publish"))

    # Five approvals in one turn: one refresh (debounced), not five publishes.
    # Long enough that the five cards are posted within it on a busy machine (a CI runner
    # beside other test workers), where 0.5 s saw two refreshes.
    monkeypatch.setattr(home, "DEBOUNCE", 2.0)
    five = json.dumps(
        {
            "tool_calls": [
                {"name": "restart_service", "arguments": {"service": f"svc{i}"}} for i in range(5)
            ]
        }
    )
    await slack.mention(REQUESTER, five)
    text = shown(slack.server.home_of(APPROVER))
    assert all(f"svc{i}" in text for i in range(5))
    assert len(slack.server.calls_to("views.publish")) == opened + 1


async def test_approvals_anyone_may_decide_stay_off_the_home(
    repo: Repository, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Listed on a Home, a private channel's approval would be seen (and decided) outside it.
    monkeypatch.setattr(home, "DEBOUNCE", 0.01)
    config = make_config(policies={"restart_service": {"approvers": []}})
    async with running_bot(config, repo) as slack:
        await slack.mention(REQUESTER, calls("restart_service", {"service": "private"}))
        await slack.server.open_home(OTHER_APPROVER)
        await slack.settle()
        text = shown(slack.server.home_of(OTHER_APPROVER))
        assert "private" not in text and "Nothing is waiting for your decision" in text
        # Its own channel's /approvals still lists it.
        listing = await slack.server.slash_command(OTHER_APPROVER, "C0OPS", text="")
        assert "private" in listing.body


async def test_an_approve_click_on_the_home_whose_dispatch_fails_is_told_at_its_top(
    slack: Harness,
) -> None:
    """An Approve click is answered 200 before bolt dispatches it; a Home click has no
    response URL, so when its dispatch fails the clicker is told at the top of their Home
    (``handlers.app.CLICK_NOT_HANDLED``), and nothing is decided."""
    await slack.mention(REQUESTER, calls("restart_service", {"service": "payments"}))
    await slack.server.open_home(APPROVER)
    await slack.settle()

    slack.break_click_dispatch()
    reply = await slack.server.click_home(APPROVER, "approval_approve")
    assert reply.status == 200
    await slack.settle()
    after = shown(slack.server.home_of(APPROVER))
    assert json.dumps(CLICK_NOT_HANDLED)[1:-1] in after
    assert "approval_approve" in after, "still waiting for a decision"
    assert ops_tools.EXECUTED == []
