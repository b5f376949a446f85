"""Who may see an approval's contents: the rule for listing it, whatever a click names.

A click names an approval by id. From the card (or its DM copy) or from a list opened in the
approval's own channel, anyone there may see its arguments, as they see the card; from an
ephemeral list opened elsewhere, a DM or the App Home, only its requester, its approvers (by
id or user group) and its answerers may. Everyone else gets a clear refusal and sees nothing:
no modal, no list refreshed with that approval in it. Real signed requests through our Slack
server, against the real bot.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from urllib.parse import urlencode

import pytest

from handlers import blocks
from handlers.blocks.values import list_block_id
from playground.slack_server import BotReply
from storage.repository import PendingFilter, Repository
from tests.conftest import make_config
from tests.support.scripted_model import calls
from tests.support.slack_harness import CHANNEL, Harness, running_bot

ELSEWHERE = "C0ELSEWHERE"
SECRET = "payments-db-secret-7"
REFUSED = "only in its channel"


@pytest.fixture
async def slack(repo: Repository) -> AsyncIterator[Harness]:
    config = make_config(
        policies={
            "restart_service": {"approvers": ["U0APPROVER1", "S0ONCALL"], "ttl": "15m"},
            "deploy": {"approvers": ["U0APPROVER1"], "allow_edit": True},
        }
    )
    async with running_bot(config, repo, usergroups={"S0ONCALL": ["U0ONCALL"]}) as harness:
        await harness.mention("U0REQUESTER", calls(("restart_service", {"service": SECRET})))
        yield harness


async def approval_id(repo: Repository) -> str:
    from bot.clock import utcnow

    [approval], _ = await repo.list_pending(PendingFilter(), now=utcnow(), limit=10)
    return approval.id


def seen_by(slack: Harness, user: str) -> str:
    """Everything Slack showed ``user`` after the card: ephemerals, modals, their Home."""
    shown = [m.text + json.dumps(m.blocks) for m in slack.server.ephemerals_for(user)]
    shown += [json.dumps(v.view) for v in slack.server.views.values() if v.user == user]
    shown.append(json.dumps(slack.server.home_of(user)))
    return "\n".join(shown)


async def click_on_home(slack: Harness, user: str, action_id: str, value: str) -> BotReply:
    """A signed click from ``user``'s App Home container (no channel, no response URL)."""
    payload = {
        "type": "block_actions",
        "user": {"id": user, "username": user, "team_id": slack.server.team_id},
        "api_app_id": slack.server.app_id,
        "container": {"type": "view", "view_id": "V0HOME"},
        "trigger_id": slack.server.issue_trigger_id(user),
        "team": {"id": slack.server.team_id, "domain": slack.server.team_domain},
        "view": {"id": "V0HOME", "type": "home", "blocks": []},
        "actions": [
            {
                "type": "button",
                "action_id": action_id,
                "block_id": "home_item",
                "value": value,
                "action_ts": "1.0",
            }
        ],
    }
    body = urlencode({"payload": json.dumps(payload)}).encode()
    return await slack.server.send_raw(body, "application/x-www-form-urlencoded")


async def test_show_arguments_from_a_list_elsewhere_is_refused_to_an_outsider(
    slack: Harness,
) -> None:
    approval = await approval_id(slack.repo)
    reply = await slack.server.click_raw(
        "U0OUTSIDER", ELSEWHERE, blocks.SHOW_ARGUMENTS, approval, is_ephemeral=True
    )
    await slack.settle()
    assert reply.status == 200
    assert slack.server.views == {}, "no modal opened"
    assert any(REFUSED in t for t in slack.ephemeral_texts("U0OUTSIDER"))
    assert SECRET not in seen_by(slack, "U0OUTSIDER")


async def test_show_arguments_from_the_app_home_is_refused_to_an_outsider(slack: Harness) -> None:
    approval = await approval_id(slack.repo)
    reply = await click_on_home(slack, "U0OUTSIDER", blocks.SHOW_ARGUMENTS, approval)
    await slack.settle()
    assert reply.status == 200
    assert slack.server.views == {}, "no modal opened"
    assert REFUSED in json.dumps(slack.server.home_of("U0OUTSIDER"))
    assert SECRET not in seen_by(slack, "U0OUTSIDER")


