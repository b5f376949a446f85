"""Slack gets its answer first, whatever the model or the database is doing."""

from __future__ import annotations

import asyncio
import json
from datetime import timedelta

from freezegun import freeze_time

from storage.repository import Repository
from tests import ops_tools
from tests.conftest import make_config
from tests.scripted_model import ScriptedModel
from tests.slack_harness import CHANNEL, has_buttons, running_bot


def calls(*pairs: tuple[str, dict]) -> str:
    return json.dumps({"tool_calls": [{"name": n, "arguments": a} for n, a in pairs]})


async def test_deny_on_an_expired_card_is_answered_before_the_run_carries_on(
    repo: Repository,
) -> None:
    with freeze_time("2026-11-30 10:00:00", real_asyncio=True) as clock:
        async with running_bot(make_config(), repo) as slack:
            reply = await slack.mention(
                "U0REQUESTER", calls(("restart_service", {"service": "db"}))
            )
            [card] = slack.cards()
            clock.tick(timedelta(minutes=16))  # restart_service: ttl 15m, on_expiry "deny"
            ScriptedModel.hold = asyncio.Event()  # the resumed model call takes its time
            try:
                click = await slack.server.click("U0APPROVER1", card, "approval_deny")
                assert click.status == 200
                assert not slack.server.views, "no deny form for an expired approval"
            finally:
                ScriptedModel.hold.set()
            await slack.settle()
            assert any("expired at" in t for t in slack.ephemeral_texts("U0APPROVER1"))
            card = slack.server.message(CHANNEL, card.ts)  # type: ignore[assignment]
            assert card is not None and not has_buttons(card)
            assert any("Expired at" in m.text for m in slack.thread_of(reply))
    assert ops_tools.EXECUTED == []
