"""A decision is judged on who may decide now, even when an edit changed that while the click
was on its way (Slack slow to say who the clicker is). An Approve of the old arguments is stale
(its copy showed them); a Deny reads the approval again for its policy check instead of taking
the click's first read (found by the review of ``Runner.decide``'s ``read``)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from storage.repository import Repository
from tests.handlers.test_slack_edits import RULES, calls, edit_config, form, open_edit
from tests.support.ops_tools import executed
from tests.support.slack_harness import Harness, running_bot

DENY_FORM = {"deny_reason": {"reason": {"type": "plain_text_input", "value": "no"}}}


@pytest.fixture
async def ruled(repo: Repository) -> AsyncIterator[Harness]:
    """scale_service: more than 20 replicas needs the SRE lead (test_slack_edits' rules)."""
    async with running_bot(edit_config(rules=RULES), repo) as harness:
        yield harness


async def until_edited(repo: Repository, approval_id: str) -> None:
    for _ in range(200):
        approval = await repo.get_approval(approval_id)
        if approval is not None and approval.approvers == ["U0SRELEAD"]:
            return
        await asyncio.sleep(0.02)
    raise AssertionError("the edit never landed")


async def decided_during_an_edit(slack: Harness, repo: Repository, approve: bool) -> str:
    """U0APPROVER2 decides while U0APPROVER1's edit to 30 replicas (only the SRE lead may
    decide that) lands; the decision waits on Slack's ``users.info`` meanwhile."""
    await slack.mention("U0REQUESTER", calls("scale_service", {"service": "web", "replicas": 5}))
    [card] = slack.cards()
    edit_view = await open_edit(slack, "U0APPROVER1", card)
    approval_id = str(edit_view.view["private_metadata"]).partition(":")[0]
    held = slack.server.hold("users.info", lambda args: args.get("user") == "U0APPROVER2")
    if approve:
        await slack.server.click("U0APPROVER2", card, "approval_approve")
    else:
        await slack.server.click("U0APPROVER2", card, "approval_deny")
        [opened] = [v for v in slack.server.views.values() if v.user == "U0APPROVER2"]
        await slack.server.submit_view("U0APPROVER2", opened.id, DENY_FORM)
    await asyncio.wait_for(held.arrived.wait(), 10)
    await slack.server.submit_view("U0APPROVER1", edit_view.id, form(service="web", replicas="30"))
    await until_edited(repo, approval_id)
    held.release.set()
    await slack.settle()
    return approval_id


async def test_an_approver_an_edit_removed_cannot_deny(ruled: Harness, repo: Repository) -> None:
    approval_id = await decided_during_an_edit(ruled, repo, approve=False)
    approval = await repo.get_approval(approval_id)
    assert approval is not None and approval.approvers == ["U0SRELEAD"]
    assert (approval.status, approval.decided_by) == ("pending", None)
    told = ruled.ephemeral_texts("U0APPROVER2")
    assert any("not one of the approvers" in t for t in told), told


async def test_an_approver_an_edit_removed_cannot_approve(ruled: Harness, repo: Repository) -> None:
    approval_id = await decided_during_an_edit(ruled, repo, approve=True)
    approval = await repo.get_approval(approval_id)
    assert approval is not None and approval.status == "pending"
    assert executed("scale_service") == []
