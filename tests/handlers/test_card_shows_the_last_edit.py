"""Two edits of a call that stays pending (a quorum: every edit is voted on afresh), whose
card edits land in the other order: the card must end up showing the last edit.

Every editor of a card reads the approval again after its ``chat.update`` and edits once more
when what the card shows moved on (``handlers.slack.cards._card_state``). The edited
arguments were not part of that: two edits of a waiting call leave the same status, the same
approvers, the same "needs 2 approvals" and no votes, so the editor whose update landed last
with the first edit's arguments stopped there, and the card showed arguments the call no
longer had (its Approve refused as a stale copy) until someone clicked it.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest

from handlers.blocks import edits as edit_blocks
from storage.repository import Repository
from tests.conftest import BASE_CONFIG, make_config
from tests.support.polling import until
from tests.support.slack_harness import CHANNEL, Harness, running_bot

APPROVERS = ["U0APPROVER1", "U0APPROVER2"]
PROPOSED = {"service": "web", "replicas": 30, "env": "prod"}


@pytest.fixture
async def quorum(repo: Repository) -> AsyncIterator[Harness]:
    config = make_config(
        tools=[*BASE_CONFIG["tools"], "tests.support.ops_tools:scale_service"],
        policies={
            **BASE_CONFIG["policies"],
            "scale_service": {"approvers": APPROVERS, "allow_edit": True, "min_approvals": 2},
        },
    )
    async with running_bot(config, repo) as harness:
        yield harness


def form(**fields: str) -> dict[str, Any]:
    return {
        edit_blocks.FIELD_PREFIX + name: {
            edit_blocks.VALUE: {"type": "plain_text_input", "value": value}
        }
        for name, value in fields.items()
    }


async def edit_form(slack: Harness, user: str, card: Any) -> Any:
    await slack.server.click(user, card, edit_blocks.EDIT)
    return await until(
        lambda: next(
            (v for v in slack.server.views.values() if v.user == user and not v.closed), None
        ),
        f"{user}'s edit form",
    )


async def test_the_card_shows_the_last_edit_when_the_edits_land_out_of_order(
    quorum: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    slack = quorum
    await slack.mention(
        "U0REQUESTER",
        json.dumps({"tool_calls": [{"name": "scale_service", "arguments": PROPOSED}]}),
    )
    [card] = slack.cards()
    first = await edit_form(slack, "U0APPROVER1", card)

    # The first edit's card update waits (Slack slow, a 429's Retry-After) after its render.
    cards = slack.bot.services.publisher.cards
    real_client = cards._client
    go_on, waiting = asyncio.Event(), asyncio.Event()

    async def slow_first(team_id: str) -> Any:
        if not waiting.is_set():
            waiting.set()
            await go_on.wait()
        return await real_client(team_id)

    monkeypatch.setattr(cards, "_client", slow_first)
    await slack.server.submit_view(
        "U0APPROVER1", first.id, form(service="web", replicas="10", env="prod")
    )
    await asyncio.wait_for(waiting.wait(), 10)

    # A second edit, on the card as it is now, lands and is shown meanwhile.
    current = slack.server.message(CHANNEL, card.ts)
    second = await edit_form(slack, "U0APPROVER2", current)
    await slack.server.submit_view(
        "U0APPROVER2", second.id, form(service="web", replicas="12", env="prod")
    )
    await until(
        lambda: '\\"replicas\\": 12' in json.dumps(slack.server.message(CHANNEL, card.ts).blocks),
        "the second edit on the card",
    )
    go_on.set()  # the first edit's update lands last, with the first edit's arguments
    await slack.settle()

    shown = json.dumps(slack.server.message(CHANNEL, card.ts).blocks)  # type: ignore[union-attr]
    assert '\\"replicas\\": 12' in shown, "the card shows an edit the call no longer has"
