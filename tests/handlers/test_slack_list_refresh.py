"""An /approvals list is edited in place after a decision made from it (handlers/flows/lists):
the decided item's buttons give way to its outcome, so the list never offers a decision that
was already made. Real bolt app, signed requests, our Slack-compatible server."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import pytest

from playground.slack_server import Message
from storage.repository import Repository
from tests.conftest import make_config
from tests.support import ops_tools
from tests.support.scripted_model import calls
from tests.support.slack_harness import CHANNEL, Harness, running_bot

APPROVER = "U0APPROVER1"


@pytest.fixture
async def slack(repo: Repository) -> AsyncIterator[Harness]:
    async with running_bot(make_config(), repo) as h:
        yield h


async def _list(slack: Harness, user: str = APPROVER) -> Message:
    before = {m.ts for m in slack.server.ephemerals_for(user)}
    await slack.server.slash_command(user, CHANNEL, text="")
    [listing] = [m for m in slack.server.ephemerals_for(user) if m.ts not in before]
    return listing


def _buttons_for(listing: Message) -> list[str]:
    """The approvals whose item still has an Approve button."""
    return [e["value"] for _, e in listing.buttons() if e["action_id"] == "approval_approve"]


def _approve_value(listing: Message, service: str) -> str:
    """The approval id on the Approve button of ``service``'s item."""
    blocks = listing.blocks
    for index, block in enumerate(blocks):
        if block.get("type") == "section" and f'service="{service}"' in str(block.get("text")):
            [button] = [
                e for e in blocks[index + 1]["elements"] if e["action_id"] == "approval_approve"
            ]
            return str(button["value"])
    raise AssertionError(f"{service} is not listed with buttons")


async def test_a_decision_from_a_list_edits_that_list_in_place(slack: Harness) -> None:
    await slack.mention("U0REQUESTER", calls(("restart_service", {"service": "one"})))
    await slack.mention("U0REQUESTER", calls(("restart_service", {"service": "two"})))
    listing = await _list(slack)
    older = await _list(slack)  # opened before the decision: Slack gives no handle on it
    assert len(_buttons_for(listing)) == 2

    one = _approve_value(listing, "one")
    await slack.server.click(APPROVER, listing, "approval_approve", value=one)
    await slack.settle()
    assert [args for tool, args in ops_tools.EXECUTED if tool == "restart_service"] == [
        {"service": "one"}
    ]

    listing = slack.server.message(CHANNEL, listing.ts)  # the same message, edited
    assert listing is not None and listing.edited
    rendered = json.dumps(listing.blocks)
    assert "Approved* by <@U0APPROVER1>" in rendered
    assert "one" in rendered, "the decided item stays in its place, with its outcome"
    assert len(_buttons_for(listing)) == 1 and _approve_value(listing, "two")
    assert "(1–1 of 1)" in listing.blocks[0]["text"]["text"]

    # A click on the older list is answered as a race, and refreshes that list too.
    await slack.server.click(APPROVER, older, "approval_approve", value=one)
    await slack.settle()
    assert any("Already approved by <@U0APPROVER1>" in t for t in slack.ephemeral_texts(APPROVER))
    older = slack.server.message(CHANNEL, older.ts)
    assert older is not None and len(_buttons_for(older)) == 1
    assert "Approved* by <@U0APPROVER1>" in json.dumps(older.blocks)


async def test_a_denial_from_a_list_edits_it_and_the_last_item_leaves_nothing_waiting(
    slack: Harness,
) -> None:
    await slack.mention("U0REQUESTER", calls(("restart_service", {"service": "db"})))
    listing = await _list(slack)
    await slack.server.click(APPROVER, listing, "approval_deny")
    [opened] = slack.server.views.values()
    await slack.server.submit_view(
        APPROVER,
        opened.id,
        {"deny_reason": {"reason": {"type": "plain_text_input", "value": "not today"}}},
    )
    await slack.settle()
    listing = slack.server.message(CHANNEL, listing.ts)
    assert listing is not None and _buttons_for(listing) == []
    rendered = json.dumps(listing.blocks)
    assert "Denied* by <@U0APPROVER1>" in rendered and "not today" in rendered
    assert "Nothing else is waiting." in rendered
    assert any("Denied `restart_service`" in t for t in slack.ephemeral_texts(APPROVER))


async def test_a_card_click_edits_no_list(slack: Harness) -> None:
    await slack.mention("U0REQUESTER", calls(("restart_service", {"service": "db"})))
    listing = await _list(slack)
    [card] = slack.cards()
    await slack.server.click(APPROVER, card, "approval_approve")
    await slack.settle()
    assert slack.server.message(CHANNEL, listing.ts) is listing and not listing.edited


async def test_a_question_answered_from_a_list_leaves_it(slack: Harness) -> None:
    question = {"question": "Restart which region?", "choices": ["eu", "us"]}
    await slack.mention(
        "U0REQUESTER", json.dumps({"tool_calls": [{"name": "ask_user", "arguments": question}]})
    )
    listing = await _list(slack, "U0REQUESTER")  # the requester answers their own questions
    assert "Restart which region?" in json.dumps(listing.blocks)
    await slack.server.click("U0REQUESTER", listing, "question_choice:0")
    await slack.settle()
    listing = slack.server.message(CHANNEL, listing.ts)
    assert listing is not None and listing.edited
    assert [e for _, e in listing.buttons() if e["action_id"].startswith("question_")] == []
    assert "Nothing is waiting for your decision" in json.dumps(listing.blocks)


async def test_a_list_click_with_a_garbled_page_still_decides(slack: Harness) -> None:
    """The list's block_id (view and page) comes back from Slack; a crafted one whose page
    is a digit that is not ASCII (``²`` passed isdigit and broke int()) was a 500. Now the
    click decides as any click does; only the list is not refreshed."""
    await slack.mention("U0REQUESTER", calls(("restart_service", {"service": "one"})))
    listing = await _list(slack)
    one = _approve_value(listing, "one")
    for block in listing.blocks:
        if block.get("type") == "actions":
            prefix, view, _page, rest = str(block["block_id"]).split(":", 3)
            block["block_id"] = f"{prefix}:{view}:\u00b2:{rest}"
    reply = await slack.server.click(APPROVER, listing, "approval_approve", value=one)
    assert reply.status == 200
    await slack.settle()
    assert [args for tool, args in ops_tools.EXECUTED if tool == "restart_service"] == [
        {"service": "one"}
    ]
