"""A pause settled while its card is being posted: the card must not keep its buttons.

The card outbox claims a card, posts it (rendered from the claimed row: pending, with Approve
and Deny), then records where it is. A decision that lands in between (from ``/approvals``,
the App Home, the API, the CLI; or an expiry, or a Stop) has no card on record to edit, and
the card, once recorded, showed the call as still open for good: its buttons did nothing but
say "Already denied". Recording the card now says whether what it shows is still pending, and
the poster edits it when it is not.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from storage.repository import Repository
from tests.conftest import make_config
from tests.support.ops_tools import executed
from tests.support.polling import until
from tests.support.scripted_model import calls
from tests.support.slack_harness import CHANNEL, Harness, has_buttons, running_bot


@pytest.fixture
async def slack(repo: Repository) -> AsyncIterator[Harness]:
    async with running_bot(make_config(), repo) as harness:
        yield harness


async def test_a_deny_from_the_list_while_the_card_is_posted_takes_its_buttons_off(
    slack: Harness,
) -> None:
    # Slack takes the card but answers only once the Deny is stored.
    held = slack.server.hold(
        "chat.postMessage", lambda args: "approval_summary" in str(args.get("blocks"))
    )
    await slack.server.mention(
        "U0REQUESTER", CHANNEL, "<@U0BOT> " + calls(("restart_service", {"service": "db"}))
    )
    await asyncio.wait_for(held.arrived.wait(), 10)
    await slack.server.slash_command("U0APPROVER1", CHANNEL, text="")
    [listing] = await until(
        lambda: [m for m in slack.server.ephemerals_for("U0APPROVER1") if has_buttons(m)],
        "the /approvals list",
    )
    await slack.server.click("U0APPROVER1", listing, "approval_deny")
    [opened] = await until(lambda: list(slack.server.views.values()), "the reason's modal")
    await slack.server.submit_view(
        "U0APPROVER1",
        opened.id,
        {"deny_reason": {"reason": {"type": "plain_text_input", "value": "not today"}}},
    )
    await until(
        lambda: any("Denied `restart_service`" in t for t in slack.ephemeral_texts("U0APPROVER1")),
        "the Deny's answer",
    )
    held.release.set()
    await slack.settle()

    assert executed("restart_service") == []
    [card] = slack.cards()
    assert not has_buttons(card), "the card of a denied call still offers Approve and Deny"
    assert "*Denied* by <@U0APPROVER1>" in str(card.blocks)
