"""A decision's card edit that fails must not hold up the run it resumes, nor leave the card
showing buttons once Slack takes edits again.

After a decision the card is edited and the clicker answered (``handlers.flows.settle``); the
first of them to raise used to end the click's work there, before the resume this decision
claimed: the run then waited for its lease to run out (5 minutes by default) for a sweeper to
take it over. The failure here is the database's own: a table the card's edit reads (and the
decision and the resume do not) is renamed away before the click.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

import pytest
from freezegun import freeze_time

from handlers.flows import sweep_once
from playground.slack_server import Message, SlackServer
from playground.slack_server.response_urls import RESPONSE_URL_METHOD
from storage.repository import Repository
from tests.conftest import make_config
from tests.support.ops_tools import executed
from tests.support.scripted_model import calls
from tests.support.slack_harness import Harness, running_bot


@pytest.fixture
async def slack(repo: Repository) -> AsyncIterator[Harness]:
    async with running_bot(make_config(), repo) as harness:
        yield harness


async def test_an_approve_whose_card_edit_fails_still_runs_the_call(
    slack: Harness, repo: Repository
) -> None:
    await slack.mention("U0REQUESTER", calls(("restart_service", {"service": "web"})))
    [card] = slack.cards()
    # The card's edit reads the approval's escalation (reach): it fails from now on.
    await repo.database.execute_sql("ALTER TABLE approval_reach RENAME TO approval_reach_gone")
    click = await slack.server.click("U0APPROVER1", card, "approval_approve")
    assert click.status == 200
    await slack.settle()
    assert executed("restart_service") == [{"service": "web"}]
    assert any("Approved" in t for t in slack.ephemeral_texts("U0APPROVER1"))


TWELVE = calls(*[("restart_service", {"service": f"svc-{i:02d}"}) for i in range(12)])


@pytest.fixture
async def batched(repo: Repository) -> AsyncIterator[Harness]:
    async with running_bot(make_config(max_approvals_per_turn=30), repo) as harness:
        yield harness


async def test_approve_all_whose_card_edit_fails_still_runs_the_calls(
    batched: Harness, repo: Repository
) -> None:
    slack = batched
    await slack.mention("U0REQUESTER", TWELVE)
    [card] = batch_cards(slack)
    await repo.database.execute_sql("ALTER TABLE approval_reach RENAME TO approval_reach_gone")
    await slack.server.click("U0APPROVER1", card, "batch_approve_all")
    await slack.settle()
    assert len(executed("restart_service")) == 12
    assert any("You approved 12" in t for t in slack.ephemeral_texts("U0APPROVER1"))


async def test_approve_all_whose_answer_cannot_reach_slack_still_runs_the_calls(
    batched: Harness,
) -> None:
    """The clicker's answer goes to the click's response URL: a network failure there (its
    connection dropped, past the client's retries) raised after the decisions were stored
    and before their resume, and the run waited for its lease to run out."""
    slack = batched
    await slack.mention("U0REQUESTER", TWELVE)
    [card] = batch_cards(slack)
    slack.server.unreachable(RESPONSE_URL_METHOD, times=10)
    await slack.server.click("U0APPROVER1", card, "batch_approve_all")
    await slack.settle()
    assert len(executed("restart_service")) == 12
    assert not any("You approved 12" in t for t in slack.ephemeral_texts("U0APPROVER1"))


async def test_an_approve_whose_answer_cannot_reach_slack_still_runs_the_call(
    slack: Harness,
) -> None:
    await slack.mention("U0REQUESTER", calls(("restart_service", {"service": "web"})))
    [card] = slack.cards()
    slack.server.unreachable(RESPONSE_URL_METHOD, times=10)
    await slack.server.click("U0APPROVER1", card, "approval_approve")
    await slack.settle()
    assert executed("restart_service") == [{"service": "web"}]


async def test_a_deny_whose_card_edit_slack_failed_is_shown_by_a_later_sweep(
    repo: Repository,
) -> None:
    """Slack refuses the decision's card edit for now (429s past the client's retries): the
    card is marked due and a sweep after the grace takes its buttons away; nobody clicks."""
    with freeze_time("2026-12-03 10:00:00", real_asyncio=True) as clock:
        async with running_bot(make_config(), repo) as slack:
            server = slack.server
            card = await denied_while_slack_refuses_its_edit(slack)
            assert executed("restart_service") == []
            assert "approval_approve" in card_json(server, card.ts), "the edit failed"
            clock.tick(timedelta(minutes=1))
            await sweep_once(slack.bot.services)
            await slack.settle()
            shown = card_json(server, card.ts)
            assert "approval_approve" not in shown and "Denied" in shown
            updates = len(server.calls_to("chat.update"))
            clock.tick(timedelta(minutes=1))
            await sweep_once(slack.bot.services)  # edited and unmarked: not edited again
            await slack.settle()
            assert len(server.calls_to("chat.update")) == updates


async def test_two_sweeps_at_once_edit_a_marked_card_once(repo: Repository) -> None:
    """Every replica's sweeper reads the same marks: both edited every marked card, two
    ``chat.update`` for one, just as Slack came back from the outage that left the marks.
    Here two sweeps of the card edits run at once on one database."""
    with freeze_time("2026-12-03 10:00:00", real_asyncio=True) as clock:
        async with running_bot(make_config(), repo) as slack:
            server = slack.server
            card = await denied_while_slack_refuses_its_edit(slack)
            clock.tick(timedelta(minutes=1))
            attempts = len(server.calls_to("chat.update"))
            cards = slack.bot.services.publisher.cards
            await asyncio.gather(cards.edit_cards_due(), cards.edit_cards_due())
            await slack.settle()
            edits = [
                c for c in server.calls_to("chat.update")[attempts:] if c.args["ts"] == card.ts
            ]
            assert len(edits) == 1, edits
            assert "approval_approve" not in card_json(server, card.ts)


async def test_an_outage_ends_a_sweeps_card_edits_at_the_first_refusal(
    repo: Repository,
) -> None:
    """Two decided cards marked while Slack refused edits: a sweep that meets Slack refusing
    again stops at the first card instead of waiting out the client's retries for each."""
    with freeze_time("2026-12-03 10:00:00", real_asyncio=True) as clock:
        async with running_bot(make_config(), repo) as slack:
            server = slack.server
            for service in ("db", "web"):
                await slack.mention("U0REQUESTER", calls(("restart_service", {"service": service})))
            cards = slack.cards()
            assert len(cards) == 2
            for card in cards:
                server.rate_limit("chat.update", times=4, retry_after=0)
                await deny(slack, card)
            clock.tick(timedelta(minutes=1))
            server.rate_limit("chat.update", times=4, retry_after=0)
            attempts = len(server.calls_to("chat.update"))
            await sweep_once(slack.bot.services)
            await slack.settle()
            tried = {
                c.args["ts"]
                for c in server.calls_to("chat.update")[attempts:]
                if c.args["ts"] in {card.ts for card in cards}
            }
            assert len(tried) == 1, "one card tried"
            clock.tick(timedelta(minutes=1))
            await sweep_once(slack.bot.services)
            await slack.settle()
            for card in cards:
                assert "approval_approve" not in card_json(server, card.ts)


