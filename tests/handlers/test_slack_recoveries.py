"""Recovery by a person (on_error = "ask") in Slack, end to end: signed requests in Slack's
payload shapes, against the real bolt app, handlers, runner and storage, on SQLite and
PostgreSQL. The card shows the call, the escaped error and the choices; Retry runs the call
once more, Skip reaches the model, Stop run ends the run and the thread says who."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Iterator
from datetime import timedelta
from typing import Any

import pytest
from freezegun import freeze_time

from handlers.flows import sweep_once
from playground.slack_server import Message
from storage.repository import Repository
from tests.conftest import BASE_CONFIG, make_config
from tests.support import recovery_tools
from tests.support.ops_tools import EXECUTED
from tests.support.scripted_model import ScriptedModel, calls
from tests.support.slack_harness import Harness, running_bot

REQUESTER, OUTSIDER = "U0REQUESTER", "U0OUTSIDER"


@pytest.fixture(autouse=True)
def _flaky() -> Iterator[None]:
    recovery_tools.reset()
    yield
    recovery_tools.reset()


@pytest.fixture
async def slack(repo: Repository) -> AsyncIterator[Harness]:
    config = make_config(
        tools=[*BASE_CONFIG["tools"], "tests.support.recovery_tools:flaky"], on_error="ask"
    )
    async with running_bot(config, repo) as harness:
        yield harness


def recovery_cards(slack: Harness) -> list[Message]:
    return [
        m
        for m in slack.server.messages
        if not m.is_ephemeral and any(b.get("block_id") == "recovery_summary" for b in m.blocks)
    ]


def current(slack: Harness, message: Message) -> Message:
    found = slack.server.message(message.channel, message.ts)
    assert found is not None
    return found


def choices(message: Message) -> list[str]:
    return [
        str(e["action_id"])
        for _, e in message.buttons()
        if str(e.get("action_id", "")).startswith("recovery_")
    ]


def ran() -> int:
    return sum(1 for name, _ in EXECUTED if name == "flaky")


async def test_the_card_shows_the_call_and_the_escaped_error_and_retry_runs_it_once_more(
    slack: Harness,
) -> None:
    reply = await slack.mention(REQUESTER, calls(("flaky", {"service": "api"})))
    await slack.settle()
    [card] = recovery_cards(slack)
    shown = json.dumps(card.blocks)
    assert "attempt 1" in shown and "`flaky`" in shown
    assert "&lt;b&gt;&amp;&lt;/b&gt;" in shown and "<b>" not in shown, "escaped"
    assert "x" * 600 not in shown, "the first 500 characters; the rest behind Show details"
    assert choices(card) == [
        "recovery_retry",
        "recovery_skip",
        "recovery_stop",
        "recovery_details",
    ]
    await slack.server.click(OUTSIDER, card, "recovery_retry")
    await slack.settle()
    assert any("not one of the approvers" in t for t in slack.ephemeral_texts(OUTSIDER))
    assert ran() == 1
    clicks = await asyncio.gather(
        *(slack.server.click(REQUESTER, card, "recovery_retry") for _ in range(5))
    )
    assert all(c.status == 200 for c in clicks)
    await slack.settle()
    assert ran() == 2, "five clicks, one retry"
    assert "Results: flaky=api answered" in [m.text for m in slack.thread_of(reply)]
    edited = current(slack, card)
    assert choices(edited) == []
    assert "chose *Retry*" in json.dumps(edited.blocks)


async def test_skip_reaches_the_model(slack: Harness) -> None:
    await slack.mention(REQUESTER, calls(("flaky", {"service": "api"})))
    await slack.settle()
    [card] = recovery_cards(slack)
    await slack.server.click(REQUESTER, card, "recovery_skip")
    await slack.settle()
    read = [
        part["output"] for m in ScriptedModel.seen[-1] if m["role"] == "tool" for part in m["parts"]
    ]
    assert any(r.startswith("Skipped by") and "after the error: api is down" in r for r in read)
    assert ran() == 1


async def test_stop_run_ends_the_run_and_the_thread_says_who(
    slack: Harness, repo: Repository
) -> None:
    reply = await slack.mention(REQUESTER, calls(("flaky", {"service": "api"})))
    await slack.settle()
    [card] = recovery_cards(slack)
    models_before = len(ScriptedModel.seen)
    await slack.server.click(REQUESTER, card, "recovery_stop")
    await slack.settle()
    [row] = [a for a in await repo.approvals_for_run(card_run(card)) if a.kind == "recovery"]
    run = await repo.get_run(row.run_id)
    assert run is not None and run.status == "cancelled"
    texts: list[Any] = [m.text for m in slack.thread_of(reply)]
    assert any("Stopped:" in t and "stopped the run after the error" in t for t in texts), texts
    assert len(ScriptedModel.seen) == models_before, "the model is not asked again"
    assert ran() == 1


def card_run(card: Message) -> str:
    ids = next(b for b in card.blocks if b.get("block_id") == "pause_ids")
    text = ids["elements"][0]["text"]
    return text.split("run `")[1].rstrip("`")


async def test_recovery_by_gets_a_dm_copy_whose_retry_works(repo: Repository) -> None:
    config = make_config(
        tools=[*BASE_CONFIG["tools"], "tests.support.recovery_tools:flaky"],
        on_error="ask",
        recovery_by=["U0ONCALL"],
    )
    async with running_bot(config, repo) as slack:
        reply = await slack.mention(REQUESTER, calls(("flaky", {"service": "api"})))
        await slack.settle()
        channel = slack.server.dm_channel("U0ONCALL")
        assert channel is not None, "the one who decides gets a copy"
        [copy] = [m for m in recovery_cards(slack) if m.channel == channel]
        assert "a copy of the card" in json.dumps(copy.blocks)
        assert slack.server.dm_channel(REQUESTER) is None
        await slack.server.click("U0ONCALL", copy, "recovery_retry")
        await slack.settle()
        assert ran() == 2
        assert "Results: flaky=api answered" in [m.text for m in slack.thread_of(reply)]
        for message in recovery_cards(slack):
            assert choices(current(slack, message)) == [], message.channel


async def test_a_reminder_goes_once_to_those_who_decide(repo: Repository) -> None:
    config = make_config(
        tools=[*BASE_CONFIG["tools"], "tests.support.recovery_tools:flaky"],
        on_error="ask",
        recovery_by=["U0ONCALL"],
        policies={**BASE_CONFIG["policies"], "flaky": {"approval": "never", "remind_after": "10m"}},
    )
    with freeze_time("2026-12-02 10:00:00", real_asyncio=True) as clock:
        async with running_bot(config, repo) as slack:
            await slack.mention(REQUESTER, calls(("flaky", {"service": "api"})))
            await slack.settle()
            clock.tick(timedelta(minutes=11))
            for _ in range(2):
                await sweep_once(slack.bot.services)
                await slack.settle()
            channel = slack.server.dm_channel("U0ONCALL")
            reminders = [
                m.text
                for m in slack.server.messages
                if m.channel == channel and "Reminder" in m.text
            ]
            assert len(reminders) == 1 and "`flaky` failed" in reminders[0]


async def test_edit_then_retry_uses_the_edit_form_and_runs_the_edited_call(
    repo: Repository,
) -> None:
    from handlers.blocks import edits as edit_blocks

    config = make_config(
        tools=[*BASE_CONFIG["tools"], "tests.support.recovery_tools:flaky"],
        on_error="ask",
        policies={**BASE_CONFIG["policies"], "flaky": {"approval": "never", "allow_edit": True}},
    )
    async with running_bot(config, repo) as slack:
        reply = await slack.mention(REQUESTER, calls(("flaky", {"service": "api"})))
        await slack.settle()
        [card] = recovery_cards(slack)
        assert choices(card)[:2] == ["recovery_retry", "recovery_edit"]
        await slack.server.click(REQUESTER, card, "recovery_edit")
        await slack.settle()
        [view] = [v for v in slack.server.views.values() if v.user == REQUESTER and not v.closed]
        assert view.view["title"]["text"] == "Edit, then retry"
        values = {
            edit_blocks.FIELD_PREFIX + "service": {
                edit_blocks.VALUE: {"type": "plain_text_input", "value": "backup"}
            }
        }
        submitted = await slack.server.submit_view(REQUESTER, view.id, values)
        assert submitted.status == 200
        await slack.settle()
        assert [a for name, a in EXECUTED if name == "flaky"] == [
            {"service": "api"},
            {"service": "backup"},
        ]
        assert any("backup answered" in (m.text or "") for m in slack.thread_of(reply))
        assert choices(current(slack, card)) == []


async def test_approvals_lists_a_failed_call_and_retries_from_the_list(slack: Harness) -> None:
    from tests.support.slack_harness import CHANNEL

    reply = await slack.mention(REQUESTER, calls(("flaky", {"service": "api"})))
    await slack.settle()
    mine = await slack.server.slash_command(REQUESTER, CHANNEL, text="")
    assert "failed" in mine.body and "api is down" in mine.body
    [listing] = [m for m in slack.server.ephemerals_for(REQUESTER) if choices(m)][-1:]
    await slack.server.click(REQUESTER, listing, "recovery_retry")
    await slack.settle()
    assert ran() == 2
    assert "Results: flaky=api answered" in [m.text for m in slack.thread_of(reply)]
    [card] = recovery_cards(slack)
    assert choices(current(slack, card)) == [], "the card is edited too"


async def test_the_home_of_who_decides_shows_the_failed_call_and_its_retry_works(
    repo: Repository,
) -> None:
    config = make_config(
        tools=[*BASE_CONFIG["tools"], "tests.support.recovery_tools:flaky"],
        on_error="ask",
        recovery_by=["U0ONCALL"],
    )
    async with running_bot(config, repo) as slack:
        reply = await slack.mention(REQUESTER, calls(("flaky", {"service": "api"})))
        await slack.settle()
        await slack.server.open_home("U0ONCALL")
        await slack.settle()
        shown = json.dumps(slack.server.home_of("U0ONCALL"))
        assert "api is down" in shown and "recovery_retry" in shown
        await slack.server.click_home("U0ONCALL", "recovery_retry")
        await slack.settle()
        assert ran() == 2
        assert "Results: flaky=api answered" in [m.text for m in slack.thread_of(reply)]


# 1,200 characters that grow to 5,200 escaped: cut to 1,000 before escaping, the recovery
# card's call line still broke Slack's 3,000 per section and the card was never posted.
HEAVY = "&<>" * 400


def refused_by_slack(slack: Harness) -> list[tuple[str, Any]]:
    """Every message, view and response_url answer Slack refused (invalid_blocks and all)."""
    shown = ("chat.", "views.")
    return [
        (c.method, c.response)
        for c in slack.server.calls
        if c.method.startswith(shown) and not c.ok
    ] + [("response_url", r.error) for r in slack.server.responses if r.status != 200]


async def test_escaping_heavy_arguments_and_a_hostile_error_get_every_card_copy_and_list(
    repo: Repository,
) -> None:
    """The approval card, its DM copy, /approvals, the Home and history, then the recovery
    card, its copy, /approvals and the Home: all accepted by Slack, none pinging anyone."""
    from tests.support.slack_harness import CHANNEL

    approver = "U0APPROVER1"
    config = make_config(
        tools=[*BASE_CONFIG["tools"], "tests.support.recovery_tools:hostile"],
        on_error="ask",
        policies={**BASE_CONFIG["policies"], "hostile": {"approvers": [approver]}},
    )
    async with running_bot(config, repo) as slack:
        reply = await slack.mention(REQUESTER, calls(("hostile", {"service": HEAVY})))
        await slack.settle()
        [card] = slack.cards()
        assert slack.dm_cards(approver), "the approver's copy"
        await slack.server.slash_command(approver, CHANNEL, text="")
        await slack.server.open_home(approver)
        await slack.settle()
        assert "hostile" in json.dumps(slack.server.home_of(approver))
        await slack.server.click(approver, card, "approval_approve")
        await slack.settle()
        [failed, copy] = sorted(recovery_cards(slack), key=lambda m: m.channel != CHANNEL)
        assert copy.channel == slack.server.dm_channel(approver)
        assert choices(failed)[:1] == ["recovery_retry"]
        call = next(b for b in failed.blocks if b.get("block_id") == "recovery_call")
        assert "&amp;&lt;&gt;" in call["text"]["text"] and len(call["text"]["text"]) < 1100
        await slack.server.slash_command(approver, CHANNEL, text="")
        await slack.server.open_home(approver)
        await slack.server.slash_command(approver, CHANNEL, text="history")
        await slack.settle()
        assert "recovery_retry" in json.dumps(slack.server.home_of(approver))
        assert not refused_by_slack(slack)
        for message in (failed, copy):
            shown = message.text + json.dumps(message.blocks)
            for ping in ("<!channel>", "<@U0APPROVER2>", "<!subteam^S0OPS>", "<http://evil"):
                assert ping not in shown, (ping, message.text[:200])
            assert len(message.text) < 1000
        assert len(slack.thread_of(reply)) >= 2
