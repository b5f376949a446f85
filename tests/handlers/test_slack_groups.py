"""User-group approvers: someone removed from the group loses the right at once."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import pytest

from storage.repository import Repository
from tests.conftest import make_config
from tests.support import ops_tools
from tests.support.slack_harness import CHANNEL, Harness, has_buttons, running_bot

RESTART = json.dumps({"tool_calls": [{"name": "restart_service", "arguments": {"service": "db"}}]})


@pytest.fixture
async def slack(repo: Repository) -> AsyncIterator[Harness]:
    config = make_config(policies={"restart_service": {"approvers": ["S0ONCALL"]}})
    groups = {"S0ONCALL": ["U0ONCALL", "U0OTHER"]}
    async with running_bot(config, repo, usergroups=groups) as harness:
        await harness.mention("U0REQUESTER", RESTART)
        yield harness


async def lists_the_approval(slack: Harness, user: str) -> bool:
    listed = await slack.server.slash_command(user, CHANNEL, text="")
    assert listed.status == 200
    return "restart_service" in listed.body


async def test_a_member_removed_without_this_replica_hearing_of_it_cannot_approve(
    slack: Harness,
) -> None:
    assert await lists_the_approval(slack, "U0ONCALL")  # the membership is now cached
    # Removed; Slack's event went to another replica: this one's cache still says yes.
    await slack.server.change_usergroup("S0ONCALL", ["U0OTHER"], notify=False)
    [card] = slack.cards()
    await slack.server.click("U0ONCALL", card, "approval_approve")
    await slack.settle()
    assert any("not one of the approvers" in t for t in slack.ephemeral_texts("U0ONCALL"))
    assert ops_tools.EXECUTED == []
    assert has_buttons(slack.server.message(CHANNEL, card.ts))  # type: ignore[arg-type]
    # The confirmation refreshed the cache: the list agrees now.
    assert not await lists_the_approval(slack, "U0ONCALL")
    await slack.server.click("U0OTHER", card, "approval_approve")
    await slack.settle()
    assert ops_tools.EXECUTED == [("restart_service", {"service": "db"})]


async def test_group_change_events_empty_the_cache(slack: Harness) -> None:
    assert await lists_the_approval(slack, "U0ONCALL")
    changed = await slack.server.change_usergroup("S0ONCALL", ["U0OTHER"])
    assert changed is not None and changed.status == 200
    assert not await lists_the_approval(slack, "U0ONCALL")

    assert not await lists_the_approval(slack, "U0NEWCOMER")
    slack.server.usergroups["S0ONCALL"].append("U0NEWCOMER")
    updated = await slack.server.usergroup_updated("S0ONCALL")
    assert updated.status == 200
    assert await lists_the_approval(slack, "U0NEWCOMER")
    # The deny form opens only for someone who may deny: the newcomer now may.
    [card] = slack.cards()
    await slack.server.click("U0NEWCOMER", card, "approval_deny")
    assert [v.user for v in slack.server.views.values()] == ["U0NEWCOMER"]


async def test_a_confirmed_member_approves_with_one_extra_lookup(slack: Harness) -> None:
    assert await lists_the_approval(slack, "U0ONCALL")
    before = len(slack.server.calls_to("usergroups.users.list"))
    [card] = slack.cards()
    await slack.server.click("U0ONCALL", card, "approval_approve")
    await slack.settle()
    assert ops_tools.EXECUTED == [("restart_service", {"service": "db"})]
    assert len(slack.server.calls_to("usergroups.users.list")) == before + 1


async def test_an_approver_named_by_id_decides_while_slack_cannot_list_groups(
    repo: Repository,
) -> None:
    """Slack rate limits usergroups.users.list (a big group's DM copies, a burst): a person
    the policy names by id needs no group lookup to approve, so their click still works."""
    config = make_config(policies={"restart_service": {"approvers": ["U0LEAD", "S0ONCALL"]}})
    groups = {"S0ONCALL": ["U0ONCALL"]}
    async with running_bot(config, repo, usergroups=groups) as slack:
        slack.server.fail("usergroups.users.list", "ratelimited", times=100)
        await slack.mention("U0REQUESTER", RESTART)
        [card] = slack.cards()
        await slack.server.click("U0LEAD", card, "approval_approve")
        await slack.settle()
        assert ops_tools.EXECUTED == [("restart_service", {"service": "db"})]
        # A group member's click still needs the lookup: answered, never decided on a guess.
        slack.server.fail("usergroups.users.list", "ratelimited", times=100)
        await slack.mention("U0REQUESTER", RESTART)
        card = slack.cards()[-1]
        await slack.server.click("U0ONCALL", card, "approval_approve")
        await slack.settle()
        assert len(ops_tools.EXECUTED) == 1
        assert has_buttons(slack.server.message(CHANNEL, card.ts))  # type: ignore[arg-type]


async def test_an_approver_named_by_id_denies_through_the_form_while_groups_are_rate_limited(
    repo: Repository,
) -> None:
    """The Deny form's opening checks who clicked as the decision does: named by id first,
    so Slack answering 429 to usergroups.users.list does not lock a named approver out."""
    config = make_config(policies={"restart_service": {"approvers": ["U0LEAD", "S0ONCALL"]}})
    async with running_bot(config, repo, usergroups={"S0ONCALL": ["U0ONCALL"]}) as slack:
        slack.server.rate_limit("usergroups.users.list", times=100, retry_after=0)
        await slack.mention("U0REQUESTER", RESTART)
        [card] = slack.cards()
        # Only a group could let this one decide: a clear answer, no form, nothing changed.
        await slack.server.click("U0ONCALL", card, "approval_deny")
        await slack.settle()
        assert any("couldn't reach Slack to check" in t for t in slack.ephemeral_texts("U0ONCALL"))
        assert not slack.server.views
        assert has_buttons(slack.server.message(CHANNEL, card.ts))  # type: ignore[arg-type]

        await slack.server.click("U0LEAD", card, "approval_deny")
        [opened] = [v for v in slack.server.views.values() if v.user == "U0LEAD"]
        submitted = await slack.server.submit_view(
            "U0LEAD",
            opened.id,
            {"deny_reason": {"reason": {"type": "plain_text_input", "value": "not now"}}},
        )
        assert submitted.status == 200
        await slack.settle()
        approval = await repo.get_approval(
            json.loads(opened.view["private_metadata"])["approval_id"]
        )
        assert approval is not None and (approval.status, approval.decided_by) == (
            "denied",
            "U0LEAD",
        )
        assert ops_tools.EXECUTED == []
        assert not has_buttons(slack.server.message(CHANNEL, card.ts))  # type: ignore[arg-type]