async def denied_while_slack_refuses_its_edit(slack: Harness) -> Message:
    """A restart's card, denied while Slack refuses its edit (429s past the client's
    retries): the card still shows its buttons, marked due for a sweep."""
    await slack.mention("U0REQUESTER", calls(("restart_service", {"service": "db"})))
    [card] = slack.cards()
    slack.server.rate_limit("chat.update", times=4, retry_after=0)
    await deny(slack, card)
    return card


async def deny(slack: Harness, card: Any) -> None:
    """Deny ``card`` through its form, as U0APPROVER1."""
    await slack.server.click("U0APPROVER1", card, "approval_deny")
    [form] = [v for v in slack.server.views.values() if v.user == "U0APPROVER1" and not v.closed]
    await slack.server.submit_view("U0APPROVER1", form.id, DENY_FORM)
    await slack.settle()


def batch_cards(slack: Harness) -> list[Message]:
    return [
        m
        for m in slack.server.messages
        if m.channel == "C0OPS" and any(b.get("block_id") == "batch_summary" for b in m.blocks)
    ]


DENY_FORM = {"deny_reason": {"reason": {"type": "plain_text_input", "value": "not now"}}}


def card_json(server: SlackServer, ts: str) -> str:
    card = server.message("C0OPS", ts)
    assert card is not None
    return json.dumps(card.blocks)