@pytest.mark.parametrize(
    ("user", "where"),
    [
        ("U0APPROVER1", "list elsewhere"),  # an approver by id
        ("U0ONCALL", "list elsewhere"),  # an approver through a user group
        ("U0REQUESTER", "list elsewhere"),
        ("U0APPROVER1", "home"),
        ("U0REQUESTER", "home"),
        ("U0OUTSIDER", "list in its channel"),  # /approvals all lists it there
    ],
)
async def test_show_arguments_follows_the_rule_for_listing(
    slack: Harness, user: str, where: str
) -> None:
    approval = await approval_id(slack.repo)
    if where == "home":
        reply = await click_on_home(slack, user, blocks.SHOW_ARGUMENTS, approval)
    else:
        channel = CHANNEL if where == "list in its channel" else ELSEWHERE
        reply = await slack.server.click_raw(
            user, channel, blocks.SHOW_ARGUMENTS, approval, is_ephemeral=True
        )
    await slack.settle()
    assert reply.status == 200
    [opened] = slack.server.views.values()
    assert opened.user == user and SECRET in json.dumps(opened.view)


@pytest.mark.parametrize("action_id", [blocks.APPROVE, blocks.DENY])
async def test_a_click_on_a_decided_approval_elsewhere_does_not_list_it_to_an_outsider(
    slack: Harness, action_id: str
) -> None:
    """A refused click from a list re-renders that list; never with an approval the clicker
    may not see (a decided one used to be kept "in its place", arguments and all)."""
    approval = await approval_id(slack.repo)
    [card] = slack.cards()
    await slack.server.click("U0APPROVER1", card, blocks.APPROVE)
    await slack.settle()
    responses = len(slack.server.responses)
    reply = await slack.server.click_raw(
        "U0OUTSIDER",
        ELSEWHERE,
        action_id,
        approval,
        block_id=list_block_id("approve", 0, "item0"),
        is_ephemeral=True,
    )
    await slack.settle()
    assert reply.status == 200
    assert slack.server.views == {}
    answers = json.dumps([r.body for r in slack.server.responses[responses:]])
    assert SECRET not in answers and SECRET not in seen_by(slack, "U0OUTSIDER")
    assert any("not one of the approvers" in t for t in slack.ephemeral_texts("U0OUTSIDER"))


async def test_an_approver_refreshing_a_list_still_sees_the_decided_item(slack: Harness) -> None:
    """The other side of the rule: a click by someone who may see it keeps it in the list."""
    approval = await approval_id(slack.repo)
    [card] = slack.cards()
    await slack.server.click("U0APPROVER1", card, blocks.APPROVE)
    await slack.settle()
    responses = len(slack.server.responses)
    await slack.server.click_raw(
        "U0ONCALL",
        ELSEWHERE,
        blocks.APPROVE,
        approval,
        block_id=list_block_id("approve", 0, "item0"),
        is_ephemeral=True,
    )
    await slack.settle()
    answers = json.dumps([r.body for r in slack.server.responses[responses:]])
    assert SECRET in answers


async def test_a_forged_edit_submission_tells_an_outsider_nothing_of_the_approval(
    slack: Harness,
) -> None:
    """The edit form only opens for an approver; a submission naming another approval by id
    is refused by the same rule before anything about it (its state, who decided it) shows."""
    await slack.mention("U0REQUESTER", calls(("deploy", {"service": SECRET, "version": "9"})))
    card = next(c for c in slack.cards() if "deploy" in json.dumps(c.blocks))
    deploy_id = next(e["value"] for _, e in card.buttons()).partition(":")[0]
    await slack.server.click("U0APPROVER1", card, blocks.APPROVE)
    await slack.settle()
    payload = {
        "type": "view_submission",
        "team": {"id": slack.server.team_id, "domain": slack.server.team_domain},
        "user": {"id": "U0OUTSIDER", "username": "U0OUTSIDER", "team_id": slack.server.team_id},
        "api_app_id": slack.server.app_id,
        "trigger_id": slack.server.issue_trigger_id("U0OUTSIDER"),
        "view": {
            "id": "V0FORGED",
            "type": "modal",
            "callback_id": blocks.EDIT_MODAL,
            "private_metadata": deploy_id,
            "blocks": [],
            "state": {"values": {}},
        },
    }
    reply = await slack.server.send_raw(
        urlencode({"payload": json.dumps(payload)}).encode(), "application/x-www-form-urlencoded"
    )
    assert reply.status == 200
    [why] = json.loads(reply.body)["errors"].values()
    assert REFUSED in why
    assert "U0APPROVER1" not in reply.body and "pproved" not in reply.body
