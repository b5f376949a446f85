"""Sub-agents in a Slack thread, end to end through the Slack stand-in (issue 20 section 1):
the child's first message, the notice of its parent's wait, its card naming the agent, a
signed click on that card, and the parent's answer with the child's; SQLite and PostgreSQL."""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator

import pytest

from storage.repository import Repository
from tests.bot.test_delegation_engine import AGENTS, delegating
from tests.conftest import make_config
from tests.support.ops_tools import executed
from tests.support.slack_harness import Harness, has_buttons, running_bot

REQUESTER = "U0REQUESTER"
APPROVER = "U0APPROVER1"


@pytest.fixture
async def slack(repo: Repository) -> AsyncIterator[Harness]:
    async with running_bot(make_config(agents=AGENTS), repo, sweep=True) as harness:
        yield harness


def texts(slack: Harness) -> str:
    return "\n".join(
        m.text + json.dumps(m.blocks, ensure_ascii=False) for m in slack.server.messages
    )


async def test_a_childs_card_names_its_agent_and_its_click_lets_the_parent_finish(
    slack: Harness,
) -> None:
    task = json.dumps(
        {"tool_calls": [{"name": "restart_service", "arguments": {"service": "shop"}}]}
    )
    reply = await slack.mention(REQUESTER, delegating(("operator", task), ("researcher", "look")))
    await slack.settle()
    shown = texts(slack)
    assert "🤖 operator is working on: " in shown
    assert "🤖 researcher is working on: look" in shown
    assert "Tools it may use: `restart_service`, `ask_user`, `delegate`" in shown
    assert "Tools it may use: `get_status`, `ask_user`, `delegate`" in shown
    assert "Waiting for *operator*" in shown and "Waiting for *researcher*" in shown
    listed = await slack.server.slash_command(REQUESTER, "C0OPS", text="all")
    assert "*operator* is working on:" in listed.body
    # The lineage: the child's call in /approvals and on the approver's App Home.
    assert "asked by requested by" not in listed.body
    assert "requested by agent *operator* for <@U0REQUESTER>" in listed.body
    await slack.server.open_home(APPROVER)
    await slack.settle()
    home = json.dumps(slack.server.home_of(APPROVER), ensure_ascii=False)
    assert "requested by agent *operator* for <@U0REQUESTER>" in home
    assert "*researcher* is working on: look" not in listed.body, "it answered already"
    (card,) = slack.cards()
    blocks = json.dumps(card.blocks)
    assert "requested by agent *operator* for <@U0REQUESTER>" in blocks
    assert executed("restart_service") == []

    await slack.server.click(APPROVER, card, "approval_approve")
    await slack.settle()
    assert executed("restart_service") == [{"service": "shop"}]
    thread = slack.thread_of(reply)
    final = [m.text for m in thread if m.text.startswith("Results: delegate=")]
    assert len(final) == 1, "the parent answered once"
    assert "restarted shop" in final[0] and "You said: look" in final[0]
    child_id = re.findall(r"run_[0-9A-Z]{26}", blocks)[0]
    child = await slack.repo.get_run(child_id)
    assert child is not None and child.agent == "operator" and child.parent_run_id is not None
    parent = await slack.repo.get_run(child.parent_run_id)
    assert parent is not None and parent.status == "completed"
    trail = await slack.repo.audit_trail(run_id=parent.id)
    assert [e.event for e in trail].count("run_resumed") == 1


async def test_stopping_a_parent_in_slack_takes_the_buttons_off_its_childs_card(
    slack: Harness,
) -> None:
    """Found by review: a Stop of a parent cancels its waiting children in transactions of
    their own, and only the parent's thread was told; the child's card kept Approve and Deny
    on a cancelled call, and the child's progress message kept waiting. Each child the Stop
    cancelled is announced as the parent is."""
    task = json.dumps(
        {"tool_calls": [{"name": "restart_service", "arguments": {"service": "shop"}}]}
    )
    await slack.mention(REQUESTER, delegating(("operator", task)))
    await slack.settle()
    (card,) = slack.cards()
    assert has_buttons(card)
    (parent,) = [
        m
        for m in slack.server.messages
        if "sub-agent" in m.text and any(e.get("action_id") == "run_stop" for _, e in m.buttons())
    ]
    await slack.server.click(REQUESTER, parent, "run_stop")
    await slack.settle()
    (parent_run,) = [r for r, _ in await slack.repo.list_runs() if r.parent_run_id is None]
    (child,) = await slack.repo.children_of(parent_run.id)
    assert parent_run.status == "cancelled" and child.status == "cancelled"
    shown = slack.server.message(card.channel, card.ts)
    assert not has_buttons(shown), "the cancelled child's card keeps no buttons"
    waiting = [
        m for m in slack.server.messages if any(e.get("value") == child.id for _, e in m.buttons())
    ]
    assert waiting == [], "the child's progress message offers no Pause or Stop any more"
    assert executed("restart_service") == []