async def test_a_sweep_spends_a_bounded_time_on_card_edits_slack_slows(
    repo: Repository,
) -> None:
    """Many cards marked in an outage, then Slack takes edits again but rate limits each
    first try (429, ``Retry-After: 1``; the client waits and retries, so no edit is refused):
    the sweep edited every marked card, one after another, each waiting out the 429 before
    the next, so the sweep (and with it the next expiry and take-over) was held up about a
    second per card; a hundred marks, minutes. A sweep's card edits now stop after
    ``CARD_EDITS_PER_SWEEP``; the next sweep edits the rest."""
    count = 12
    with freeze_time("2026-12-03 10:00:00", real_asyncio=True) as clock:
        async with running_bot(make_config(), repo) as slack:
            server = slack.server
            for i in range(count):
                await slack.mention(
                    "U0REQUESTER", calls(("restart_service", {"service": f"svc-{i}"}))
                )
            cards = slack.cards()
            assert len(cards) == count
            for card in cards:
                server.rate_limit("chat.update", times=4, retry_after=0)
                await deny(slack, card)
            clock.tick(timedelta(minutes=1))
            limited: set[str] = set()

            def first_try(args: dict[str, Any]) -> bool:
                ts = str(args.get("ts"))
                first = ts not in limited
                limited.add(ts)
                return first

            server.rate_limit("chat.update", times=count, retry_after=1, when=first_try)
            attempts = len(server.calls_to("chat.update"))
            await sweep_once(slack.bot.services)
            shown = {card.ts for card in cards}
            edited = {
                c.args["ts"]
                for c in server.calls_to("chat.update")[attempts:]
                if c.status == 200 and c.args["ts"] in shown
            }
            # Each edit takes a second at least (its 429's Retry-After): the sweep stopped
            # after CARD_EDITS_PER_SWEEP (5 s), short of the twelve.
            assert 0 < len(edited) < count, edited
            for _ in range(count):
                clock.tick(timedelta(minutes=1))
                await sweep_once(slack.bot.services)
            await slack.settle()
            for card in cards:
                assert "approval_approve" not in card_json(server, card.ts)


async def test_a_click_on_an_expired_card_whose_answer_cannot_reach_slack_moves_the_run_on(
    repo: Repository,
) -> None:
    """A click on a card whose approval expired unswept stores the expiry and claims the
    run's resume (``on_expiry = "deny"``). The clicker's ":hourglass: expired" went to the
    response URL before that resume: a dropped connection there raised, and the run waited
    out its lease though nobody would ever click again."""
    with freeze_time("2026-11-30 10:00:00", real_asyncio=True) as clock:
        async with running_bot(make_config(), repo) as slack:
            await slack.mention("U0REQUESTER", calls(("restart_service", {"service": "db"})))
            [card] = slack.cards()
            clock.tick(timedelta(minutes=16))  # restart_service: ttl 15m, on_expiry "deny"
            slack.server.unreachable(RESPONSE_URL_METHOD, times=10)
            await slack.server.click("U0APPROVER1", card, "approval_approve")
            await slack.settle()
            [(run, _)] = await repo.list_runs()
            assert run.status == "completed", run.status
    assert executed("restart_service") == []


async def test_a_card_the_sweeper_cannot_draw_does_not_keep_the_others_unedited(
    repo: Repository,
) -> None:
    """Two decided cards marked while Slack refused their edits; the older one can no longer
    be drawn (its stored approvers are a number, not a list: reading it raises). Sweeps
    take the oldest mark first and the raise ended their card edits there, every sweep, as
    long as the mark stayed: no other card marked due was ever edited again."""
    with freeze_time("2026-12-03 10:00:00", real_asyncio=True) as clock:
        async with running_bot(make_config(), repo) as slack:
            server = slack.server
            for service in ("db", "web"):
                await slack.mention("U0REQUESTER", calls(("restart_service", {"service": service})))
            broken, kept = slack.cards()
            for card in (broken, kept):
                server.rate_limit("chat.update", times=4, retry_after=0)
                await deny(slack, card)
                clock.tick(timedelta(seconds=1))
            [row] = [
                a
                for run, _ in await repo.list_runs()
                for a in await repo.approvals_for_run(run.id)
                if a.card_ts == broken.ts
            ]
            await repo.execute_sql(
                "UPDATE approvals SET approvers = '5' WHERE id = :id", {"id": row.id}
            )
            for _ in range(3):
                clock.tick(timedelta(minutes=1))
                await sweep_once(slack.bot.services)
                await slack.settle()
            assert "approval_approve" not in card_json(server, kept.ts)
