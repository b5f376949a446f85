"""What a newcomer noticed in the playground, fixed in the bot itself: the waiting message
moves on with the run, and a denial's notice lands in the card's thread like an approval's."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from storage.repository import Repository
from tests.conftest import make_config
from tests.support.scripted_model import calls
from tests.support.slack_harness import Harness, running_bot

WAITING = "Waiting for a human"


@pytest.fixture
async def slack(repo: Repository) -> AsyncIterator[Harness]:
    async with running_bot(make_config(), repo) as harness:
        yield harness


async def deny(slack: Harness, user: str, card: Any, reason: str) -> None:
    await slack.server.click(user, card, "approval_deny")
    [opened] = [v for v in slack.server.views.values() if v.user == user]
    await slack.server.submit_view(
        user, opened.id, {"deny_reason": {"reason": {"type": "plain_text_input", "value": reason}}}
    )
    await slack.settle()


async def test_the_waiting_message_is_replaced_once_the_run_moves_on(slack: Harness) -> None:
    reply = await slack.mention("U0REQUESTER", calls(("restart_service", {"service": "web"})))
    texts = [m.text for m in slack.thread_of(reply)]
    assert any(f"{WAITING}: 1 call needs a decision." in t for t in texts)
    [card] = slack.cards()
    await slack.server.click("U0APPROVER1", card, "approval_approve")
    await slack.settle()
    thread = slack.thread_of(reply)
    assert not any(WAITING in m.text for m in thread), [m.text for m in thread]
    assert any("No longer waiting" in m.text for m in thread)
    assert thread[-1].text == "Results: restart_service=restarted web", "the answer is last"


async def test_a_denial_also_replaces_the_waiting_message_and_is_told_in_the_thread(
    slack: Harness,
) -> None:
    reply = await slack.mention("U0REQUESTER", calls(("restart_service", {"service": "db"})))
    [card] = slack.cards()
    await deny(slack, "U0APPROVER2", card, "freeze")
    assert not any(WAITING in m.text for m in slack.thread_of(reply))
    [notice] = [m for m in slack.server.ephemerals_for("U0APPROVER2") if "Denied" in m.text]
    assert notice.thread_ts == card.thread_ts, "the card's thread, as an approval's notice"


async def test_a_cancelled_run_replaces_its_waiting_message(
    slack: Harness, repo: Repository
) -> None:
    from bot.clock import utcnow
    from handlers.flows import announce_cancelled

    reply = await slack.mention("U0REQUESTER", calls(("restart_service", {"service": "db"})))
    [card] = slack.cards()
    run_id = (await repo.get_approval(_approval_id(card))).run_id  # type: ignore[union-attr]
    assert await repo.cancel_run(run_id, reason="not now", actor="U0OPS", now=utcnow())
    await announce_cancelled(slack.bot.services, run_id)
    texts = [m.text for m in slack.thread_of(reply)]
    assert not any(WAITING in t for t in texts) and any("Stopped: not now" in t for t in texts)


def _approval_id(card: Any) -> str:
    # The first button is Approve: the id, then the fingerprint of the arguments shown.
    return str(next(e["value"] for _, e in card.buttons() if e.get("value"))).partition(":")[0]
