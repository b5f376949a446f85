"""Cards other apps can read, and the agent's reason on the card (issue 21 §4, §5).

Every card carries Slack message metadata (``approval_requested`` while it waits,
``approval_decided`` once settled, re-sent with each edit), on the channel card and its DM
copies; our Slack server checks the shape Slack takes. What the model wrote with the call
shows under "Why", escaped and cut. The real bolt app, handlers, runner and storage, on
SQLite and PostgreSQL.
"""

from __future__ import annotations

import json
from typing import Any

from playground.slack_server import Message
from storage.repository import Repository
from tests.conftest import BASE_CONFIG, make_config
from tests.support.ops_tools import executed
from tests.support.slack_harness import CHANNEL, running_bot

REQUESTER, APPROVER = "U0REQUESTER", "U0APPROVER1"


def said(text: str, *pairs: tuple[str, dict[str, Any]]) -> str:
    """A scripted response that says ``text`` and calls these tools."""
    calls = [{"name": n, "arguments": a} for n, a in pairs]
    return json.dumps({"tool_calls": calls, "say": text})


def why_of(card: Message) -> str | None:
    block = next((b for b in card.blocks if b.get("block_id") == "approval_why"), None)
    return None if block is None else block["text"]["text"]


async def test_a_card_and_its_dm_copy_carry_what_other_apps_read(repo: Repository) -> None:
    policies = {
        **BASE_CONFIG["policies"],
        "restart_service": {"approvers": [APPROVER], "approval": "required"},
    }
    async with running_bot(make_config(policies=policies), repo) as slack:
        await slack.mention(REQUESTER, said("", ("restart_service", {"service": "db"})))
        [card], [copy] = slack.cards(), slack.dm_cards(APPROVER)
        for message in (card, copy):
            assert message.metadata is not None
            assert message.metadata["event_type"] == "approval_requested"
            payload = message.metadata["event_payload"]
            assert payload["tool"] == "restart_service" and payload["status"] == "pending"
            assert payload["requester"] == REQUESTER and payload["approval_id"]
            assert payload["run_id"] and payload["expires_at"].endswith("Z")
        # What Slack hands other apps with the message (conversations.history and events).
        assert card.to_api()["metadata"] == card.metadata
        assert why_of(card) is None, "a model that said nothing gets no Why"

        await slack.server.click(APPROVER, card, "approval_approve")
        await slack.settle()
        assert executed("restart_service") == [{"service": "db"}]
        for message in (slack.server.message(card.channel, card.ts), slack.dm_cards(APPROVER)[0]):
            assert message is not None and message.metadata is not None
            assert message.metadata["event_type"] == "approval_decided"
            decided = message.metadata["event_payload"]
            assert decided["decision"] == "approved" and decided["decided_by"] == APPROVER
            assert decided["decided_at"].endswith("Z") and decided["status"] == "executed"
            assert decided["approval_id"] == payload["approval_id"]


async def test_a_denied_card_says_so_in_its_metadata(repo: Repository) -> None:
    async with running_bot(make_config(), repo) as slack:
        await slack.mention(REQUESTER, said("", ("restart_service", {"service": "db"})))
        [card] = slack.cards()
        await slack.server.click("U0APPROVER2", card, "approval_deny")
        [opened] = list(slack.server.views.values())
        typed = {"reason": {"type": "plain_text_input", "value": "freeze"}}
        await slack.server.submit_view("U0APPROVER2", opened.id, {"deny_reason": typed})
        await slack.settle()
        decided = slack.server.message(card.channel, card.ts)
        assert decided is not None and decided.metadata is not None
        assert decided.metadata["event_payload"]["decision"] == "denied"
        assert decided.metadata["event_payload"]["decided_by"] == "U0APPROVER2"


async def test_the_agents_reason_shows_escaped_and_cut_under_why(repo: Repository) -> None:
    reason = "The db is wedged <!channel> <https://evil.example|click> & " + "x" * 400
    async with running_bot(make_config(), repo) as slack:
        await slack.mention(REQUESTER, said(reason, ("restart_service", {"service": "db"})))
        [card] = slack.cards()
        why = why_of(card)
        assert why is not None and why.startswith("*Why* (the agent's words)\n")
        shown = why.split("\n", 1)[1]
        assert "&lt;!channel&gt;" in shown and "<!channel>" not in shown
        assert "&lt;https://evil.example|click&gt; &amp; " in shown
        assert shown.endswith("…") and shown.count("x") < 300
        assert "Why" not in json.dumps(card.metadata), "metadata carries no model text"


async def test_a_batch_card_carries_its_size_and_the_reason(repo: Repository) -> None:
    pairs = [("restart_service", {"service": f"svc-{i}"}) for i in range(4)]
    async with running_bot(make_config(), repo) as slack:
        await slack.mention(REQUESTER, said("Rolling restart after the deploy.", *pairs))
        [card] = [
            m
            for m in slack.server.messages
            if m.channel == CHANNEL and any(b.get("block_id") == "batch_summary" for b in m.blocks)
        ]
        assert card.metadata is not None
        assert card.metadata["event_payload"]["batch_size"] == 4
        why = next(b for b in card.blocks if b.get("block_id") == "approval_why")
        assert "Rolling restart after the deploy." in why["text"]["text"]


async def test_hidden_characters_in_why_are_shown_as_escapes(repo: Repository) -> None:
    """Like arguments: a right-to-left override in the model's words cannot reorder the card."""
    async with running_bot(make_config(), repo) as slack:
        await slack.mention(
            REQUESTER, said("safe \u202eredaeh\u200b", ("restart_service", {"service": "db"}))
        )
        [card] = slack.cards()
        why = why_of(card)
        assert why is not None and "safe \\u202eredaeh\\u200b" in why, why
        assert "\u202e" not in why and "\u200b" not in why
